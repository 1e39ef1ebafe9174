// txl-ablate as a program: its table and report, Ctrl-C, parallel jobs, reruns, job logs, Slurm.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <fstream>

#include <fmt/core.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <vector>

#include "ablation_test_support.h"
#include "support/test_support.h"
#include "txl/util/fs.h"
#include "txl/util/run_lock.h"

namespace {

using txl::test::TempDir;
namespace stdfs = std::filesystem;

using txl::experiment::ablation_test::read;

struct Child {
  int status = -1;
  std::string out, err;
};

// Writes a tiny ablation YAML using the inline-base form of load_ablation.
std::string write_yaml(const TempDir& dir, std::int64_t max_steps) {
  std::string yaml = fmt::format(
      "# A two-variant smoke ablation on the synthetic corpus; seconds.\n"
      "name: cli\n"
      "output_dir: {0}/runs/cli\n"
      "base:\n"
      "  run: {{seed: 3, threads: 1, log_interval: 2}}\n"
      "  data: {{corpus: synthetic, cache_dir: {0}/cache, tokenizer: {{type: word}},\n"
      "         synthetic: {{documents: 24, gap: 12}}}}\n"
      "  model: {{n_layer: 1, d_model: 16, n_head: 2, d_head: 8, d_inner: 32, dropout: 0.0,\n"
      "          tgt_len: 8, mem_len: 8}}\n"
      "  train: {{batch_size: 4, max_steps: {1}, eval_interval: 3, checkpoint_interval: 3}}\n"
      "  eval: {{batch_size: 4, stride: 4, splits: [test]}}\n"
      "variants:\n"
      "  vanilla: {{model.attn_type: vanilla, model.mem_len: 0}}\n"
      "  xl: {{}}\n",
      dir.path().string(), max_steps);
  auto path = dir / "cli.yaml";
  txl::test::write_text(path, yaml);
  return path.string();
}

Child run_ablate(const std::string& args, const std::string& env = "") {
  TempDir logs;
  std::string cmd = env + " " + (txl::test::bin_dir() / "txl-ablate").string() + " " + args + " >" +
                    (logs / "out").string() + " 2>" + (logs / "err").string();
  Child c;
  c.status = std::system(cmd.c_str());
  c.out = read(logs / "out");
  c.err = read(logs / "err");
  return c;
}

TEST(TxlAblate, PrintsTheTableAndWritesTheReport) {
  TempDir dir;
  auto yaml = write_yaml(dir, 4);
  Child c = run_ablate(yaml + " --no-plots --quiet");
  ASSERT_TRUE(WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0) << c.err;
  EXPECT_NE(c.out.find("| vanilla"), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("| xl"), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("report: "), std::string::npos);
  EXPECT_TRUE(stdfs::exists(dir / "runs" / "cli" / "report.md"));

  Child dump = run_ablate(yaml + " --dump-config --set train.max_steps=9");
  ASSERT_TRUE(WIFEXITED(dump.status) && WEXITSTATUS(dump.status) == 0) << dump.err;
  EXPECT_NE(dump.out.find("# variant: vanilla"), std::string::npos);
  EXPECT_NE(dump.out.find("max_steps: 9"), std::string::npos) << dump.out;

  Child bad = run_ablate(yaml + " --only nope");
  EXPECT_TRUE(WIFEXITED(bad.status) && WEXITSTATUS(bad.status) == 1);
  EXPECT_EQ(bad.err.rfind("error: --only: ablation cli has no variant 'nope'", 0), 0u) << bad.err;

  Child missing = run_ablate((dir / "none.yaml").string());
  EXPECT_TRUE(WIFEXITED(missing.status) && WEXITSTATUS(missing.status) == 1);
  EXPECT_EQ(missing.err.rfind("error: ", 0), 0u) << missing.err;
}

TEST(TxlAblate, SigintCheckpointsAndExits130WithTheResumeCommand) {
  TempDir dir;
  auto yaml = write_yaml(dir, 1000000);  // never finishes on its own
  const stdfs::path metrics = dir / "runs" / "cli" / "vanilla" / "metrics.jsonl";
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::string bin = (txl::test::bin_dir() / "txl-ablate").string();
    std::string err = (dir / "err").string();
    FILE* f = std::freopen(err.c_str(), "w", stderr);
    (void)f;
    ::execl(bin.c_str(), bin.c_str(), yaml.c_str(), "--quiet", "--no-plots", (char*)nullptr);
    ::_exit(127);
  }
  // Wait for training to be under way (a metrics line), then interrupt.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline &&
         (!stdfs::exists(metrics) || stdfs::file_size(metrics) == 0)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(stdfs::exists(metrics)) << "training never started";
  ::kill(pid, SIGINT);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 130);
  std::string err = read(dir / "err");
  EXPECT_NE(err.find("Resume with the same command"), std::string::npos) << err;
  EXPECT_TRUE(stdfs::exists(dir / "runs" / "cli" / "vanilla" / "checkpoint_last.safetensors"));
  EXPECT_FALSE(stdfs::exists(dir / "runs" / "cli" / "report.md"));
}

