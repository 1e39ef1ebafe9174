// txl-prepare: prepares the data of an experiment exactly as txl-train --config FILE would (the
// same loader and the same cache folder): reads the corpus, trains or loads its tokenizer,
// encodes the splits into the cache (data/README.md) and prints the statistics. A later
// txl-train of that experiment reuses all of it.
//   txl-prepare --config experiments/kjv_base.yaml
//   txl-prepare --config experiments/kjv_base.yaml --set data.tokenizer.vocab_size=8000
//   txl-prepare --set data.corpus=wikitext --set data.path=data/corpora/wikitext-103  # defaults
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>

#include "txl/config/command_line.h"
#include "txl/config/load.h"
#include "txl/data/dataset.h"
#include "txl/util/error.h"
#include "txl/util/fs.h"
#include "txl/util/process_setup.h"

int main(int argc, char** argv) {
  CLI::App app{
      "txl-prepare: read an experiment's corpus, build its tokenizer and cache the "
      "encoded splits, as txl-train --config FILE would"};
  txl::config::CommandLine line;
  txl::config::add_experiment_options(app, line);
  CLI11_PARSE(app, argc, argv);
  try {
    const auto config = line.experiment();
    if (line.dump) {
      std::cout << txl::config::dump_experiment(config);
      txl::fs::flush_output(std::cout, "standard output");
      return 0;
    }
    txl::ProcessSetup setup;
    setup.threads = config.run.threads;
    setup.apply(argv);
    std::cout << txl::data::describe(txl::data::load_dataset(config.data));
    txl::fs::flush_output(std::cout, "standard output");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", txl::error_message(e).c_str());
    return 1;
  }
}
