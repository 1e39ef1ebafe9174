#include "txl/train/trainer.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "support/process_as_program.h"
#include "support/test_support.h"
#include "support/tiny_experiment.h"
#include "txl/config/load.h"
#include "txl/data/dataset.h"
#include "txl/eval/evaluator.h"
#include "txl/models/checkpoint.h"
#include "txl/util/fs.h"
#include "txl/util/log.h"

namespace {

// The process as txl-train sets it for tiny_experiment's run.threads: 1 thread.
const auto* const kProcess =
    ::testing::AddGlobalTestEnvironment(new txl::test::ProcessAsProgram(1));

namespace stdfs = std::filesystem;
using txl::test::TempDir;

// metrics.jsonl without the wall-clock fields, which differ between any two runs.
std::string metrics_without_timing(const stdfs::path& run) {
  std::istringstream in(txl::fs::read_file(run / "metrics.jsonl"));
  std::string line, out;
  while (std::getline(in, line)) {
    auto record = nlohmann::json::parse(line);  // throws on a line that is not JSON
    record.erase("tokens_per_s");
    record.erase("seconds");
    out += record.dump() + "\n";
  }
  return out;
}

// The records of metrics.jsonl of one kind ("train" or "eval"), in order.
std::vector<nlohmann::json> records_of(const stdfs::path& run, const std::string& kind) {
  std::istringstream in(txl::fs::read_file(run / "metrics.jsonl"));
  std::string line;
  std::vector<nlohmann::json> out;
  while (std::getline(in, line)) {
    auto record = nlohmann::json::parse(line);
    if (record.at("kind") == kind) out.push_back(record);
  }
  return out;
}

std::vector<torch::Tensor> parameters_of(const stdfs::path& checkpoint) {
  auto loaded = txl::models::load_model(checkpoint);
  std::vector<torch::Tensor> out;
  for (const auto& p : loaded.model->parameters()) out.push_back(p.detach().clone());
  return out;
}

TEST(Trainer, ResumeEqualsAnUninterruptedRun) {
  txl::log::ScopedLevel quiet(txl::log::Level::kQuiet);
  TempDir dir;
  auto whole = txl::test::tiny_experiment(dir.path(), "whole");
  whole.train.checkpoint_interval = 7;  // not a multiple of log or eval intervals
  auto summary = txl::train::train(whole, txl::test::quiet_run());
  EXPECT_EQ(summary.step, 20);

  auto split = txl::test::tiny_experiment(dir.path(), "split");
  split.train.checkpoint_interval = 7;
  // Interrupted at step 8 (mid log and eval interval, after a periodic checkpoint), then at 13.
  auto pause = txl::test::quiet_run(txl::train::StartMode::kNew, 8);
  EXPECT_EQ(txl::train::train(split, pause).status, txl::train::TrainStatus::kInterrupted);
  pause = txl::test::quiet_run(txl::train::StartMode::kResume, 13);
  EXPECT_EQ(txl::train::train(split, pause).status, txl::train::TrainStatus::kInterrupted);
  auto resumed = txl::train::train(split, txl::test::quiet_run(txl::train::StartMode::kResume));
  EXPECT_EQ(resumed.step, 20);

  EXPECT_EQ(metrics_without_timing(dir / "runs/whole"), metrics_without_timing(dir / "runs/split"));
  // The summary holds what the ablation reports, the same for a resumed run: the last progress
  // record's loss and the best validation.
  const auto train_records = records_of(dir / "runs/whole", "train");
  ASSERT_FALSE(train_records.empty());
  EXPECT_EQ(summary.final_train_step, train_records.back().at("step").get<std::int64_t>());
  EXPECT_DOUBLE_EQ(summary.final_train_loss, train_records.back().at("loss").get<double>());
  EXPECT_DOUBLE_EQ(resumed.final_train_loss, summary.final_train_loss);
  double best_ppl = INFINITY;
  for (const auto& r : records_of(dir / "runs/whole", "eval"))
    best_ppl = std::min(best_ppl, r.at("ppl").get<double>());
  ASSERT_TRUE(std::isfinite(best_ppl));
  EXPECT_NEAR(std::exp(summary.best_valid_loss), best_ppl, 1e-9 * best_ppl);
  EXPECT_DOUBLE_EQ(resumed.best_valid_loss, summary.best_valid_loss);
  auto a = parameters_of(dir / "runs/whole/checkpoint_last.safetensors");
  auto b = parameters_of(dir / "runs/split/checkpoint_last.safetensors");
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(txl::test::tensor_equal(a[i], b[i])) << i;
}

// Trains the tiny experiment with `change` twice for 10 steps (checkpoints every 3): "whole"
// uninterrupted, "split" paused at step 5 (`at_pause` then looks at its folder) and resumed;
// expects every logged number and every weight the same. Returns both runs' summaries.
std::vector<txl::train::TrainSummary> expect_resume_equals_whole(
    const TempDir& dir, const std::function<void(txl::config::ExperimentConfig&)>& change,
    const std::function<void(const stdfs::path&)>& at_pause = {}) {
  std::vector<txl::train::TrainSummary> summaries;
  std::vector<std::vector<torch::Tensor>> weights;
  for (const std::string name : {"whole", "split"}) {
    auto c = txl::test::tiny_experiment(dir.path(), name);
    change(c);
    c.train.max_steps = 10;
    c.train.checkpoint_interval = 3;
    if (name == "split") {
      const auto pause = txl::test::quiet_run(txl::train::StartMode::kNew, 5);
      EXPECT_EQ(txl::train::train(c, pause).status, txl::train::TrainStatus::kInterrupted);
      if (at_pause) at_pause(dir / "runs" / name);
    }
    const auto mode =
        name == "split" ? txl::train::StartMode::kResume : txl::train::StartMode::kNew;
    summaries.push_back(txl::train::train(c, txl::test::quiet_run(mode)));
    EXPECT_EQ(summaries.back().step, 10) << name;
    weights.push_back(parameters_of(dir / "runs" / name / "checkpoint_last.safetensors"));
  }
  EXPECT_EQ(metrics_without_timing(dir / "runs/whole"), metrics_without_timing(dir / "runs/split"));
  EXPECT_EQ(weights[0].size(), weights[1].size());
  for (size_t i = 0; i < std::min(weights[0].size(), weights[1].size()); ++i)
    EXPECT_TRUE(txl::test::tensor_equal(weights[0][i], weights[1][i])) << i;
  return summaries;
}

// Compressive memory (a convolution per layer, trained by the attention-reconstruction loss):
// the run paused in the middle and resumed (its checkpoint carries the compressed memory) ends
// where the uninterrupted one does, and the compressors trained away from their start.
TEST(Trainer, CompressiveMemoryTrainsItsCompressorsAndResumesExactly) {
  txl::log::ScopedLevel quiet(txl::log::Level::kQuiet);
  TempDir dir;
  expect_resume_equals_whole(
      dir,
      [](auto& c) {
        c.model.cmem_len = 4;
        c.model.cmem_rate = 4;
      },
      [](const stdfs::path& run) {
        const auto saved = txl::models::read_checkpoint(run / "checkpoint_last.safetensors");
        int compressed = 0;
        for (const auto& [name, t] : saved.tensors)
          compressed += name.find("compressed") != std::string::npos;
        EXPECT_GT(compressed, 0) << "the checkpoint lost the compressed memory";
      });
  auto loaded = txl::models::load_model(dir / "runs/whole/checkpoint_last.safetensors");
  int compressors = 0;
  for (const auto& p : loaded.model->named_parameters()) {
    if (p.key().find(".conv.weight") == std::string::npos) continue;
    ++compressors;
    const int64_t d = p.value().size(0), rate = p.value().size(2);
    const auto start = torch::eye(d).unsqueeze(2).expand({d, d, rate}) / static_cast<double>(rate);
    EXPECT_GT((p.value() - start).abs().max().item<double>(), 1e-6) << p.key() << " never trained";
  }
  EXPECT_EQ(compressors, loaded.model->config().n_layer);
}

// Back-propagation through segments (a step reads 2 segments per stream) with rotary positions:
// the run paused in the middle and resumed ends where the uninterrupted one does, every logged
// number and every weight the same.
TEST(Trainer, ResumeWithBackPropagationThroughSegmentsEqualsAnUninterruptedRun) {
  txl::log::ScopedLevel quiet(txl::log::Level::kQuiet);
  TempDir dir;
  int batch_size = 0;
  const auto summaries = expect_resume_equals_whole(dir, [&](auto& c) {
    c.model.attn_type = txl::config::AttnType::kRope;
    c.train.bptt_segments = 1;
    batch_size = c.train.batch_size;
  });
  // Every step read 2 segments of 16 tokens of each of the batch's streams (scored tokens:
  // more than one segment's, at most two).
  const std::int64_t segment = 16 * batch_size;
  for (const auto& summary : summaries) {
    EXPECT_GT(summary.tokens, 10 * segment);
    EXPECT_LE(summary.tokens, 10 * 2 * segment);
  }
}

// Recurrent memory tokens without memory positions, trained through 2 segments: the run paused
// in the middle (its checkpoint carries the tokens written) and resumed ends where the
// uninterrupted one does, and the tokens written trained away from their start.
TEST(Trainer, MemoryTokensTrainAndResumeExactly) {
  txl::log::ScopedLevel quiet(txl::log::Level::kQuiet);
  TempDir dir;
  auto tokens_only = [](auto& c) {
    c.model.mem_len = 0;
    c.model.mem_tokens = 2;
    c.train.bptt_segments = 1;
  };
  torch::Tensor paused;  // the tokens written, as saved at the pause
  expect_resume_equals_whole(dir, tokens_only, [&](const stdfs::path& run) {
    const auto saved = txl::models::read_checkpoint(run / "checkpoint_last.safetensors");
    int tokens = 0;
    for (const auto& [name, t] : saved.tensors) {
      tokens += name == "memory/tokens";
      if (name == "model/memory_write_emb") paused = t;
    }
    EXPECT_EQ(tokens, 1) << "the checkpoint lost the memory tokens";
  });
  auto loaded = txl::models::load_model(dir / "runs/whole/checkpoint_last.safetensors");
  ASSERT_TRUE(paused.defined());
  const auto* trained = loaded.model->named_parameters().find("memory_write_emb");
  ASSERT_NE(trained, nullptr);
  EXPECT_GT((*trained - paused).abs().max().item<double>(), 1e-6)
      << "the tokens written never trained";
}

TEST(Trainer, GradientAccumulationEqualsOneBatch) {
  txl::log::ScopedLevel quiet(txl::log::Level::kQuiet);
  TempDir dir;
  auto one = txl::test::tiny_experiment(dir.path(), "one");
  one.model.dropout = 0.0;
  one.train.max_steps = 1;
  one.train.eval_interval = 0;
  // an update proportional to the gradient: accumulation shows
  one.train.optimizer = txl::config::Optimizer::kSgd;
  one.train.clip = 0;
  auto two = one;
  two.run.name = "two";
  two.run.output_dir = (dir / "runs/two").string();
  two.train.batch_chunk = 2;
  txl::train::train(one, txl::test::quiet_run());
  txl::train::train(two, txl::test::quiet_run());
  auto a = parameters_of(dir / "runs/one/checkpoint_last.safetensors");
  auto b = parameters_of(dir / "runs/two/checkpoint_last.safetensors");
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(txl::test::tensor_near(a[i], b[i], 1e-6, 1e-5)) << i;
}

// Every file of a folder, by name, with its bytes.
std::map<std::string, std::string> folder_bytes(const stdfs::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& entry : stdfs::directory_iterator(dir))
    out[entry.path().filename().string()] = txl::fs::read_file(entry.path());
  return out;
}

