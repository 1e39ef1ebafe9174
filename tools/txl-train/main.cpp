// txl-train: trains one experiment.
//   txl-train --config experiments/kjv_xl.yaml [--set train.max_steps=500] [--resume | --overwrite]
// Data parallel: torchrun --no-python --nproc-per-node N txl-train --config ...  (or srun).
// Ctrl-C / SIGTERM: the step in flight finishes, a checkpoint is written, exit 130 / 143.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "txl/config/device.h"
#include "txl/config/load.h"
#include "txl/dist/group.h"
#include "txl/train/trainer.h"
#include "txl/util/error.h"
#include "txl/util/openmp.h"

namespace {

// A word as a POSIX shell reads it back: as is when plain, else single-quoted. Only printed,
// for the user to copy; txl itself never runs a shell.
std::string shell_word(const std::string& word) {
  if (!word.empty() && word.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                              "0123456789._-/=:,+@%") == std::string::npos)
    return word;
  std::string out = "'";
  for (char c : word) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// The command that continues the run: the same config and overrides, with --resume.
std::string resume_command(const std::string& config_path, const std::vector<std::string>& overrides) {
  std::string command = "txl-train --config " + shell_word(config_path);
  for (const auto& o : overrides) command += " --set " + shell_word(o);
  return command + " --resume";
}

}  // namespace

int main(int argc, char** argv) {
  txl::limit_openmp_spinning(argv);
  CLI::App app{"txl-train: train a Transformer-XL or baseline language model from a YAML experiment"};
  std::string config_path;
  std::vector<std::string> overrides;
  bool resume = false, overwrite = false, dump = false, quiet = false;
  std::int64_t pause_at_step = 0;
  app.add_option("--config,-c", config_path, "experiment YAML file")->required();
  app.add_option("--set", overrides, "override a setting: key.path=value (repeatable)");
  auto* resume_flag = app.add_flag("--resume", resume, "continue from the run's last checkpoint");
  app.add_flag("--overwrite", overwrite, "delete the run folder's checkpoints and metrics, and start again")
      ->excludes(resume_flag);
  app.add_flag("--dump-config", dump, "print the resolved experiment and exit");
  app.add_flag("--quiet", quiet, "no progress lines");
  app.add_option("--pause-at-step", pause_at_step,
                 "checkpoint and exit 0 once this step is done (continue with --resume)");
  CLI11_PARSE(app, argc, argv);
  std::string who;  // "rank R: " in a data-parallel job
  try {
    auto config = txl::config::load_experiment(config_path, overrides);
    if (dump) {
      std::cout << txl::config::dump_experiment(config);
      return 0;
    }
    const auto env = txl::dist::enter_job(who);
    txl::train::TrainOptions options;
    options.start = resume      ? txl::train::StartMode::kResume
                    : overwrite ? txl::train::StartMode::kOverwrite
                                : txl::train::StartMode::kNew;
    options.quiet = quiet;
    options.pause_at_step = pause_at_step;
    const bool cuda = txl::config::resolve_device(config.run.device, env.local_rank).is_cuda();
    options.group = txl::dist::Group::create(env, std::chrono::seconds(config.run.dist_timeout), cuda);
    txl::train::install_stop_handlers();  // after the rendezvous, which a signal simply ends
    auto summary = txl::train::train(config, options);
    if (summary.status == txl::train::TrainStatus::kInterrupted) {
      if (env.rank == 0) {
        std::fprintf(stderr, "%s at step %lld; resume with: %s\n",
                     summary.signal != 0 ? "interrupted" : "paused",
                     static_cast<long long>(summary.step), resume_command(config_path, overrides).c_str());
      }
      return summary.signal != 0 ? 128 + summary.signal : 0;
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s%s\n", who.c_str(), txl::error_message(e).c_str());
    return 1;
  }
}
