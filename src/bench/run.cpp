#include "txl/bench/run.h"

#include <ostream>

#include "txl/bench/generation.h"
#include "txl/bench/members.h"
#include "txl/bench/products.h"
#include "txl/bench/profile.h"
#include "txl/bench/sweep.h"
#include "txl/util/fs.h"

namespace txl::bench {

namespace {

// One training step and / or one evaluation segment under the profiler, each at its own batch.
void print_profiles(const config::ExperimentConfig& config, const BenchRequest& request,
                    std::ostream& out) {
  PhaseOptions phase;
  phase.bf16 = config.run.precision == config::Precision::kBf16;
  phase.seed = config.run.seed;
  phase.warmup = 5;  // until the allocator has settled: no more page faults
  if (request.profile) {
    phase.batch_size = config.train.batch_size;
    out << format_profile(profile_training_step(config, request.vocab, phase, request.by_shape),
                          request.top);
  }
  if (request.profile_eval) {
    phase.batch_size = config.eval.batch_size;
    out << format_profile(profile_eval_segment(config, request.vocab, phase, request.by_shape),
                          request.top);
  }
  if (request.profile_generate) {
    GenerationOptions generation;
    generation.batch_size = request.generate_batch;
    if (request.generate_context > 0) {
      generation.context = request.generate_context;
      generation.mem_len = request.generate_context;
    }
    generation.seed = config.run.seed;
    out << format_profile(profile_generation(config, request.vocab, generation, request.by_shape),
                          request.top);
  }
}

void print_sweep(const config::ExperimentConfig& config, const BenchRequest& request,
                 std::ostream& out) {
  SweepOptions options;
  options.out_dir = request.sweep_out;
  options.vocab = request.vocab;
  const auto sweep = run_sweep(config, options);
  out << sweep_markdown(sweep) << "\n";
  for (const auto& file : sweep.files) out << "wrote " << file.string() << "\n";
}

}  // namespace

void run(const config::ExperimentConfig& config, const BenchRequest& request, std::ostream& out) {
  const bool profiles = request.profile || request.profile_eval || request.profile_generate;
  if (profiles) print_profiles(config, request, out);
  if (request.sweep) print_sweep(config, request, out);
  if (request.products) {
    const auto timings = time_products(config, request.vocab, request.quick ? 3 : 7);
    out << (request.json ? products_json(timings) + "\n" : products_table(timings));
  }
  if (request.members) {
    PhaseOptions phase;
    phase.batch_size = config.train.batch_size;
    phase.bf16 = config.run.precision == config::Precision::kBf16;
    phase.seed = config.run.seed;
    phase.repetitions = request.quick ? 3 : 7;
    GenerationOptions decoding;
    decoding.new_tokens = request.quick ? 64 : 256;
    decoding.repetitions = request.quick ? 1 : 7;
    const auto costs = time_members(config, request.vocab, phase, decoding);
    out << (request.json ? members_json(costs) + "\n" : members_table(costs));
  }
  if (profiles || request.sweep || request.products || request.members) return;
  BenchOptions options;
  options.vocab = request.vocab;
  options.threads = request.threads;
  options.settings = request.quick ? BenchSettings::quick() : BenchSettings::full();
  options.settings.bf16 = !request.skip_bf16;
  options.generate_only = request.generate_only;
  const auto report = run_bench(config, options);
  const std::string object = to_json(report) + "\n";
  out << (request.json ? object : format_table(report));
  if (!request.save.empty()) fs::write_atomic(request.save, object);
}

}  // namespace txl::bench