// Trains `c` until it diverges; returns the checkpoint the error names as the last good one, as
// "path (step s)" ("" when it names none), after checking that the error says `expected`.
std::string named_good_checkpoint(const txl::config::ExperimentConfig& c,
                                  const std::string& expected) {
  std::string message;
  try {
    txl::train::train(c, txl::test::quiet_run());
  } catch (const txl::Error& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("training diverged"), std::string::npos) << message;
  EXPECT_NE(message.find(expected), std::string::npos) << message;
  const std::string marker = "The last good checkpoint is ";
  const auto at = message.find(marker);
  if (at == std::string::npos || message.compare(at + marker.size(), 4, "none") == 0) return "";
  return message.substr(at + marker.size(),
                        message.find(')', at) + 1 - at - marker.size());  // "path (step s)"
}

// The named checkpoint evaluates to a finite loss, below the divergence bound.
void expect_good(const std::string& checkpoint) {
  ASSERT_TRUE(stdfs::exists(checkpoint)) << checkpoint;
  auto loaded = txl::models::load_model(checkpoint);
  auto data = txl::data::load_dataset(loaded.config.data, loaded.tokenizer);
  auto r =
      txl::eval::evaluate(loaded.model, data.valid, txl::eval::resolve_settings(loaded.config));
  EXPECT_TRUE(std::isfinite(r.loss)) << checkpoint;
  EXPECT_LT(r.loss, 3 * std::log(static_cast<double>(loaded.vocab_size))) << checkpoint;
}

