#include "txl-train/train_program.h"

#include <CLI/CLI.hpp>

#include <cstdio>

#include "txl/util/process.h"

namespace txl::train_program {

train::StartMode TrainRequest::start() const {
  return resume      ? train::StartMode::kResume
         : overwrite ? train::StartMode::kOverwrite
                     : train::StartMode::kNew;
}

void add_train_flags(CLI::App& app, TrainRequest& request) {
  config::CommandLineOptions experiment;
  experiment.config = config::CommandLineOptions::Config::kRequired;
  experiment.config_help = "experiment YAML file";
  config::add_experiment_options(app, request.line, experiment);
  auto* resume_flag =
      app.add_flag("--resume", request.resume, "continue from the run's last checkpoint");
  app.add_flag("--overwrite", request.overwrite,
               "delete the run folder's checkpoints and metrics, and start again")
      ->excludes(resume_flag);
  app.add_flag("--quiet", request.options.quiet, "no progress lines");
  app.add_option("--pause-at-step", request.options.pause_at_step,
                 "checkpoint and exit 0 once this step is done (continue with --resume)");
}

int finish(const TrainRequest& request, const train::TrainSummary& summary, int rank) {
  if (summary.status != train::TrainStatus::kInterrupted) return 0;
  if (rank == 0) {
    auto resume_words = request.line.arguments();
    resume_words.insert(resume_words.begin(), "txl-train");
    resume_words.push_back("--resume");
    std::fprintf(stderr, "%s at step %lld; resume with: %s\n",
                 summary.signal != 0 ? "interrupted" : "paused",
                 static_cast<long long>(summary.step),
                 process::shell_command(resume_words).c_str());
  }
  return summary.signal != 0 ? 128 + summary.signal : 0;
}

}  // namespace txl::train_program
