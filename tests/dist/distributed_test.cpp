// Whole data-parallel jobs: txl-train and txl-eval started as 1 and 2 processes over loopback,
// as torchrun or srun would start them (issue 6). Dropout is off where runs of different world
// sizes are compared: each rank draws its own dropout masks, so only a dropout-free run can match.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "dist_test_support.h"
#include "support/test_support.h"
#include "support/tiny_experiment.h"
#include "txl/config/load.h"
#include "txl/models/checkpoint.h"
#include "txl/util/fs.h"

namespace {

namespace stdfs = std::filesystem;
using txl::test::TempDir;

struct Job {
  std::vector<pid_t> pids;
  std::vector<stdfs::path> logs;  // each rank's stderr
};

// Starts `world` processes of build/bin/`tool` with `args` as the ranks of one job (torchrun's
// variables); world 0 starts one process with no launcher variables at all. Each rank's stderr
// goes to log_dir/rankR.log, its stdout to log_dir/rankR.out.
Job start_tool(int world, const std::string& tool, const std::vector<std::string>& args,
               const stdfs::path& log_dir) {
  stdfs::create_directories(log_dir);
  const int port = txl::test::free_port();
  const auto binary = txl::test::bin_dir() / tool;
  Job job;
  for (int r = 0; r < std::max(world, 1); ++r) {
    const auto log = log_dir / ("rank" + std::to_string(r) + ".log");
    const auto out = log_dir / ("rank" + std::to_string(r) + ".out");
    job.logs.push_back(log);
    pid_t pid = fork();
    if (pid == 0) {
      dup2(::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644), 2);
      dup2(::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644), 1);
      if (world > 0) {
        setenv("RANK", std::to_string(r).c_str(), 1);
        setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
        setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
        setenv("LOCAL_WORLD_SIZE", std::to_string(world).c_str(), 1);
        setenv("MASTER_ADDR", "127.0.0.1", 1);
        setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      }
      std::vector<std::string> argv_s{binary.string()};
      argv_s.insert(argv_s.end(), args.begin(), args.end());
      std::vector<char*> argv;
      for (auto& a : argv_s) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(binary.c_str(), argv.data());
      _exit(127);
    }
    job.pids.push_back(pid);
  }
  return job;
}

// txl-train --config `config` --quiet `args` as `world` ranks (see start_tool).
Job start_job(int world, const stdfs::path& config, const std::vector<std::string>& args,
              const stdfs::path& log_dir) {
  std::vector<std::string> all{"--config", config.string(), "--quiet"};
  all.insert(all.end(), args.begin(), args.end());
  return start_tool(world, "txl-train", all, log_dir);
}

// Exit status of `pid`, or -1 (after killing it) when it runs past `timeout`.
int wait_exit(pid_t pid, std::chrono::seconds timeout = std::chrono::seconds(120)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    if (waitpid(pid, &status, WNOHANG) == pid)
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return -1;
}

// Waits (up to a minute) until rank 0 has written its first metrics record.
void wait_for_first_record(const stdfs::path& metrics) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  std::error_code ec;
  while (std::chrono::steady_clock::now() < deadline &&
         !(stdfs::exists(metrics) && stdfs::file_size(metrics, ec) > 0))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

// Waits for every rank of `job` and expects each to exit with `code`.
void expect_exits(Job& job, int code) {
  for (size_t r = 0; r < job.pids.size(); ++r)
    ASSERT_EQ(wait_exit(job.pids[r]), code) << "rank " << r << ":\n"
                                            << txl::fs::read_file(job.logs[r]);
}

// Runs a training job to its end and expects every rank to exit with `code`.
void run_job(int world, const stdfs::path& config, const std::vector<std::string>& args,
             const stdfs::path& log_dir, int code = 0) {
  auto job = start_job(world, config, args, log_dir);
  expect_exits(job, code);
}

// The jobs' run.device: the CPU (Gloo), or with TXL_TEST_DEVICE=cuda each rank's GPU (NCCL),
// as tools/gpu_check.sh runs these tests on a machine with 2 or more GPUs.
txl::config::Device test_device() {
  const char* value = std::getenv("TXL_TEST_DEVICE");
  return value != nullptr && std::string(value) == "cuda" ? txl::config::Device::kCuda
                                                          : txl::config::Device::kCpu;
}