// Two jobs at a time, each its own single-thread process, give exactly the numbers of one
// process running them in turn; each job keeps its log.
TEST(TxlAblate, JobsInParallelProcessesEqualOneProcess) {
  TempDir serial_dir, parallel_dir;
  Child serial = run_ablate(write_yaml(serial_dir, 4) + " --no-plots --quiet --no-sweep --jobs 1");
  ASSERT_TRUE(WIFEXITED(serial.status) && WEXITSTATUS(serial.status) == 0) << serial.err;
  Child parallel =
      run_ablate(write_yaml(parallel_dir, 4) + " --no-plots --quiet --no-sweep --jobs 2");
  ASSERT_TRUE(WIFEXITED(parallel.status) && WEXITSTATUS(parallel.status) == 0) << parallel.err;
  EXPECT_NE(parallel.err.find("2 at a time with 1 thread(s) each"), std::string::npos)
      << parallel.err;
  auto records = [](const TempDir& d) {
    return nlohmann::json::parse(read(d / "runs" / "cli" / "results.json"))["records"];
  };
  const auto a = records(serial_dir), b = records(parallel_dir);
  ASSERT_EQ(a.size(), b.size());
  ASSERT_GT(a.size(), 0u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i]["loss"], b[i]["loss"]) << i;
  EXPECT_TRUE(stdfs::exists(parallel_dir / "runs" / "cli" / "xl" / "job.log"));
}

// The bytes of a finished ablation's results and every variant's checkpoints under `root`.
std::map<std::string, std::string> finished_files(const stdfs::path& root) {
  std::map<std::string, std::string> out;
  for (const auto& entry : stdfs::recursive_directory_iterator(root)) {
    const std::string name = entry.path().filename().string();
    if (name.find("checkpoint_") == 0 || name == "metrics.jsonl" || name == "eval_results.json" ||
        name == "token_losses.safetensors")
      out[stdfs::relative(entry.path(), root).string()] = read(entry.path());
  }
  return out;
}

// results.json without the figures that are timings.
nlohmann::json results_without_timing(const stdfs::path& file) {
  auto records = nlohmann::json::parse(read(file))["records"];
  for (auto& r : records)
    for (const char* key : {"seconds", "tokens_per_s", "train_seconds", "train_tokens_per_s"})
      r.erase(key);
  return records;
}

// Issue 32, as it was seen: after a finished `txl-ablate FILE`, `--set run.log_interval=20`, or
// the ablation's folder moved and output_dir pointed there, warned "changed since it was
// trained" and trained every variant again. Now neither trains anything; results.json is the
// same but for timings.
TEST(TxlAblate, ARerunWithASafeKeyOrFromAMovedFolderTrainsNothing) {
  TempDir dir;
  const auto yaml = write_yaml(dir, 4);
  Child first = run_ablate(yaml + " --no-plots --quiet --no-sweep --jobs 1");
  ASSERT_TRUE(WIFEXITED(first.status) && WEXITSTATUS(first.status) == 0) << first.err;
  const auto files = finished_files(dir / "runs" / "cli");
  const auto results = results_without_timing(dir / "runs" / "cli" / "results.json");
  Child again =
      run_ablate(yaml + " --no-plots --quiet --no-sweep --jobs 1 --set run.log_interval=20");
  ASSERT_TRUE(WIFEXITED(again.status) && WEXITSTATUS(again.status) == 0) << again.err;
  EXPECT_EQ(again.err.find("training it again"), std::string::npos) << again.err;
  EXPECT_EQ(finished_files(dir / "runs" / "cli"), files);
  EXPECT_EQ(results_without_timing(dir / "runs" / "cli" / "results.json"), results);

  stdfs::rename(dir / "runs", dir / "moved");
  std::string text = read(yaml);
  const std::string from = "output_dir: " + (dir / "runs").string();
  text.replace(text.find(from), from.size(), "output_dir: " + (dir / "moved").string());
  txl::test::write_text(yaml, text);
  Child moved = run_ablate(yaml + " --no-plots --quiet --no-sweep --jobs 1");
  ASSERT_TRUE(WIFEXITED(moved.status) && WEXITSTATUS(moved.status) == 0) << moved.err;
  EXPECT_EQ(moved.err.find("training it again"), std::string::npos) << moved.err;
  EXPECT_EQ(finished_files(dir / "moved" / "cli"), files);
  EXPECT_EQ(results_without_timing(dir / "moved" / "cli" / "results.json"), results);
}

