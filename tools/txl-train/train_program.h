#pragma once
// What txl-train does beside its main: its flags, and the message that says how to resume.

#include <string>

#include "txl/config/command_line.h"
#include "txl/train/trainer.h"

namespace CLI {
class App;
}

namespace txl::train_program {

// What the command line asks for.
struct TrainRequest {
  config::CommandLine line;     // --config FILE, --set, --dump-config
  train::TrainOptions options;  // --quiet, --pause-at-step
  bool resume = false;          // --resume: continue from the run's last checkpoint
  bool overwrite = false;       // --overwrite: start again over the run folder

  // kResume, kOverwrite or kNew, as the flags say.
  train::StartMode start() const;
};

// txl-train's flags on `app`, into `request`.
void add_train_flags(CLI::App& app, TrainRequest& request);

// The exit status of a finished training: 0, or 128 + signal when a signal stopped it; on rank
// 0 a stop or a pause prints the command that resumes it to stderr.
int finish(const TrainRequest& request, const train::TrainSummary& summary, int rank);

}  // namespace txl::train_program
