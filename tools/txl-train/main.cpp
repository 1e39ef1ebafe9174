// txl-train: trains one experiment.
//   txl-train --config experiments/kjv_xl.yaml [--set train.max_steps=500] [--resume | --overwrite]
// Data parallel: torchrun --no-python --nproc-per-node N txl-train --config ...  (or srun).
// Ctrl-C / SIGTERM: the step in flight finishes, a checkpoint is written, exit 130 / 143.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>

#include "txl/config/command_line.h"
#include "txl/config/device.h"
#include "txl/config/load.h"
#include "txl/dist/group.h"
#include "txl/train/trainer.h"
#include "txl/util/error.h"
#include "txl/util/fs.h"
#include "txl/util/process.h"
#include "txl/util/process_setup.h"

int main(int argc, char** argv) {
  CLI::App app{
      "txl-train: train a Transformer-XL or baseline language model from a YAML experiment"};
  txl::config::CommandLine line;
  txl::config::CommandLineOptions experiment;
  experiment.config = txl::config::CommandLineOptions::Config::kRequired;
  experiment.config_help = "experiment YAML file";
  txl::config::add_experiment_options(app, line, experiment);
  txl::train::TrainOptions options;
  bool resume = false, overwrite = false;
  auto* resume_flag = app.add_flag("--resume", resume, "continue from the run's last checkpoint");
  app.add_flag("--overwrite", overwrite,
               "delete the run folder's checkpoints and metrics, and start again")
      ->excludes(resume_flag);
  app.add_flag("--quiet", options.quiet, "no progress lines");
  app.add_option("--pause-at-step", options.pause_at_step,
                 "checkpoint and exit 0 once this step is done (continue with --resume)");
  CLI11_PARSE(app, argc, argv);
  std::string who;  // "rank R: " in a data-parallel job
  try {
    const auto config = line.experiment();
    if (line.dump) {
      std::cout << txl::config::dump_experiment(config);
      txl::fs::flush_output(std::cout, "standard output");
      return 0;
    }
    const auto env = txl::dist::enter_job(who);
    txl::ProcessSetup setup;
    setup.threads = config.run.threads;
    setup.processes_per_node = env.local_world_size;  // a data-parallel job shares the node's cores
    setup.apply(argv);  // before the rendezvous: it may re-execute this program
    options.start = resume      ? txl::train::StartMode::kResume
                    : overwrite ? txl::train::StartMode::kOverwrite
                                : txl::train::StartMode::kNew;
    const bool cuda = txl::config::resolve_device(config.run.device, env.local_rank).is_cuda();
    options.group =
        txl::dist::Group::create(env, std::chrono::seconds(config.run.dist_timeout), cuda);
    txl::util::install_stop_handlers();  // after the rendezvous, which a signal simply ends
    const auto summary = txl::train::train(config, options);
    if (summary.status != txl::train::TrainStatus::kInterrupted) return 0;
    if (env.rank == 0) {
      auto resume_words = line.arguments();
      resume_words.insert(resume_words.begin(), "txl-train");
      resume_words.push_back("--resume");
      std::fprintf(stderr, "%s at step %lld; resume with: %s\n",
                   summary.signal != 0 ? "interrupted" : "paused",
                   static_cast<long long>(summary.step),
                   txl::process::shell_command(resume_words).c_str());
    }
    return summary.signal != 0 ? 128 + summary.signal : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s%s\n", who.c_str(), txl::error_message(e).c_str());
    return 1;
  }
}
