// txl-ablate: trains and evaluates every variant of an ablation file, then writes the report.
//   txl-ablate --config experiments/kjv_ablation.yaml [--set train.max_steps=500] [--only a,b]
//   txl-ablate experiments/kjv_ablation.yaml ...   (the file may also come first, without --config)
// Finished variants are skipped and a half-finished one resumes, so after Ctrl-C (exit 130) or
// SIGTERM (exit 143) the same command continues where it stopped.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>

#include "txl/config/command_line.h"
#include "txl/config/load.h"
#include "txl/experiment/ablation.h"
#include "txl/train/trainer.h"
#include "txl/util/error.h"
#include "txl/util/process.h"
#include "txl/util/process_setup.h"

int main(int argc, char** argv) {
  CLI::App app{
      "txl-ablate: train and evaluate every variant of an ablation, then write "
      "runs/<ablation>/report.md, results.json, results.csv and plots"};
  txl::config::CommandLine line;
  txl::config::CommandLineOptions ablation_options;
  ablation_options.config_help = "ablation YAML file (a base and named variants)";
  ablation_options.set_help = "override a setting of every variant: key.path=value (repeatable)";
  txl::config::add_experiment_options(app, line, ablation_options);
  app.add_option("file", line.config_path, "the ablation file, as --config FILE")
      ->excludes(app.get_option("--config"));
  txl::experiment::AblationOptions options;
  bool no_plots = false;
  app.add_option("--only", options.only,
                 "run only these variants (comma-separated); the others keep their cached results")
      ->delimiter(',');
  app.add_option("--eval-max-tokens", options.eval_max_tokens,
                 "score only the first N tokens of each split in every evaluation (0 = all)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--quiet", options.quiet, "no training progress lines");
  app.add_flag("--no-plots", no_plots, "skip the PNG plots");
  CLI11_PARSE(app, argc, argv);
  options.report.plots = !no_plots;
  try {
    TXL_CHECK(!line.config_path.empty(), "name the ablation file: txl-ablate --config FILE");
    const auto ablation = txl::config::load_ablation(line.config_path, line.overrides);
    if (line.dump) {
      for (const auto& [name, config] : ablation.variants)
        std::cout << "# variant: " << name << "\n" << txl::config::dump_experiment(config) << "\n";
      return 0;
    }
    txl::ProcessSetup setup;
    setup.threads =
        ablation.variants.front().second.run.threads;  // every variant's (load_ablation)
    setup.apply(argv);
    txl::train::install_stop_handlers();
    const auto result = txl::experiment::run_ablation(ablation, options);
    if (result.status == txl::experiment::AblationStatus::kInterrupted) {
      std::fprintf(
          stderr,
          "interrupted by signal %d during variant %s; finished work is kept. Resume "
          "with the same command:\n  %s\n",
          result.signal, result.stopped_variant.c_str(),
          txl::process::shell_command(std::vector<std::string>(argv, argv + argc)).c_str());
      return 128 + result.signal;
    }
    std::cout << result.report.table << "\nreport: " << (result.dir / "report.md").string() << "\n";
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", txl::error_message(e).c_str());
    return 1;
  }
}
