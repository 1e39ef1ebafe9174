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

#include "txl/config/command_line.h"
#include "txl/config/load.h"
#include "txl/dist/group.h"
#include "txl/dist/launch.h"
#include "txl/eval/run.h"
#include "txl/util/error.h"
#include "txl/util/fs.h"
#include "txl/util/process_setup.h"

int main(int argc, char** argv) {
  CLI::App app{"txl-eval: perplexity of a txl checkpoint"};
  txl::config::CommandLine line;
  txl::config::CommandLineOptions experiment;
  experiment.config = txl::config::CommandLineOptions::Config::kAbsent;  // the checkpoint's own
  experiment.set_help =
      "override eval.*, data.*, run.threads, run.device, run.precision or run.dist_timeout of "
      "the checkpoint's experiment: key.path=value (repeatable)";
  txl::config::add_experiment_options(app, line, experiment);
  txl::eval::add_eval_flags(app, line);
  txl::config::add_set_shorthand(app, line, "--threads", "run.threads",
                                 "intra-op threads, 0 = all cores");
  txl::config::add_set_shorthand(app, line, "--dist-timeout", "run.dist_timeout",
                                 "data-parallel: seconds a rank waits for the others");
  txl::eval::EvalRequest request;
  app.add_option("checkpoint", request.checkpoint, "checkpoint file (.safetensors)")->required();
  app.add_option("--split", request.splits, "splits: valid, test, train (default: eval.splits)")
      ->delimiter(',');
  app.add_option("--file", request.file, "evaluate this text file (the checkpoint's tokenizer)");
  app.add_option("--text", request.text, "evaluate this text (the checkpoint's tokenizer)");
  app.add_option("--token-losses", request.token_losses_path,
                 "write per-token losses in nats, text order, as a float32 NumPy .npy file");
  app.add_flag("--sweep", request.sweep, "perplexity against attention length (memory M with same_length, or sliding window L for "
               "absolute positions; eval.sweep_mem_lens): table, JSON, plot");
  app.add_option("--out", request.out_dir, "sweep results folder (default: the checkpoint's)");
  app.add_flag("--json", request.json, "print results as JSON lines");
  app.add_option("--compare", request.compare,
                 "a second checkpoint (same tokenizer): both on the same tokens, and the ppl ratio's "
                 "paired bootstrap 95% interval");
  app.add_flag("--by-position", request.by_position,
               "also the mean loss at each position of the segment (memory, segments modes)");
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