// lr 1e30: the first update sends the weights to ~1e30 and the next loss is NaN. The checkpoint
// named is the initial one (step 0), whose loss was finite, never the weights of step 1.
TEST(Trainer, ANonFiniteLossNamesACheckpointThatEvaluatesToAFiniteLoss) {
  txl::log::ScopedLevel quiet(txl::log::Level::kQuiet);
  TempDir dir;
  auto c = txl::test::tiny_experiment(dir.path(), "nan");
  c.train.optimizer = txl::config::Optimizer::kSgd;
  c.train.schedule = txl::config::Schedule::kConstant;
  c.train.warmup_steps = 0;
  c.train.lr = 1e30;
  c.train.clip = 0;
  c.train.checkpoint_interval = 1;
  c.train.eval_interval = 0;
  const std::string good = named_good_checkpoint(c, "at step 2");
  ASSERT_FALSE(good.empty());
  EXPECT_NE(good.find("(step 0)"), std::string::npos) << good;
  expect_good(good.substr(0, good.find(" (step")));
}

// A run that learns for a while and then diverges names a later checkpoint, and it evaluates to
// a finite loss (the weights one step before the failure would not: they gave it).
TEST(Trainer, DivergenceNamesACheckpointThatEvaluatesToAFiniteLoss) {
  txl::log::ScopedLevel quiet(txl::log::Level::kQuiet);
  TempDir dir;
  auto c = txl::test::tiny_experiment(dir.path(), "diverge");
  c.train.optimizer = txl::config::Optimizer::kSgd;
  c.train.schedule = txl::config::Schedule::kConstant;
  c.train.warmup_steps = 0;
  c.train.lr = 10;  // slowly unstable: a few sound steps, then the loss explodes
  c.train.clip = 0;
  c.train.max_steps = 200;
  c.train.checkpoint_interval = 1;
  c.train.eval_interval = 0;
  c.train.divergence_patience = 1;
  const std::string good = named_good_checkpoint(c, "training diverged");
  ASSERT_FALSE(good.empty());
  EXPECT_EQ(good.find("(step 0)"), std::string::npos)
      << "no sound step before the divergence: " << good;
  expect_good(good.substr(0, good.find(" (step")));
}

