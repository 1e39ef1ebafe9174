#include "txl/bench/generation.h"

#include <algorithm>
#include <vector>

#include "txl/config/device.h"
#include "txl/generation/generate.h"
#include "txl/util/error.h"

namespace txl::bench {

namespace {

struct Setup {
  models::TransformerLM model{nullptr};
  std::vector<std::vector<std::int64_t>> prompts;
  generation::GenerateOptions options;
};

Setup make_setup(const config::ExperimentConfig& config, std::int64_t vocab,
                 const GenerationOptions& o) {
  TXL_CHECK(o.batch_size >= 1 && o.context >= 1 && o.new_tokens >= 1 && o.repetitions >= 1,
            "bench: generation needs batch_size, context, new_tokens and repetitions >= 1");
  Setup s;
  torch::manual_seed(o.seed);
  s.model = models::TransformerLM(config.model, vocab);
  s.model->to(config::resolve_device(config.run.device));
  s.model->eval();
  auto ids = torch::randint(vocab, {o.batch_size, o.context}, torch::kLong);  // [B, C]
  for (std::int64_t b = 0; b < o.batch_size; ++b) {
    const auto* row = ids[b].contiguous().data_ptr<std::int64_t>();
    s.prompts.emplace_back(row, row + o.context);
  }
  config::ExperimentConfig lengths = config;
  if (o.mem_len >= 0) lengths.eval.mem_len = static_cast<int>(o.mem_len);
  s.options.lengths = generation::decode_options(lengths);
  s.options.temperature = 0;
  s.options.max_new_tokens = o.new_tokens;
  s.options.batch_size = o.batch_size;
  s.options.drop_finished = o.drop_finished;
  return s;
}

}  // namespace

GenerationResult measure_generation(const config::ExperimentConfig& config, std::int64_t vocab,
                                    const GenerationOptions& o) {
  auto s = make_setup(config, vocab, o);
  for (int i = 0; i < o.warmup; ++i) generation::generate(s.model, s.prompts, s.options);
  std::vector<generation::GenerateResult> runs;
  for (int i = 0; i < o.repetitions; ++i)
    runs.push_back(generation::generate(s.model, s.prompts, s.options));
  std::sort(runs.begin(), runs.end(),
            [](const auto& a, const auto& b) { return a.generate_seconds < b.generate_seconds; });
  const auto& median = runs[runs.size() / 2];
  GenerationResult r;
  r.batch_size = o.batch_size;
  r.context = o.context;
  r.tgt_len = s.options.lengths.tgt_len;
  r.mem_len = s.options.lengths.mem_len;
  r.new_tokens = o.new_tokens;
  r.tokens_per_s = median.new_tokens / median.generate_seconds;
  r.ms_per_token = 1e3 * median.generate_seconds / static_cast<double>(o.new_tokens);
  r.read_tokens_per_s = median.read_tokens / median.read_seconds;
  return r;
}

StepProfile profile_generation(const config::ExperimentConfig& config, std::int64_t vocab,
                               const GenerationOptions& options, bool by_shape) {
  auto s = make_setup(config, vocab, options);
  for (int i = 0; i < options.warmup; ++i) generation::generate(s.model, s.prompts, s.options);
  auto profile =
      profile_call([&] { generation::generate(s.model, s.prompts, s.options); }, by_shape);
  profile.what = "one generation of " + std::to_string(options.new_tokens) + " tokens x " +
                 std::to_string(options.batch_size) + " rows after " +
                 std::to_string(options.context) + " prompt tokens";
  return profile;
}

}  // namespace txl::bench
