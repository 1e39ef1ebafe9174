// txl-train while another program truncates the cache file it maps (issue 44: `truncate -s
// 100000 data/cache/kjv-*/train.bin` during a run). It used to die of "Bus error" (exit 135)
// without a word; now it ends with one line naming the file and exit status 74, its run folder
// intact, and --resume rebuilds the cache from the corpus (the same bytes as before) and goes on
// from the last checkpoint.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "support/test_support.h"
#include "support/tiny_experiment.h"
#include "txl/config/load.h"
#include "txl/models/checkpoint.h"
#include "txl/train/state.h"
#include "txl/util/fs.h"
#include "txl/util/process.h"
#include "txl/util/process_setup.h"

namespace {

namespace stdfs = std::filesystem;
using txl::test::TempDir;

// The cache file of the train split under `cache` (one experiment's cache folder).
stdfs::path train_split_file(const stdfs::path& cache) {
  std::error_code ec;
  for (const auto& entry : stdfs::recursive_directory_iterator(cache, ec))
    if (entry.path().filename() == "train.bin") return entry.path();
  return {};
}

// Starts txl-train --config `config` with its stderr into `err`; its process id.
pid_t start_training(const stdfs::path& config, const stdfs::path& err) {
  const auto binary = txl::test::bin_dir() / "txl-train";
  const pid_t pid = fork();
  if (pid == 0) {
    const int fd = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 2);
    execl(binary.c_str(), binary.c_str(), "--config", config.c_str(), "--quiet", nullptr);
    _exit(127);
  }
  return pid;
}

// Waits until `path` exists (at most 60 s) or process `pid` ends; whether it exists.
bool appears(const stdfs::path& path, pid_t pid) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    if (stdfs::exists(path)) return true;
    if (waitpid(pid, nullptr, WNOHANG) == pid) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// The exit status of process `pid` (128 + N when signal N ended it, as a shell says).
int exit_status(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::int64_t checkpoint_step(const stdfs::path& path) {
  const auto checkpoint = txl::models::read_checkpoint(path);  // checksum verified
  return txl::train::TrainState::from_json(checkpoint.train_state, path.string()).step;
}

TEST(ChangedCache, ATruncatedTrainSplitEndsTheRunWithALineAndResumeRebuildsIt) {
  TempDir dir;
  auto c = txl::test::tiny_experiment(dir.path(), "bus");
  c.train.max_steps = 1000000;
  c.train.eval_interval = 0;
  c.train.checkpoint_interval = 2;
  const auto config = dir / "bus.yaml";
  txl::fs::write_atomic(config, txl::config::dump_experiment(c));
  const auto run = dir / "runs" / "bus";
  const auto checkpoint = run / "checkpoint_last.safetensors";
  const auto err = dir / "train.err";

  const pid_t pid = start_training(config, err);
  const bool checkpointed = appears(checkpoint, pid);
  const stdfs::path split = train_split_file(dir / "cache");
  if (!checkpointed || split.empty()) ::kill(pid, SIGKILL);
  ASSERT_TRUE(checkpointed) << "no checkpoint: " << txl::fs::read_file(err);
  ASSERT_FALSE(split.empty()) << "no train.bin under " << (dir / "cache");
  const std::string cached = txl::fs::read_file(split);
  stdfs::resize_file(split, 100);  // as `truncate -s 100 .../train.bin` would
  const int status = exit_status(pid);
  const std::string said = txl::fs::read_file(err);
  EXPECT_EQ(status, txl::ProcessSetup::kExitMappedFileChanged) << said;
  EXPECT_NE(said.find("error: " + split.string() + " changed while this process read it"),
            std::string::npos)
      << said;

  // Nothing of the run is damaged: the checkpoint reads back (its checksum holds), every record
  // of metrics.jsonl is whole, and no temporary file is left.
  const std::int64_t step = checkpoint_step(checkpoint);
  std::istringstream metrics(txl::fs::read_file(run / "metrics.jsonl"));
  for (std::string line; std::getline(metrics, line);) {
    EXPECT_TRUE(nlohmann::json::accept(line)) << line;
  }
  for (const auto& entry : stdfs::directory_iterator(run))
    EXPECT_EQ(entry.path().filename().string().find(".tmp."), std::string::npos) << entry.path();

  // --resume: the truncated cache fails its checks and is rebuilt from the corpus, byte for byte
  // what the first run trained on, and training goes on from the checkpoint.
  const auto resumed = txl::process::run_program(
      {(txl::test::bin_dir() / "txl-train").string(), "--config", config.string(), "--quiet",
       "--resume", "--pause-at-step", std::to_string(step + 2)});
  EXPECT_TRUE(resumed.ok()) << resumed.status() << "\n" << resumed.stderr_tail;
  EXPECT_NE(resumed.stderr_tail.find("cache " + split.string() + " is damaged"), std::string::npos)
      << resumed.stderr_tail;
  EXPECT_EQ(txl::fs::read_file(split), cached) << "the cache was rebuilt differently";
  EXPECT_EQ(checkpoint_step(checkpoint), step + 2);
}

}  // namespace