// lr 1e3 (issue 32): every validation loss is far above the divergence bound, but finite. Before,
// the first validation was marked best whatever its loss (2.5e7 on KJV), while the guard refused
// the same weights for checkpoint_last. Best must meet the bound the guard applies.
TEST(Trainer, CheckpointBestNeverHoldsWeightsAboveTheDivergenceBound) {
  txl::log::ScopedLevel quiet(txl::log::Level::kQuiet);
  TempDir dir;
  auto c = txl::test::tiny_experiment(dir.path(), "best");
  c.train.lr = 1e3;
  c.train.warmup_steps = 0;
  c.train.schedule = txl::config::Schedule::kConstant;
  c.train.max_steps = 4;
  c.train.eval_interval = 1;
  c.train.checkpoint_interval = 1;
  c.train.divergence_patience = 1000;  // the run goes on, so that it validates these weights
  const auto summary = txl::train::train(c, txl::test::quiet_run());
  const auto run = stdfs::path(c.run.output_dir);
  const auto vocab = txl::data::load_dataset(c.data).tokenizer->vocab_size();
  const double bound = 3 * std::log(static_cast<double>(vocab));
  int above = 0;
  for (const auto& r : records_of(run, "eval")) above += r.at("loss").get<double>() > bound;
  ASSERT_GT(above, 0) << "no validation above the bound: the run does not test the rule";
  EXPECT_LT(summary.best_step, 0) << "best at step " << summary.best_step << ", valid loss "
                                  << summary.best_valid_loss << " > bound " << bound;
  EXPECT_FALSE(stdfs::exists(run / "checkpoint_best.safetensors"));
  // Control: the same run with the guard off keeps its best validation, as it always did.
  auto off = c;
  off.run.output_dir = (dir / "runs" / "best_off").string();
  off.train.divergence_factor = 0;
  const auto unguarded = txl::train::train(off, txl::test::quiet_run());
  EXPECT_GE(unguarded.best_step, 1);
  EXPECT_TRUE(stdfs::exists(stdfs::path(off.run.output_dir) / "checkpoint_best.safetensors"));
}

