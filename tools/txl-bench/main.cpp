// txl-bench: training and evaluation speed of one model and batch configuration (issue 5).
//   txl-bench [--config FILE] [--set key.path=value ...] [--json] [--quick] [--threads N]
//             [--vocab V] [--no-bf16] [--save out.json]
//   txl-bench --profile [--top N] [--by-shape]   one training step under the autograd profiler
//   txl-bench --profile-eval [--top N] [--by-shape]   one memory-mode evaluation segment
//   txl-bench --sweep [--out runs/bench]  scaling tables and plot
// Default: the bench model (4 layers, d_model 256, 4 heads of 64, FF 1024, tgt_len = mem_len =
// 128, batch 16) on random token ids of a 12,871-word vocabulary. Progress goes to stderr, the
// table or the JSON object to stdout.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>
#include <thread>

#include "txl/bench/bench.h"
#include "txl/bench/profile.h"
#include "txl/bench/sweep.h"
#include "txl/config/load.h"
#include "txl/util/error.h"
#include "txl/util/fs.h"
#include "txl/util/log.h"
#include "txl/util/openmp.h"

int main(int argc, char** argv) {
  txl::limit_openmp_spinning(argv);
  CLI::App app{
      "txl-bench: training and evaluation throughput, MFU, memory, and the cost of "
      "sliding-window against memory evaluation"};
  std::string config_path, out_dir = "runs/bench", save;
  std::vector<std::string> overrides;
  bool json = false, quick = false, by_shape = false, profile = false, profile_eval = false,
       sweep = false, quiet = false, no_bf16 = false;
  int threads = 0, top = 25;
  std::int64_t vocab = txl::bench::kBenchVocab;
  app.add_option("--config,-c", config_path, "experiment YAML file (default: the bench model)");
  app.add_option("--set", overrides, "override a setting: key.path=value (repeatable)");
  app.add_flag("--json", json, "print one JSON object instead of the table");
  app.add_flag("--quick", quick, "fewer repetitions and smaller probes (under a minute)");
  app.add_option("--threads", threads, "intra-op threads (default: run.threads, 0 = all cores)");
  app.add_option("--vocab", vocab, "vocabulary size of the random token ids");
  app.add_flag("--no-bf16", no_bf16, "skip the bf16 autocast measurements");
  app.add_flag("--profile", profile, "profile one training step (run.precision) and print top ops");
  app.add_flag("--profile-eval", profile_eval,
               "profile one memory-mode evaluation segment (run.precision) and print top ops");
  app.add_option("--top", top, "--profile, --profile-eval: ops listed");
  app.add_flag("--by-shape", by_shape, "--profile, --profile-eval: tell ops apart by their input shapes");
  app.add_flag("--sweep", sweep, "scaling sweep: tables, csv, json and plot into --out");
  app.add_option("--out", out_dir, "--sweep: output folder");
  app.add_option("--save", save, "also write the JSON object to this file");
  app.add_flag("--quiet", quiet, "no progress lines");
  CLI11_PARSE(app, argc, argv);
  try {
    if (quiet) txl::log::set_level(txl::log::Level::kQuiet);
    // --set alone applies to the bench model (an empty YAML text over the built-in defaults).
    auto config = txl::bench::bench_experiment();
    if (!config_path.empty()) {
      config = txl::config::load_experiment(config_path, overrides);
    } else if (!overrides.empty()) {
      config = txl::config::parse_experiment_string("{}", "", overrides);
    }
    // --threads, else run.threads of the experiment, else every core.
    if (threads <= 0) threads = config.run.threads;
    const int n_threads = txl::use_threads(threads);  // as the trainer does

    if (profile || profile_eval) {
      txl::bench::PhaseOptions phase;
      phase.batch_size = profile ? config.train.batch_size : config.eval.batch_size;
      phase.bf16 = config.run.precision == txl::config::Precision::kBf16;
      phase.seed = config.run.seed;
      phase.warmup = 5;  // until the allocator has settled: no more page faults
      if (profile) {
        std::cout << txl::bench::format_profile(
            txl::bench::profile_training_step(config, vocab, phase, by_shape), top);
      }
      if (profile_eval) {
        std::cout << txl::bench::format_profile(
            txl::bench::profile_eval_segment(config, vocab, phase, by_shape), top);
      }
    }
    if (sweep) {
      txl::bench::SweepOptions options;
      options.out_dir = out_dir;
      options.vocab = vocab;
      auto s = txl::bench::run_sweep(config, options);
      std::cout << txl::bench::sweep_markdown(s) << "\n";
      for (const auto& f : s.files) std::cout << "wrote " << f.string() << "\n";
    }
    if (!profile && !profile_eval && !sweep) {
      txl::bench::BenchOptions options;
      options.vocab = vocab;
      options.threads = n_threads;
      options.settings =
          quick ? txl::bench::BenchSettings::quick() : txl::bench::BenchSettings::full();
      options.settings.bf16 = !no_bf16;
      auto report = txl::bench::run_bench(config, options);
      const std::string object = txl::bench::to_json(report) + "\n";
      std::cout << (json ? object : txl::bench::format_table(report));
      if (!save.empty()) txl::fs::write_atomic(save, object);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", txl::error_message(e).c_str());
    return 1;
  }
}
