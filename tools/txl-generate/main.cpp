// txl-generate: text from a checkpoint; the model and its tokenizer are rebuilt from it alone.
//   txl-generate runs/kjv_ablation/xl/checkpoint_best.safetensors --prompt "In the beginning"
//   txl-generate CKPT --prompts prompts.txt --temperature 0.8 --top-p 0.9 --seed 7 --json
//   echo "And God said" | txl-generate CKPT --max-new-tokens 200 --ignore-eos
//   txl-generate CKPT --context-file book.txt --prompt "" --mem-len 1024
// The experiment is the checkpoint's own: --set changes eval.* (the decoding lengths),
// run.threads or run.device; --tgt-len, --mem-len, ..., --threads are shorthand for such a --set.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>

#include "txl/config/command_line.h"
#include "txl/config/load.h"
#include "txl/eval/generate_run.h"
#include "txl/util/error.h"
#include "txl/util/process_setup.h"

int main(int argc, char** argv) {
  CLI::App app{"txl-generate: text from a txl checkpoint"};
  txl::config::CommandLine line;
  txl::config::CommandLineOptions experiment;
  experiment.config = txl::config::CommandLineOptions::Config::kAbsent;  // the checkpoint's own
  experiment.set_help = "override eval.*, run.threads or run.device of the checkpoint's experiment";
  txl::config::add_experiment_options(app, line, experiment);
  for (const char* key : {"tgt_len", "mem_len", "clamp_len", "same_length"}) {
    std::string flag = std::string("--") + key;
    std::replace(flag.begin(), flag.end(), '_', '-');
    txl::config::add_set_shorthand(app, line, flag, std::string("eval.") + key,
                                   "decoding length: --set eval." + std::string(key));
  }
  txl::config::add_set_shorthand(app, line, "--threads", "run.threads", "intra-op threads, 0 = all cores");
  txl::eval::GenerateRequest request;
  auto& o = request.options;
  app.add_option("checkpoint", request.checkpoint, "checkpoint file (.safetensors)")->required();
  app.add_option("--prompt", request.prompts, "a prompt (repeatable); none: --prompts or stdin");
  app.add_option("--prompts", request.prompts_file, "a file of prompts, one a line");
  app.add_option("--context-file", request.context_file, "text read into the memory before each prompt");
  app.add_option("--max-new-tokens", o.max_new_tokens, "tokens to generate at most per prompt")->capture_default_str();
  app.add_option("--temperature", o.temperature, "0 = greedy")->capture_default_str();
  app.add_option("--top-k", o.top_k, "draw among the k most probable tokens, 0 = all")->capture_default_str();
  app.add_option("--top-p", o.top_p, "draw among the smallest set of mass >= p, 1 = all")->capture_default_str();
  app.add_option("--seed", o.seed, "seed of the draws")->capture_default_str();
  app.add_option("--stop", o.stop, "stop a prompt's text at this string (repeatable)");
  app.add_option("--batch-size", o.batch_size, "prompts generated together")->capture_default_str();
  bool ignore_eos = false;
  app.add_flag("--ignore-eos", ignore_eos, "go on after <eos> (it is a newline)");
  app.add_flag("--json", request.json, "one JSON line per prompt and a summary line");
  CLI11_PARSE(app, argc, argv);
  request.overrides = line.overrides;
  request.stop_at_eos = !ignore_eos;
  try {
    const auto loaded = txl::eval::load_generation(request);
    if (line.dump) {
      std::cout << txl::config::dump_experiment(loaded.config);
      return 0;
    }
    txl::ProcessSetup setup;
    setup.threads = loaded.config.run.threads;
    setup.apply(argv);  // may re-execute this program: before reading stdin
    txl::eval::run_generate(request, loaded, std::cin, std::cout);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", txl::error_message(e).c_str());
    return 1;
  }
}
