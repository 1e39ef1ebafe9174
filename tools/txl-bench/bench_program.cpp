#include "txl-bench/bench_program.h"

#include <CLI/CLI.hpp>

namespace txl::bench {

void add_bench_flags(CLI::App& app, config::CommandLine& line, BenchRequest& request, bool* quiet) {
  config::CommandLineOptions experiment;
  experiment.config_help = "experiment YAML file (default: the bench model, config.h's defaults)";
  config::add_experiment_options(app, line, experiment);
  config::add_set_shorthand(app, line, "--threads", "run.threads",
                            "intra-op threads, 0 = all cores");
  app.add_flag("--json", request.json, "print one JSON object instead of the table");
  app.add_flag("--quick", request.quick, "fewer repetitions and smaller probes (under a minute)");
  app.add_option("--vocab", request.vocab, "vocabulary size of the random token ids");
  app.add_flag("--no-bf16", request.skip_bf16, "skip the bf16 autocast measurements");
  app.add_flag("--profile", request.profile, "profile one training step, print the top ops");
  app.add_flag("--profile-eval", request.profile_eval, "profile one memory-mode eval segment");
  app.add_option("--top", request.top, "--profile, --profile-eval: ops listed");
  app.add_flag("--by-shape", request.by_shape, "profiles: tell ops apart by input shapes");
  app.add_flag("--generate", request.generate_only, "only the generation figures (generate_*)");
  app.add_flag("--profile-generate", request.profile_generate,
               "profile one generation, print the top ops");
  app.add_option("--generate-batch", request.generate_batch, "--profile-generate: rows");
  app.add_option("--generate-context", request.generate_context,
                 "--profile-generate: prompt tokens and memory (default 128, the model's memory)")
      ->check(CLI::PositiveNumber);
  app.add_flag("--products", request.products,
               "the decoding step's products: LibTorch, oneDNN and txl's packed panels");
  app.add_flag("--members", request.members,
               "the training step of each member of the family (xl, bptt, rope, alibi, ...)");
  app.add_flag("--sweep", request.sweep, "scaling sweep: tables, csv, json and plot into --out");
  app.add_option("--out", request.sweep_out, "--sweep: output folder (default runs/bench)");
  app.add_option("--save", request.save, "also write the JSON object to this file");
  app.add_flag("--quiet", *quiet, "no progress lines");
}

}  // namespace txl::bench