// Issue 32: every `--jobs N` rerun truncated each job's job.log, finished and failed jobs' too,
// and a job's warnings reached only its job.log. A rerun now starts no process for a finished
// job, a job's log keeps every run (one header line each), and its warnings reach the parent's
// stderr as they happen, naming the job.
TEST(TxlAblate, JobLogsKeepEveryRunAndWarningsReachTheParent) {
  TempDir dir;
  const auto yaml = write_yaml(dir, 4);
  Child first = run_ablate(yaml + " --no-plots --quiet --no-sweep --jobs 2");
  ASSERT_TRUE(WIFEXITED(first.status) && WEXITSTATUS(first.status) == 0) << first.err;
  const auto xl = dir / "runs" / "cli" / "xl";
  const std::string vanilla_log = read(dir / "runs" / "cli" / "vanilla" / "job.log");
  const std::string xl_log = read(xl / "job.log");
  ASSERT_NE(xl_log.find("==== txl-ablate job xl, "), std::string::npos) << xl_log;
  // A damaged cache of xl: its job runs again and warns about it.
  std::string cache = read(xl / "eval_results.json");
  cache[cache.find("\"loss\": ") + 8] ^= 1;  // its first digit, another digit
  txl::fs::write_atomic(xl / "eval_results.json", cache);
  Child again = run_ablate(yaml + " --no-plots --quiet --no-sweep --jobs 2");
  ASSERT_TRUE(WIFEXITED(again.status) && WEXITSTATUS(again.status) == 0) << again.err;
  EXPECT_NE(again.err.find("[ablate] job xl: [ablate] warning: " +
                           (xl / "eval_results.json").string() + " fails its checksum"),
            std::string::npos)
      << again.err;
  EXPECT_NE(again.err.find("job vanilla: trained and evaluated earlier; nothing to do"),
            std::string::npos)
      << again.err;
  EXPECT_EQ(read(dir / "runs" / "cli" / "vanilla" / "job.log"), vanilla_log);
  const std::string both = read(xl / "job.log");
  EXPECT_EQ(both.rfind(xl_log, 0), 0u) << "the first run's log is gone:\n" << both;
  EXPECT_NE(both.find("==== txl-ablate job xl, ", xl_log.size()), std::string::npos) << both;
  EXPECT_NE(both.find("fails its checksum", xl_log.size()), std::string::npos) << both;
}

// A txl-ablate started in the background, its stderr in a file.
struct Running {
  pid_t pid = -1;
  stdfs::path err;
  int status = -1;
  bool ended() {  // reaps it once it has ended
    if (status == -1 && ::waitpid(pid, &status, WNOHANG) != pid) status = -1;
    return status != -1;
  }
  int wait() {
    if (status == -1) ::waitpid(pid, &status, 0);
    return status;
  }
};

