// txl-train: trains one experiment.
//   txl-train --config experiments/kjv_xl.yaml [--set train.max_steps=500] [--resume]
// Ctrl-C / SIGTERM: the step in flight finishes, a checkpoint is written, exit 130 / 143.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>

#include "txl/config/load.h"
#include "txl/train/trainer.h"
#include "txl/util/error.h"

int main(int argc, char** argv) {
  CLI::App app{"txl-train: train a Transformer-XL or baseline language model from a YAML experiment"};
  std::string config_path;
  std::vector<std::string> overrides;
  bool resume = false, dump = false, quiet = false;
  app.add_option("--config,-c", config_path, "experiment YAML file")->required();
  app.add_option("--set", overrides, "override a setting: key.path=value (repeatable)");
  app.add_flag("--resume", resume, "continue from the run's last checkpoint");
  app.add_flag("--dump-config", dump, "print the resolved experiment and exit");
  app.add_flag("--quiet", quiet, "no progress lines");
  CLI11_PARSE(app, argc, argv);
  try {
    auto config = txl::config::load_experiment(config_path, overrides);
    if (dump) {
      std::cout << txl::config::dump_experiment(config);
      return 0;
    }
    txl::train::install_stop_handlers();
    auto summary = txl::train::train(config, {resume, quiet});
    if (summary.status == txl::train::TrainStatus::kInterrupted) {
      int sig = txl::train::stop_signal().load();
      std::fprintf(stderr, "interrupted at step %lld; resume with: txl-train --config %s --resume\n",
                   static_cast<long long>(summary.step), config_path.c_str());
      return 128 + sig;
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", txl::error_message(e).c_str());
    return 1;
  }
}