TEST(Trainer, ARerunWithoutResumeRefusesAndTouchesNothing) {
  txl::log::ScopedLevel quiet(txl::log::Level::kQuiet);
  TempDir dir;
  auto c = txl::test::tiny_experiment(dir.path(), "again");
  c.train.max_steps = 4;
  txl::train::train(c, txl::test::quiet_run());
  const auto run = dir / "runs/again";
  const auto before = folder_bytes(run);
  const auto metrics_before = metrics_without_timing(run);
  TXL_EXPECT_THROW_WITH(txl::train::train(c, txl::test::quiet_run()), "--resume, or");
  TXL_EXPECT_THROW_WITH(txl::train::train(c, txl::test::quiet_run()), "--overwrite");
  EXPECT_EQ(folder_bytes(run), before);
  // --overwrite starts again from nothing: the same run writes the same records once.
  txl::train::train(c, txl::test::quiet_run(txl::train::StartMode::kOverwrite));
  EXPECT_EQ(metrics_without_timing(run), metrics_before);
}

TEST(Trainer, ResumeWithAChangedModelKeyNamesItAndTouchesNothing) {
  txl::log::ScopedLevel quiet(txl::log::Level::kQuiet);
  TempDir dir;
  auto c = txl::test::tiny_experiment(dir.path(), "changed");
  txl::train::train(c, txl::test::quiet_run(txl::train::StartMode::kNew, 6));
  const auto run = dir / "runs/changed";
  const auto before = folder_bytes(run);
  auto wider = c;
  wider.model.d_inner = 128;
  TXL_EXPECT_THROW_WITH(
      txl::train::train(wider, txl::test::quiet_run(txl::train::StartMode::kResume)),
      "model.d_inner: 64 -> 128");
  auto other_optimizer = c;
  other_optimizer.train.optimizer = txl::config::Optimizer::kSgd;
  TXL_EXPECT_THROW_WITH(
      txl::train::train(other_optimizer, txl::test::quiet_run(txl::train::StartMode::kResume)),
      "train.optimizer");
  EXPECT_EQ(folder_bytes(run), before);
  // Keys that may change on resume do not stop it.
  auto longer = c;
  longer.train.max_steps = 24;
  longer.run.log_interval = 3;
  EXPECT_EQ(txl::train::train(longer, txl::test::quiet_run(txl::train::StartMode::kResume)).step,
            24);
}

