// txl-generate: text from a checkpoint; the model and its tokenizer are rebuilt from it alone.
//   txl-generate runs/kjv_ablation/xl/checkpoint_best.safetensors --prompt "In the beginning"
//   txl-generate CKPT --prompts prompts.txt --temperature 0.8 --top-p 0.9 --seed 7 --json
//   echo "And God said" | txl-generate CKPT --max-new-tokens 200 --ignore-eos
//   txl-generate CKPT --context-file book.txt --prompt "" --mem-len 1024
// Text is printed as it is generated; Ctrl-C or SIGTERM ends it cleanly with what it has.
// The experiment is the checkpoint's own: --set changes eval.* (the decoding lengths),
// run.threads or run.device; --tgt-len, --mem-len, ..., --threads are shorthand for such a --set.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>

#include "txl-generate/generate_program.h"
#include "txl/config/command_line.h"
#include "txl/config/load.h"
#include "txl/util/error.h"
#include "txl/util/fs.h"
#include "txl/util/process_setup.h"
#include "txl/util/stop.h"

int main(int argc, char** argv) {
  CLI::App app{"txl-generate: text from a txl checkpoint"};
  txl::config::CommandLine line;
  txl::config::CommandLineOptions experiment;
  experiment.config = txl::config::CommandLineOptions::Config::kAbsent;  // the checkpoint's own
  experiment.set_help = "override eval.*, run.threads or run.device of the checkpoint's experiment";
  txl::config::add_experiment_options(app, line, experiment);
  txl::generation::GenerateRequest request;
  txl::generation::add_generate_flags(app, line, request);
  CLI11_PARSE(app, argc, argv);
  request.overrides = line.overrides;
  try {
    const auto loaded = txl::generation::load_generation(request);
    if (line.dump) {
      std::cout << txl::config::dump_experiment(loaded.config);
      txl::fs::flush_output(std::cout, "standard output");
      return 0;
    }
    txl::ProcessSetup setup;
    setup.threads = loaded.config.run.threads;
    setup.apply(argv);                   // may re-execute this program: before reading stdin
    txl::util::install_stop_handlers();  // Ctrl-C, SIGTERM: the text so far, then exit 130, 143
    const int signal = txl::generation::run_generate(request, loaded, std::cin, std::cout,
                                                     &txl::util::stop_signal());
    txl::fs::flush_output(std::cout, "standard output");
    if (signal != 0)
      std::fprintf(stderr, "interrupted by signal %d; the output ends there\n", signal);
    return signal != 0 ? 128 + signal : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", txl::error_message(e).c_str());
    return 1;
  }
}
