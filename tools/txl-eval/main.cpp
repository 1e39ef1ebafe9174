// txl-eval: evaluates a checkpoint; the model is rebuilt from the checkpoint alone.
//   txl-eval runs/kjv_xl/checkpoint_best.safetensors --split test --mode memory --mem-len 256
//   txl-eval CKPT --file some.txt --json --token-losses losses.npy
//   txl-eval CKPT --text "In the beginning God created the heaven and the earth."
//   txl-eval CKPT --set data.path=/data/wikitext-103 --split test
//   txl-eval CKPT --sweep            # perplexity against evaluation mem_len (0, Q, 2Q, 4Q, 8Q)
//   torchrun --no_python --nproc_per_node 2 txl-eval CKPT   # data-parallel: the same figures
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>

#include "txl/dist/group.h"
#include "txl/dist/launch.h"
#include "txl/eval/run.h"
#include "txl/util/error.h"
#include "txl/util/openmp.h"

int main(int argc, char** argv) {
  txl::limit_openmp_spinning(argv);
  CLI::App app{"txl-eval: perplexity of a txl checkpoint"};
  txl::eval::EvalRequest request;
  app.add_option("checkpoint", request.checkpoint, "checkpoint file (.safetensors)")->required();
  app.add_option("--split", request.splits, "splits: valid, test, train (default: the experiment's eval.splits)")->delimiter(',');
  app.add_option("--file", request.file, "evaluate this text file instead (with the checkpoint's own tokenizer)");
  app.add_option("--text", request.text, "evaluate this text instead (with the checkpoint's own tokenizer)");
  app.add_option("--set", request.overrides, "override eval.*, data.*, run.threads, run.device or run.precision of the checkpoint's experiment: key.path=value (repeatable)");
  // --mode, --mem-len, ...: shorthand for --set eval.mode=..., eval.mem_len=..., given after the
  // --set overrides (a flag wins over a --set of the same key).
  std::vector<std::string> flag_values(txl::eval::eval_flags().size());
  for (size_t i = 0; i < flag_values.size(); ++i) {
    const auto& flag = txl::eval::eval_flags()[i];
    app.add_option(flag.flag, flag_values[i], std::string(flag.help) + " (--set " + flag.key + ")");
  }
  app.add_option("--threads", request.threads, "intra-op threads (0 = all cores)");
  app.add_option("--token-losses", request.token_losses_path, "write per-token losses in nats, text order, as a float32 NumPy .npy file");
  app.add_flag("--sweep", request.sweep, "perplexity against evaluation mem_len: table, JSON and plot");
  app.add_option("--out", request.out_dir, "folder for sweep results (default: the checkpoint's folder)");
  app.add_flag("--json", request.json, "print results as JSON lines");
  int dist_timeout = 600;
  app.add_option("--dist-timeout", dist_timeout,
                 "data-parallel: seconds a rank waits for the others before giving up");
  CLI11_PARSE(app, argc, argv);
  for (size_t i = 0; i < flag_values.size(); ++i) {
    const auto& flag = txl::eval::eval_flags()[i];
    if (app.count(flag.flag) > 0) request.overrides.push_back(txl::eval::flag_override(flag, flag_values[i]));
  }
  std::string who;  // "rank R: " in a data-parallel job
  try {
    const auto env = txl::dist::enter_job(who);
    request.group = txl::dist::Group::create(env, std::chrono::seconds(dist_timeout), /*cuda=*/false);
    txl::eval::run(request, std::cout);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s%s\n", who.c_str(), txl::error_message(e).c_str());
    return 1;
  }
}