TEST(Trainer, ResumeWithoutACheckpointSaysSo) {
  TempDir dir;
  auto c = txl::test::tiny_experiment(dir.path(), "none");
  TXL_EXPECT_THROW_WITH(txl::train::train(c, txl::test::quiet_run(txl::train::StartMode::kResume)),
                        "nothing to resume");
  // The refused start leaves nothing: not the folder its lock was taken in.
  EXPECT_FALSE(stdfs::exists(dir / "runs/none"));
}

// What a kill -9 during a write leaves, and a metrics record cut mid-line: a resume removes the
// one (but not a live process's temporary) and drops the other, and continues exactly.
TEST(Trainer, ResumeRepairsWhatAKilledWriteLeft) {
  txl::log::ScopedLevel quiet(txl::log::Level::kQuiet);
  TempDir dir;
  auto whole = txl::test::tiny_experiment(dir.path(), "whole");
  txl::train::train(whole, txl::test::quiet_run());
  auto split = txl::test::tiny_experiment(dir.path(), "split");
  txl::train::train(split, txl::test::quiet_run(txl::train::StartMode::kNew, 12));
  const auto run = dir / "runs/split";
  pid_t dead = fork();  // a pid that no process has any more
  if (dead == 0) _exit(0);
  waitpid(dead, nullptr, 0);
  const auto stale = run / ("checkpoint_last.safetensors.tmp." + std::to_string(dead));
  const auto live = run / ("checkpoint_best.safetensors.tmp." + std::to_string(getppid()));
  txl::test::write_text(stale, "half a checkpoint");
  txl::test::write_text(live, "being written");
  std::ofstream(run / "metrics.jsonl", std::ios::app) << R"({"kind":"train","step":13,"lo)";
  txl::train::train(split, txl::test::quiet_run(txl::train::StartMode::kResume));
  EXPECT_FALSE(stdfs::exists(stale));
  EXPECT_TRUE(stdfs::exists(live));
  EXPECT_EQ(metrics_without_timing(dir / "runs/whole"), metrics_without_timing(run));
}

// Starts txl-train on `config_path` in `cwd`, waits for its first progress record, sends
// `sig`, and returns the exit status.
int interrupt_child(const stdfs::path& config_path, const stdfs::path& metrics, int sig) {
  const auto binary = txl::test::bin_dir() / "txl-train";
  pid_t pid = fork();
  if (pid == 0) {
    int null = ::open("/dev/null", O_WRONLY);
    dup2(null, 2);
    execl(binary.c_str(), binary.c_str(), "--config", config_path.c_str(), "--quiet", nullptr);
    _exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    std::error_code ec;
    if (stdfs::exists(metrics) && stdfs::file_size(metrics, ec) > 0) break;
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) return -1;  // ended before the signal
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill(pid, sig);
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -2;
}

