// txl-ablate: trains and evaluates every variant of an ablation file, then writes the report.
//   txl-ablate experiments/kjv_ablation.yaml [--set train.max_steps=500] [--only vanilla,xl]
// Finished variants are skipped and a half-finished one resumes, so after Ctrl-C (exit 130) or
// SIGTERM (exit 143) the same command continues where it stopped.
#include <c10/util/Exception.h>
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>

#include "txl/config/load.h"
#include "txl/experiment/ablation.h"
#include "txl/train/trainer.h"
#include "txl/util/error.h"
#include "txl/util/process_setup.h"

int main(int argc, char** argv) {
  CLI::App app{
      "txl-ablate: train and evaluate every variant of an ablation, then write "
      "runs/<ablation>/report.md, results.json, results.csv and plots"};
  std::string path;
  std::vector<std::string> overrides, only;
  bool dump = false, quiet = false, no_plots = false;
  std::int64_t max_tokens = 0;
  app.add_option("file", path, "ablation YAML file (a base and named variants)")->required();
  app.add_option("--set", overrides,
                 "override a setting of every variant: key.path=value (repeatable)");
  app.add_option("--only", only,
                 "run only these variants (comma-separated); the others keep their "
                 "cached results")
      ->delimiter(',');
  app.add_option("--eval-max-tokens", max_tokens,
                 "score only the first N tokens of each split in every evaluation (0 = all)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--dump-config", dump, "print every variant's resolved experiment and exit");
  app.add_flag("--quiet", quiet, "no training progress lines");
  app.add_flag("--no-plots", no_plots, "skip the PNG plots");
  CLI11_PARSE(app, argc, argv);
  try {
    auto ablation = txl::config::load_ablation(path, overrides);
    if (dump) {
      for (const auto& [name, config] : ablation.variants) {
        std::cout << "# variant: " << name << "\n" << txl::config::dump_experiment(config) << "\n";
      }
      return 0;
    }
    txl::ProcessSetup setup;
    setup.threads = ablation.variants.front().second.run.threads;  // every variant's (load_ablation)
    setup.apply(argv);
    txl::train::install_stop_handlers();
    txl::experiment::AblationOptions options;
    options.only = only;
    options.quiet = quiet;
    options.eval_max_tokens = max_tokens;
    options.report.plots = !no_plots;
    auto result = txl::experiment::run_ablation(ablation, options);
    if (result.status == txl::experiment::AblationStatus::kInterrupted) {
      std::string command;
      for (int i = 0; i < argc; ++i) command += (i ? " " : "") + std::string(argv[i]);
      std::fprintf(stderr,
                   "interrupted by signal %d during variant %s; finished work is kept. Resume "
                   "with the same command:\n  %s\n",
                   result.signal, result.stopped_variant.c_str(), command.c_str());
      return 128 + result.signal;
    }
    std::cout << result.report.table << "\nreport: " << (result.dir / "report.md").string() << "\n";
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", txl::error_message(e).c_str());
    return 1;
  }
}
