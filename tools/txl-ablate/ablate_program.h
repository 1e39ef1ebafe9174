#pragma once
// What txl-ablate does beside its main: its flags, and the run they ask for (the report, a Slurm
// submission, or the variants' experiments with --dump-config), printed and turned into the
// exit status.

#include <string>
#include <vector>

#include "txl/config/command_line.h"
#include "txl/experiment/ablation.h"

namespace CLI {
class App;
}

namespace txl::ablate {

// What the command line asks for.
struct AblateRequest {
  config::CommandLine line;             // --config FILE (or the file as the argument), --set
  experiment::AblationOptions options;  // --only, --eval-max-tokens, --jobs, --job, --quiet, ...
  bool slurm = false;                   // --slurm: submit a job array and the report after it
  std::vector<std::string> sbatch;      // --sbatch options for --slurm
  bool no_plots = false, no_sweep = false;
};

// txl-ablate's flags on `app`, into `request`.
void add_ablate_flags(CLI::App& app, AblateRequest& request);

// Runs the request (argv: the program's, for ProcessSetup and the resume hint) and returns the
// exit status: 0, 1 when jobs failed (after the report), 128 + signal when interrupted. Throws
// txl::Error on bad input.
int run_ablate(AblateRequest& request, int argc, char** argv);

}  // namespace txl::ablate
