#include "txl/eval/settings.h"

#include "txl/config/device.h"
#include "txl/config/effective_eval.h"
#include "txl/dist/group.h"
#include "txl/util/error.h"

namespace txl::eval {

Settings resolve_settings(const config::ExperimentConfig& config, dist::Group* group) {
  const auto& e = config.eval;
  const config::EffectiveEval ev = config::effective_eval(config);
  Settings s;
  s.mode = ev.mode;
  s.tgt_len = ev.tgt_len;
  s.mem_len = ev.mem_len;
  s.clamp_len = ev.clamp_len;
  s.same_length = ev.same_length;
  s.zero_memory = ev.mem_init == config::MemInit::kZeros;
  s.ext_len = config.model.ext_len;
  s.window = ev.window;
  s.stride = e.stride;
  s.warmup = e.warmup;
  s.batch_size = e.batch_size;
  s.max_tokens = e.max_tokens;
  s.documents = config.data.document_mode;
  s.device =
      config::resolve_device(config.run.device, group != nullptr ? group->env().local_rank : 0);
  s.bf16 = config.run.precision == config::Precision::kBf16;
  s.group = group;
  // The warm-up batches hold no ext context, so with ext_len the memory they leave would miss
  // ext_len tokens between batches.
  TXL_CHECK(s.mode != Mode::kMemory || s.mem_len == 0 || s.warmup == 0 || s.ext_len == 0,
            "eval.warmup = ", s.warmup, " is not supported with model.ext_len = ", s.ext_len,
            " in memory mode; set eval.warmup = 0");
  return s;
}

Settings validation_settings(const config::ExperimentConfig& config, dist::Group* group) {
  config::ExperimentConfig periodic = config;
  if (config.eval.mode == Mode::kSliding) periodic.eval.mode = Mode::kSegments;
  if (config.train.eval_max_tokens > 0) periodic.eval.max_tokens = config.train.eval_max_tokens;
  Settings s = resolve_settings(periodic, group);
  s.documents = false;
  return s;
}

models::Lookback segment_lookback(const Settings& settings, const models::TransformerLM& model) {
  const bool with_memory = settings.mode == Mode::kMemory && settings.mem_len > 0;
  models::Lookback lookback = model->default_lookback();  // the mechanisms' own settings
  lookback.mem_len = with_memory ? settings.mem_len : 0;
  lookback.clamp_len = settings.clamp_len;
  lookback.same_length = with_memory && settings.same_length;
  lookback.ext_len = with_memory ? settings.ext_len : 0;
  lookback.zero_memory = with_memory && settings.zero_memory;
  lookback.cache_kv = with_memory && settings.cache_kv && model->can_cache_kv();
  return lookback;
}

bool carries_memory(const Settings& settings, const models::TransformerLM& model) {
  return settings.mode == Mode::kMemory &&
         models::memory_state_rows(model->config(), settings.mem_len) > 0;
}

data::EvalStreamOptions eval_stream_options(const Settings& settings) {
  data::EvalStreamOptions options;
  options.batch_size = settings.batch_size;
  options.tgt_len = settings.tgt_len;
  options.ext_len = settings.ext_len;
  // Warm-up primes the memory: nothing to prime without one.
  options.warmup = settings.mode == Mode::kMemory && settings.mem_len > 0 ? settings.warmup : 0;
  return options;
}

data::SlidingStreamOptions sliding_stream_options(const Settings& settings) {
  data::SlidingStreamOptions options;
  options.batch_size = settings.batch_size;
  options.window = settings.window;
  options.stride = settings.stride;
  return options;
}

Shape shape_of(const Settings& settings) {
  Shape shape;
  shape.tgt_len = settings.tgt_len;
  if (settings.mode == Mode::kMemory) shape.mem_len = settings.mem_len;
  if (settings.mode == Mode::kSliding) {
    shape.window = settings.window;
    shape.stride = settings.stride;
  }
  return shape;
}

config::ExperimentConfig at_context(const config::ExperimentConfig& config, std::int64_t c) {
  TXL_CHECK(c >= 0, "a context length must be at least 0, got ", c);
  config::ExperimentConfig v = config;
  if (config::uses_absolute_positions(config.model.attn_type)) {
    const std::int64_t window = c > 0 ? c : config::effective_eval(config).tgt_len;
    v.eval.mode = Mode::kSliding;
    v.eval.window = static_cast<int>(window);
    v.eval.stride = static_cast<int>(std::max<std::int64_t>(1, window / kSweepStrideDivisor));
  } else {
    v.eval.mode = Mode::kMemory;
    v.eval.mem_len = static_cast<int>(c);
    if (c > 0) {
      v.eval.same_length = 1;
      // Every stream starts with a full context (warm-up text carries no ext_len context).
      if (v.model.ext_len == 0) v.eval.warmup = static_cast<int>(c);
    }
  }
  return v;
}

}  // namespace txl::eval