stdfs::path write_config(const TempDir& dir, const std::string& name, double dropout,
                         int cmem_len = 0) {
  auto c = txl::test::tiny_experiment(dir.path(), name);
  c.run.device = test_device();
  c.model.dropout = dropout;
  c.model.cmem_len = cmem_len;  // compressive memory, in groups of 4
  c.model.cmem_rate = 4;
  c.train.batch_size = 4;
  c.train.max_steps = 20;
  c.train.eval_interval = 10;
  c.run.dist_timeout = 60;
  const auto path = dir / (name + ".yaml");
  txl::fs::write_atomic(path, txl::config::dump_experiment(c));
  return path;
}

// One JSON object a line (metrics.jsonl, txl-eval --json); throws on a line that is not JSON.
std::vector<nlohmann::json> json_lines(const std::string& text) {
  std::istringstream in(text);
  std::string line;
  std::vector<nlohmann::json> out;
  while (std::getline(in, line)) {
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  }
  return out;
}

// The values of `field` in metrics.jsonl records of `kind` ("train" or "eval").
std::vector<double> metric(const stdfs::path& run, const std::string& kind,
                           const std::string& field) {
  std::vector<double> out;
  for (const auto& record : json_lines(txl::fs::read_file(run / "metrics.jsonl"))) {
    if (record.at("kind") == kind && record.contains(field))
      out.push_back(record.at(field).get<double>());
  }
  return out;
}

// Every parameter of two checkpoints agrees to atol + rtol |b|.
void expect_same_parameters(const stdfs::path& a, const stdfs::path& b, double tol) {
  auto ma = txl::models::load_model(a).model, mb = txl::models::load_model(b).model;
  auto pa = ma->named_parameters(), pb = mb->named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (const auto& item : pa) {
    EXPECT_TRUE(txl::test::tensor_near(item.value(), pb[item.key()], tol, tol))
        << item.key() << ": " << a << " vs " << b;
  }
}

void expect_near_all(const std::vector<double>& a, const std::vector<double>& b, double rel,
                     const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  ASSERT_FALSE(a.empty()) << what;
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_NEAR(a[i], b[i], rel * std::abs(b[i])) << what << " #" << i;
}

TEST(DataParallel, TwoRanksReachTheParametersAndPerplexityOfOne) {
  TempDir dir;
  const auto config = write_config(dir, "dp", 0.0);
  const auto runs = dir / "runs";
  run_job(0, config, {"--set", "run.output_dir=" + (runs / "one").string()}, dir / "log1");
  run_job(2, config, {"--set", "run.output_dir=" + (runs / "two").string()}, dir / "log2");
  // Two ranks pause at step 10; one rank resumes their checkpoint (memory re-sharded).
  run_job(2, config,
          {"--set", "run.output_dir=" + (runs / "mixed").string(), "--pause-at-step", "10"},
          dir / "log3");
  run_job(1, config, {"--set", "run.output_dir=" + (runs / "mixed").string(), "--resume"},
          dir / "log4");
  EXPECT_NE(txl::fs::read_file(dir / "log2" / "rank0.log").find("2 processes"), std::string::npos);
  EXPECT_EQ(txl::fs::read_file(dir / "log2" / "rank1.log").find("[train]"), std::string::npos)
      << "rank 1 must leave the logging to rank 0";

  for (const std::string other : {"two", "mixed"}) {
    expect_same_parameters(runs / "one" / "checkpoint_last.safetensors",
                           runs / other / "checkpoint_last.safetensors", 1e-5);
    expect_near_all(metric(runs / other, "eval", "ppl"), metric(runs / "one", "eval", "ppl"), 1e-5,
                    other + " valid ppl");
    expect_near_all(metric(runs / other, "train", "loss"), metric(runs / "one", "train", "loss"),
                    1e-5, other + " train loss");
    expect_near_all(metric(runs / other, "train", "tokens"),
                    metric(runs / "one", "train", "tokens"), 0, other + " tokens");
  }
}

