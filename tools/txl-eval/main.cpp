// txl-eval: evaluates a checkpoint; the model is rebuilt from the checkpoint alone.
//   txl-eval runs/kjv_xl/checkpoint_best.safetensors --split test --mode memory --mem-len 256
//   txl-eval CKPT --file some.txt --json --token-losses losses.npy
//   txl-eval CKPT --text "In the beginning God created the heaven and the earth."
//   txl-eval CKPT --set data.path=/data/wikitext-103 --split test
//   txl-eval CKPT --sweep            # perplexity against evaluation mem_len (0, Q, 2Q, 4Q, 8Q)
//   torchrun --no_python --nproc_per_node 2 txl-eval CKPT   # data-parallel: the same figures
// The experiment is the checkpoint's own: --set changes what eval::settable_keys() allows, and
// --mode, --mem-len, ..., --threads are shorthand for such a --set.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>

#include "txl-eval/eval_program.h"
#include "txl/config/command_line.h"
#include "txl/config/load.h"
#include "txl/dist/group.h"
#include "txl/dist/launch.h"
#include "txl/util/error.h"
#include "txl/util/fs.h"
#include "txl/util/process_setup.h"

int main(int argc, char** argv) {
  CLI::App app{"txl-eval: perplexity of a txl checkpoint"};
  txl::config::CommandLine line;
  txl::eval::EvalRequest request;
  txl::eval::add_request_flags(app, line, request);
  CLI11_PARSE(app, argc, argv);
  request.overrides = line.overrides;
  std::string who;  // "rank R: " in a data-parallel job
  try {
    const auto env = txl::dist::enter_job(who);
    auto evaluation = txl::eval::load(request);
    if (line.dump) {
      std::cout << txl::config::dump_experiment(evaluation.config);
      txl::fs::flush_output(std::cout, "standard output");
      return 0;
    }
    txl::ProcessSetup setup;
    setup.threads = evaluation.config.run.threads;
    setup.processes_per_node = env.local_world_size;  // a data-parallel job shares the node's cores
    setup.apply(argv);  // before the rendezvous: it may re-execute this program
    request.group = txl::dist::Group::create(
        env, std::chrono::seconds(evaluation.config.run.dist_timeout), /*cuda=*/false);
    txl::eval::run(request, std::move(evaluation), std::cout);
    txl::fs::flush_output(std::cout, "standard output");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s%s\n", who.c_str(), txl::error_message(e).c_str());
    return 1;
  }
}