Running start_ablate(const std::string& yaml, const std::string& jobs, const stdfs::path& err) {
  Running r;
  r.err = err;
  // The file exists before the child runs, so that the parent's polling never reads a file the
  // child has not made yet (a race that failed this test once in a fresh clone's run).
  std::ofstream(err).flush();
  r.pid = ::fork();
  if (r.pid == 0) {
    const std::string bin = (txl::test::bin_dir() / "txl-ablate").string();
    FILE* f = std::freopen(err.c_str(), "w", stderr);
    (void)f;
    ::execl(bin.c_str(), bin.c_str(), yaml.c_str(), "--quiet", "--no-plots", "--no-sweep", "--jobs",
            jobs.c_str(), (char*)nullptr);
    ::_exit(127);
  }
  return r;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// The steps of a run's training records, in order.
std::vector<std::int64_t> train_steps(const stdfs::path& run) {
  std::vector<std::int64_t> steps;
  std::istringstream in(read(run / "metrics.jsonl"));
  for (std::string line; std::getline(in, line);) {
    const auto record = nlohmann::json::parse(line);
    if (record.at("kind") == "train") steps.push_back(record.at("step"));
  }
  return steps;
}

// Issue 44: `txl-ablate abl.yaml & txl-ablate abl.yaml &` trained both variants in both
// processes at once, into the same folders. Now each waits for the one that holds a variant's
// folder (saying so once) and then finds its work done: each variant trains once. This test
// holds vanilla's folder first, so that both start while it is in use.
void two_ablations_at_once(const std::string& jobs) {
  TempDir dir;
  const auto yaml = write_yaml(dir, 4);
  const auto runs = dir / "runs" / "cli";
  auto gate = txl::fs::RunLock::try_acquire(runs / "vanilla");
  ASSERT_TRUE(gate.held());
  Running a = start_ablate(yaml, jobs, dir / "a.err"), b = start_ablate(yaml, jobs, dir / "b.err");
  const std::string waits = "job vanilla: waiting for pid " + std::to_string(::getpid()) + " (" +
                            program_invocation_short_name + "), which holds " +
                            (runs / "vanilla").string() + "\n";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline && !a.ended() && !b.ended() &&
         (count(read(a.err), waits) == 0 || count(read(b.err), waits) == 0))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  gate = txl::fs::RunLock();
  const int status_a = a.wait(), status_b = b.wait();
  const std::string said_a = read(a.err), said_b = read(b.err);
  ASSERT_TRUE(WIFEXITED(status_a) && WEXITSTATUS(status_a) == 0) << said_a;
  ASSERT_TRUE(WIFEXITED(status_b) && WEXITSTATUS(status_b) == 0) << said_b;
  EXPECT_EQ(count(said_a, waits), 1u) << said_a;
  EXPECT_EQ(count(said_b, waits), 1u) << said_b;
  for (const char* variant : {"vanilla", "xl"}) {
    // Its training's lines are in the parent's stderr, or in job.log for a job's process.
    const std::string log = jobs == "1" ? said_a + said_b : read(runs / variant / "job.log");
    EXPECT_EQ(count(log, fmt::format("variant {}: training (", variant)), 1u) << log;
    if (jobs != "1") {
      EXPECT_EQ(count(log, "==== txl-ablate job "), 1u) << log;
    }
    EXPECT_EQ(train_steps(runs / variant), (std::vector<std::int64_t>{2, 4})) << variant;
  }
  EXPECT_TRUE(stdfs::exists(runs / "report.md"));
}

TEST(TxlAblate, TwoAtOnceTrainEachVariantOnce) { two_ablations_at_once("1"); }

TEST(TxlAblate, TwoAtOnceWithJobProcessesTrainEachVariantOnceAndLogItOnce) {
  two_ablations_at_once("2");
}

// --slurm submits the unfinished jobs as an array and the report after it, through sbatch's
// argv; the array's script runs a job when Slurm gives it a task id.
TEST(TxlAblate, SlurmSubmitsAnArrayAndTheReportAfterIt) {
  TempDir dir;
  const auto yaml = write_yaml(dir, 4);
  const stdfs::path bin = dir / "fake_bin";
  stdfs::create_directories(bin);
  txl::test::write_text(
      bin / "sbatch", "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done >> " +
                          (dir / "calls").string() + "\necho ---- >> " + (dir / "calls").string() +
                          "\necho 4242\n");
  stdfs::permissions(bin / "sbatch", stdfs::perms::owner_all);
  Child c = run_ablate(yaml + " --slurm --sbatch=--time=5 --no-sweep",
                       "PATH=" + bin.string() + ":\"$PATH\"");
  ASSERT_TRUE(WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0) << c.err;
  const std::string calls = read(dir / "calls");
  EXPECT_NE(calls.find("--parsable\n--time=5\n" + (dir / "runs/cli/slurm/jobs.sh").string()),
            std::string::npos)
      << calls;
  EXPECT_NE(calls.find("--dependency=afterany:4242\n--time=5\n"), std::string::npos) << calls;
  const std::string script = read(dir / "runs/cli/slurm/jobs.sh");
  EXPECT_NE(script.find("#SBATCH --array=0-1"), std::string::npos) << script;
  EXPECT_NE(script.find("labels=( vanilla xl)"), std::string::npos) << script;
  // Task 1 of the array trains and evaluates xl alone.
  const std::string task = "cd " + dir.path().string() + " && SLURM_ARRAY_TASK_ID=1 bash " +
                           (dir / "runs/cli/slurm/jobs.sh").string() + " >/dev/null 2>&1";
  ASSERT_EQ(std::system(task.c_str()), 0);
  EXPECT_TRUE(stdfs::exists(dir / "runs/cli/xl/done.json"));
  EXPECT_FALSE(stdfs::exists(dir / "runs/cli/vanilla/done.json"));
}

}  // namespace