// Two ranks pause with `sets` (--set arguments), and their checkpoint holds every rank's rows of
// the memory tensor `gathered` (4 rows: the whole batch), so one rank resumes it to the one-rank
// run's figures.
void expect_two_ranks_resume_on_one(const std::string& name, int cmem_len,
                                    const std::vector<std::string>& sets,
                                    const std::string& gathered) {
  TempDir dir;
  const auto config = write_config(dir, name, 0.0, cmem_len);
  const auto runs = dir / "runs";
  auto with = [&](std::vector<std::string> args) {
    args.insert(args.end(), sets.begin(), sets.end());
    return args;
  };
  run_job(0, config, with({"--set", "run.output_dir=" + (runs / "one").string()}), dir / "log1");
  run_job(2, config,
          with({"--set", "run.output_dir=" + (runs / "mixed").string(), "--pause-at-step", "10"}),
          dir / "log2");
  const auto saved = txl::models::read_checkpoint(runs / "mixed" / "checkpoint_last.safetensors");
  int rows = 0;
  for (const auto& [tensor, t] : saved.tensors) {
    if (tensor == gathered) rows = static_cast<int>(t.size(0));
  }
  EXPECT_EQ(rows, 4) << "every rank's " << gathered << " belongs in the checkpoint";
  run_job(1, config, with({"--set", "run.output_dir=" + (runs / "mixed").string(), "--resume"}),
          dir / "log3");
  expect_same_parameters(runs / "one" / "checkpoint_last.safetensors",
                         runs / "mixed" / "checkpoint_last.safetensors", 1e-5);
  expect_near_all(metric(runs / "mixed", "eval", "ppl"), metric(runs / "one", "eval", "ppl"), 1e-5,
                  "valid ppl");
}

// Compressive memory: the compressed memory is gathered with the rest of the memory.
TEST(DataParallel, ACompressiveMemoryCheckpointOfTwoRanksResumesOnOne) {
  expect_two_ranks_resume_on_one("cm", /*cmem_len=*/4, {}, "memory/compressed.0");
}

// Memory tokens alone (no memory positions), trained through 2 segments: the tokens written are
// gathered.
TEST(DataParallel, AMemoryTokensCheckpointOfTwoRanksResumesOnOne) {
  expect_two_ranks_resume_on_one(
      "mt", 0,
      {"--set", "model.mem_tokens=2", "--set", "model.mem_len=0", "--set", "train.bptt_segments=1"},
      "memory/tokens");
}

TEST(DataParallel, AResumedTwoRankRunContinuesExactly) {
  TempDir dir;
  const auto config = write_config(dir, "resume", 0.1);  // dropout on: each rank's RNG returns
  const auto runs = dir / "runs";
  run_job(2, config, {"--set", "run.output_dir=" + (runs / "whole").string()}, dir / "log1");
  run_job(2, config,
          {"--set", "run.output_dir=" + (runs / "split").string(), "--pause-at-step", "7"},
          dir / "log2");
  EXPECT_TRUE(stdfs::exists(runs / "split" / "checkpoint_last.safetensors"));
  run_job(2, config, {"--set", "run.output_dir=" + (runs / "split").string(), "--resume"},
          dir / "log3");
  expect_same_parameters(runs / "whole" / "checkpoint_last.safetensors",
                         runs / "split" / "checkpoint_last.safetensors", 0);
  expect_near_all(metric(runs / "split", "train", "loss"), metric(runs / "whole", "train", "loss"),
                  0, "train loss");
  expect_near_all(metric(runs / "split", "eval", "ppl"), metric(runs / "whole", "eval", "ppl"), 0,
                  "valid ppl");
}

