#pragma once
// What txl-bench does, as a library call: the measurement, profile or sweep its flags ask for,
// on one experiment, printed to a stream.

#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <string>

#include "txl/bench/bench.h"
#include "txl/config/config.h"

namespace txl::bench {

struct BenchRequest {
  std::int64_t vocab = kBenchVocab;  // V of the random token ids
  int threads = 0;                   // the intra-op threads the program set (reported)
  bool quick = false;                // BenchSettings::quick() instead of full()
  bool skip_bf16 = false;            // no bf16 autocast measurements
  bool json = false;                 // one JSON object instead of the table
  std::filesystem::path save;        // also write the JSON object here ("" = not written)
  // Instead of the measurements: one training step and / or one memory-mode evaluation segment
  // under the profiler (run.precision), the `top` ops, told apart by input shape with by_shape.
  bool profile = false;
  bool profile_eval = false;
  int top = 25;
  bool by_shape = false;
  // Instead of the measurements: one generation (generate_batch rows) under the profiler, after
  // generate_context prompt tokens with memory generate_context (0 = 128 tokens and the
  // experiment's memory), as the bench's "context" rows.
  bool profile_generate = false;
  std::int64_t generate_batch = 1;
  std::int64_t generate_context = 0;
  // Instead of every measurement: the generation figures alone (BenchReport's generate_*).
  bool generate_only = false;
  // Instead of the measurements: the decoding step's products three ways (bench/products.h).
  bool products = false;
  // Instead of the measurements: the training step of each member of the family (bench/members.h).
  bool members = false;
  // Instead of the measurements: the scaling sweep, tables on the stream and files in sweep_out.
  bool sweep = false;
  std::filesystem::path sweep_out = "runs/bench";
};

// Runs what `request` asks for on `config` (the model, train.batch_size, eval sizes,
// run.precision and run.seed) and prints it to `out`: the profiles and the sweep when asked,
// else the measurements (run_bench) as a table or JSON. Throws txl::Error for a configuration
// the model rejects or a file that cannot be written.
void run(const config::ExperimentConfig& config, const BenchRequest& request, std::ostream& out);

}  // namespace txl::bench