TEST(Trainer, SignalsCheckpointAndExitWith128PlusTheSignal) {
  TempDir dir;
  for (int sig : {SIGINT, SIGTERM}) {
    const std::string name = sig == SIGINT ? "sigint" : "sigterm";
    auto c = txl::test::tiny_experiment(dir.path(), name);
    c.train.max_steps = 1000000;
    c.train.eval_interval = 0;
    c.run.log_interval = 1;
    const auto config_path = dir / (name + ".yaml");
    txl::fs::write_atomic(config_path, txl::config::dump_experiment(c));
    const auto run = dir / "runs" / name;
    EXPECT_EQ(interrupt_child(config_path, run / "metrics.jsonl", sig), 128 + sig) << name;
    ASSERT_TRUE(stdfs::exists(run / "checkpoint_last.safetensors")) << name;
    auto loaded = txl::models::load_model(run / "checkpoint_last.safetensors");
    EXPECT_EQ(loaded.config.run.name, name);
  }
}

// Starts `txl-train --config config_path --quiet` with its stderr in `err`; returns its pid.
pid_t start_train(const stdfs::path& config_path, const stdfs::path& err) {
  const auto binary = txl::test::bin_dir() / "txl-train";
  pid_t pid = fork();
  if (pid == 0) {
    int file = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(file, 2);
    execl(binary.c_str(), binary.c_str(), "--config", config_path.c_str(), "--quiet", nullptr);
    _exit(127);
  }
  return pid;
}

// Issue 44: two txl-train on one run folder both trained into it, and --overwrite deleted the
// files of the run in progress. The second now stops at once with one line naming the folder and
// the holder's pid, touching no file; once the holder is killed with SIGKILL, a run proceeds.
TEST(Trainer, ASecondTxlTrainOnARunInUseRefusesNamingTheHolderAndTouchesNothing) {
  TempDir dir;
  auto c = txl::test::tiny_experiment(dir.path(), "busy");
  c.train.max_steps = 1000000;  // never ends on its own; writes nothing after its start
  c.train.eval_interval = 0;
  c.run.log_interval = 1000000;
  const auto config_path = dir / "busy.yaml";
  txl::fs::write_atomic(config_path, txl::config::dump_experiment(c));
  const auto run = dir / "runs" / "busy";
  const pid_t holder = start_train(config_path, dir / "holder.err");
  ASSERT_GT(holder, 0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline && !stdfs::exists(run / "metrics.jsonl") &&
         waitpid(holder, nullptr, WNOHANG) == 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_TRUE(stdfs::exists(run / "metrics.jsonl")) << txl::fs::read_file(dir / "holder.err");
  const auto before = folder_bytes(run);
  const std::string binary = (txl::test::bin_dir() / "txl-train").string();
  const std::string second = binary + " --config " + config_path.string() + " --quiet ";
  const std::string err = " 2>" + (dir / "second.err").string();
  for (const char* flag : {"--overwrite", "--resume", ""}) {
    const int status = std::system((second + flag + err).c_str());
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << flag;
    const std::string said = txl::fs::read_file(dir / "second.err");
    EXPECT_EQ(said, "error: " + run.string() + " is in use: pid " + std::to_string(holder) +
                        " (txl-train) is writing it; wait for it to end (or stop it), or give "
                        "this run another run.name or run.output_dir\n")
        << flag;
    EXPECT_EQ(folder_bytes(run), before) << flag;
  }
  kill(holder, SIGKILL);
  waitpid(holder, nullptr, 0);
  const int status = std::system(
      (second + "--overwrite --set train.max_steps=3 --set run.log_interval=1" + err).c_str());
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << txl::fs::read_file(dir / "second.err");
  EXPECT_EQ(records_of(run, "train").size(), 3u);
}

TEST(Trainer, RunDirDefaultsToRunsSlashName) {
  txl::config::ExperimentConfig c;
  c.run.name = "abc";
  EXPECT_EQ(txl::train::run_dir(c), stdfs::path("runs/abc"));
  c.run.output_dir = "/tmp/x";
  EXPECT_EQ(txl::train::run_dir(c), stdfs::path("/tmp/x"));
}

}  // namespace