TEST(DataParallel, ARankThatDiesStopsTheOthersWithAClearError) {
  for (int victim : {1, 0}) {
    TempDir dir;
    const auto config = write_config(dir, "dies", 0.0);
    auto job =
        start_job(2, config, {"--set", "train.max_steps=1000000", "--set", "train.eval_interval=0"},
                  dir / "log");
    const auto metrics = dir / "runs" / "dies" / "metrics.jsonl";
    wait_for_first_record(metrics);
    ASSERT_TRUE(stdfs::exists(metrics)) << txl::fs::read_file(job.logs[0]);
    kill(job.pids[static_cast<size_t>(victim)], SIGKILL);
    const int survivor = 1 - victim;
    const auto start = std::chrono::steady_clock::now();
    const int code = wait_exit(job.pids[static_cast<size_t>(survivor)], std::chrono::seconds(30));
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    wait_exit(job.pids[static_cast<size_t>(victim)]);
    const auto log = txl::fs::read_file(job.logs[static_cast<size_t>(survivor)]);
    EXPECT_EQ(code, 1) << "rank " << survivor << " after rank " << victim << " died:\n" << log;
    EXPECT_LT(seconds, 30.0);
    EXPECT_NE(log.find("error: rank " + std::to_string(survivor) + ": distributed"),
              std::string::npos)
        << log;
    EXPECT_NE(log.find("died"), std::string::npos) << log;
  }
}

TEST(DataParallel, ASignalToOneRankStopsEveryRankAtTheSameStepWithACheckpoint) {
  TempDir dir;
  const auto config = write_config(dir, "signal", 0.0);
  auto job =
      start_job(2, config, {"--set", "train.max_steps=1000000", "--set", "train.eval_interval=0"},
                dir / "log");
  const auto run = dir / "runs" / "signal";
  wait_for_first_record(run / "metrics.jsonl");
  kill(job.pids[1], SIGINT);  // rank 1 only, as a user's kill of one process would
  EXPECT_EQ(wait_exit(job.pids[0]), 130) << txl::fs::read_file(job.logs[0]);
  EXPECT_EQ(wait_exit(job.pids[1]), 130) << txl::fs::read_file(job.logs[1]);
  auto resumed =
      txl::models::load_model(run / "checkpoint_last.safetensors");  // written and loadable
  EXPECT_NE(txl::fs::read_file(job.logs[0]).find("resume with"), std::string::npos);
}

// The float32 values of a NumPy .npy file as txl-eval writes it (format 1.0).
std::vector<float> read_npy(const stdfs::path& path) {
  const std::string bytes = txl::fs::read_file(path);
  const size_t header =
      10 + static_cast<unsigned char>(bytes[8]) + 256 * static_cast<unsigned char>(bytes[9]);
  std::vector<float> out((bytes.size() - header) / sizeof(float));
  std::memcpy(out.data(), bytes.data() + header, out.size() * sizeof(float));
  return out;
}

// txl-eval as 2 ranks prints the figures of 1 process and writes the same per-token losses; rank
// 1 prints nothing. Memory mode with per-token losses, then sliding mode; batches of 5 rows, so
// the ranks' shares differ (3 and 2).
TEST(DataParallel, TwoRankEvaluationGivesTheFiguresOfOne) {
  TempDir dir;
  const auto config = write_config(dir, "ev", 0.0);
  const auto run = dir / "runs" / "ev";
  run_job(0, config, {"--set", "run.output_dir=" + run.string()}, dir / "train");
  const std::string checkpoint = (run / "checkpoint_last.safetensors").string();
  for (const std::string mode : {"memory", "sliding"}) {
    SCOPED_TRACE(mode);
    std::vector<std::string> args{checkpoint, "--split", "valid,test",   "--mode",
                                  mode,       "--json",  "--batch-size", "5"};
    if (mode == "sliding")
      args.insert(args.end(), {"--window", "12", "--stride", "4", "--max-tokens", "300"});
    std::map<int, std::string> out;
    for (int world : {0, 2}) {
      auto a = args;
      if (mode == "memory")
        a.insert(a.end(), {"--token-losses", (dir / ("losses" + std::to_string(world))).string()});
      const auto logs = dir / (mode + std::to_string(world));
      auto job = start_tool(world, "txl-eval", a, logs);
      expect_exits(job, 0);
      out[world] = txl::fs::read_file(logs / "rank0.out");
      if (world == 2) {
        EXPECT_EQ(txl::fs::read_file(logs / "rank1.out"), "") << "rank 0 speaks for all";
      }
    }
    const auto r0 = json_lines(out[0]), r2 = json_lines(out[2]);
    std::vector<double> p0, p2;
    for (const auto& r : r0) p0.push_back(r.at("ppl").get<double>());
    for (const auto& r : r2) p2.push_back(r.at("ppl").get<double>());
    ASSERT_EQ(p0.size(), 2u) << out[0];
    expect_near_all(p2, p0, 1e-5, mode + " ppl");
    ASSERT_EQ(r2.size(), r0.size()) << out[2];
    for (size_t i = 0; i < r0.size(); ++i)
      EXPECT_EQ(r0[i].at("tokens"), r2[i].at("tokens")) << "the same tokens scored";
    if (mode == "memory") {
      for (const std::string split : {"valid", "test"}) {
        const auto one = read_npy(dir / ("losses0." + split)),
                   two = read_npy(dir / ("losses2." + split));
        ASSERT_EQ(one.size(), two.size()) << split;
        ASSERT_GT(one.size(), 100u) << split;
        for (size_t i = 0; i < one.size(); ++i)
          ASSERT_NEAR(two[i], one[i], 1e-4 * std::abs(one[i]) + 1e-6) << split << " token " << i;
      }
    }
  }
}

