// txl-ablate: trains and evaluates every variant of an ablation file (once per seed of its
// `seeds:`), then writes the report.
//   txl-ablate --config experiments/kjv_ablation.yaml [--set train.max_steps=500] [--only a,b]
//   txl-ablate experiments/kjv_ablation.yaml --jobs 2      (two jobs at a time, threads shared)
//   txl-ablate experiments/kjv_ablation.yaml --slurm [--sbatch=--time=60]   (a Slurm job array)
// Finished jobs are skipped and a half-finished one resumes, so after Ctrl-C (exit 130) or
// SIGTERM (exit 143) the same command continues where it stopped. A failed job is reported and
// the others still run (exit 1 after the report).
#include <CLI/CLI.hpp>

#include <cstdio>

#include "txl-ablate/ablate_program.h"
#include "txl/util/error.h"

int main(int argc, char** argv) {
  CLI::App app{
      "txl-ablate: train and evaluate every variant of an ablation, then write "
      "runs/<ablation>/report.md, results.json, results.csv and plots"};
  txl::ablate::AblateRequest request;
  txl::ablate::add_ablate_flags(app, request);
  CLI11_PARSE(app, argc, argv);
  try {
    return txl::ablate::run_ablate(request, argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", txl::error_message(e).c_str());
    return 1;
  }
}
