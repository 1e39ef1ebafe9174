// txl-bench: training and evaluation speed of one model and batch configuration, by default the
// bench model on random token ids; tools/txl-bench/README.md defines every figure and flag.
// Progress goes to stderr, the table or the JSON object to stdout.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>

#include "txl-bench/bench_program.h"
#include "txl/bench/run.h"
#include "txl/config/command_line.h"
#include "txl/config/load.h"
#include "txl/util/error.h"
#include "txl/util/fs.h"
#include "txl/util/log.h"
#include "txl/util/process_setup.h"

int main(int argc, char** argv) {
  CLI::App app{
      "txl-bench: training and evaluation throughput, MFU, memory, and the cost of "
      "sliding-window against memory evaluation"};
  txl::config::CommandLine line;
  txl::bench::BenchRequest request;
  bool quiet = false;
  txl::bench::add_bench_flags(app, line, request, &quiet);
  CLI11_PARSE(app, argc, argv);
  try {
    if (quiet) txl::log::set_level(txl::log::Level::kQuiet);  // the whole run
    const auto config = line.experiment();
    if (line.dump) {
      std::cout << txl::config::dump_experiment(config);
      txl::fs::flush_output(std::cout, "standard output");
      return 0;
    }
    txl::ProcessSetup setup;
    setup.threads = config.run.threads;
    request.threads = setup.apply(argv);
    txl::bench::run(config, request, std::cout);
    txl::fs::flush_output(std::cout, "standard output");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", txl::error_message(e).c_str());
    return 1;
  }
}