// torchrun's store and txl's speak the protocol of one torch release: the torchrun installed beside
// the tests' Python (PyPI's torch that TXL_TORCH=pip builds against), else Debian's (1.13).
std::string find_torchrun() {
  const auto beside = stdfs::path(txl::test::python()).parent_path() / "torchrun";
  if (access(beside.c_str(), X_OK) == 0) return beside.string();
  return "/usr/bin/torchrun";
}

TEST(DataParallel, TorchrunStartsAJob) {
  const std::string torchrun = find_torchrun();
  if (access(torchrun.c_str(), X_OK) != 0)
    GTEST_SKIP() << "no torchrun (Debian package python3-torch)";
  TempDir dir;
  const auto config = write_config(dir, "torchrun", 0.0);
  const auto binary = txl::test::bin_dir() / "txl-train";
  // --redirects 1 --tee 1: Debian's torchrun 1.13 under Python 3.11 fails without them.
  const std::string command = torchrun + " --no_python --nproc_per_node 2 --master_port " +
                              std::to_string(txl::test::free_port()) + " --redirects 1 --tee 1 " +
                              binary.string() + " --config " + config.string() + " --quiet > " +
                              (dir / "torchrun.log").string() + " 2>&1";
  ASSERT_EQ(std::system(command.c_str()), 0) << txl::fs::read_file(dir / "torchrun.log");
  const auto log = txl::fs::read_file(dir / "torchrun.log");
  EXPECT_NE(log.find("2 processes"), std::string::npos) << log;
  EXPECT_EQ(metric(dir / "runs" / "torchrun", "eval", "ppl").size(), 2u);
}

// Under Slurm: srun starts 2 tasks of txl-train, which find their rank, the world size and the
// master from SLURM_* alone. Skipped unless a Slurm cluster answers (tools/slurm_local.sh starts
// a one-node one on Debian; CI has none).
TEST(DataParallel, SrunStartsAJob) {
  if (std::system("timeout 5 sinfo > /dev/null 2>&1") != 0 || access("/usr/bin/srun", X_OK) != 0)
    GTEST_SKIP() << "no Slurm cluster (tools/slurm_local.sh starts one)";
  TempDir dir;
  const auto config = write_config(dir, "srun", 0.0);
  const auto binary = txl::test::bin_dir() / "txl-train";
  const std::string command = "timeout 300 srun --ntasks 2 --cpus-per-task 1 " + binary.string() +
                              " --config " + config.string() + " > " + (dir / "srun.log").string() +
                              " 2>&1";
  ASSERT_EQ(std::system(command.c_str()), 0) << txl::fs::read_file(dir / "srun.log");
  const auto log = txl::fs::read_file(dir / "srun.log");
  EXPECT_NE(log.find("(slurm)"), std::string::npos) << log;
  EXPECT_NE(log.find("2 processes"), std::string::npos) << log;
  // The same run in one process: the same validation perplexity.
  run_job(0, config, {"--set", "run.output_dir=" + (dir / "one").string()}, dir / "log1");
  expect_near_all(metric(dir / "runs" / "srun", "eval", "ppl"), metric(dir / "one", "eval", "ppl"),
                  1e-5, "srun valid ppl");
}

}  // namespace
