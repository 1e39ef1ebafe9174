#include "txl/bench/measure.h"

#include <sys/resource.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <sstream>
#include <string>

#include <torch/cuda.h>

#include "training_loop.h"
#include "txl/bench/profile.h"
#include "txl/data/stream.h"
#include "txl/eval/evaluator.h"
#include "txl/models/flops.h"
#include "txl/models/transformer_lm.h"
#include "txl/util/error.h"

namespace txl::bench {

namespace {

using Clock = std::chrono::steady_clock;

// A field of /proc/self/status in kB ("VmHWM:   123456 kB"), or -1.
double status_kb(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) {
      std::istringstream fields(line.substr(field.size() + 1));
      double kb = -1;
      fields >> kb;
      return kb;
    }
  }
  return -1;
}

double release_free_memory() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
  return current_rss_mb();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void check_phase(const PhaseOptions& o) {
  TXL_CHECK(o.batch_size >= 1 && o.warmup >= 0 && o.repetitions >= 1,
            "bench: needs batch >= 1, warm-up >= 0 and repetitions >= 1, got ", o.batch_size, ", ",
            o.warmup, ", ", o.repetitions);
}

// A phase's memory window: the resident memory at its start, and its peak at the end. Memory
// the previous phase freed is handed back to the system first (glibc keeps freed blocks), so
// that a phase's peak is its own.
class RssWindow {
 public:
  RssWindow() : start_(release_free_memory()) { reset_peak_rss(); }
  void finish(PhaseResult& r) const {
    r.rss_start_mb = start_;
    r.peak_rss_mb = std::max(peak_rss_mb(), start_);
  }

 private:
  double start_;
};

}  // namespace

Timing time_repeated(const std::function<void()>& fn, int warmup, int repetitions) {
  TXL_CHECK(repetitions >= 1 && warmup >= 0, "time_repeated: needs repetitions >= 1 and ",
            "warmup >= 0, got ", repetitions, " and ", warmup);
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> seconds;
  seconds.reserve(static_cast<size_t>(repetitions));
  for (int i = 0; i < repetitions; ++i) {
    const auto start = Clock::now();
    fn();
    seconds.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  Timing t;
  t.repetitions = repetitions;
  t.best_s = *std::min_element(seconds.begin(), seconds.end());
  t.median_s = median(seconds);
  return t;
}

double current_rss_mb() {
  const double kb = status_kb("VmRSS");
  return kb > 0 ? kb / 1024.0 : 0.0;
}

double peak_rss_mb() {
  const double kb = status_kb("VmHWM");
  if (kb > 0) return kb / 1024.0;
  struct rusage usage {};
  if (getrusage(RUSAGE_SELF, &usage) != 0) return 0.0;
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // Linux: kB
}

bool reset_peak_rss() {
  std::ofstream out("/proc/self/clear_refs");
  if (!out) return false;
  out << "5";
  out.flush();
  return out.good();
}

void wait_for(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

MatmulPeak probe_matmul_peak(torch::ScalarType dtype, const std::vector<std::int64_t>& sizes,
                             int repetitions, const torch::Device& device) {
  TXL_CHECK(!sizes.empty() && repetitions >= 1, "probe_matmul_peak: needs sizes and ",
            "repetitions >= 1");
  torch::NoGradGuard no_grad;
  MatmulPeak best;
  for (std::int64_t n : sizes) {
    TXL_CHECK(n >= 1, "probe_matmul_peak: size ", n, " must be >= 1");
    auto a = torch::randn({n, n}).to(device, dtype);  // [n, n]
    auto b = torch::randn({n, n}).to(device, dtype);  // [n, n]
    auto c = torch::empty({n, n}, a.options());       // [n, n]
    auto t = time_repeated(
        [&] {
          torch::mm_out(c, a, b);
          wait_for(device);
        },
        1, repetitions);
    const double gflops = 2.0 * n * n * n / t.best_s / 1e9;
    if (gflops > best.gflops) {
      best.gflops = gflops;
      best.size = n;
    }
  }
  return best;
}

PhaseResult measure_training(const config::ExperimentConfig& config, std::int64_t vocab,
                             const PhaseOptions& options) {
  check_phase(options);
  RssWindow rss;
  train::RandomSteps loop(config, vocab, detail::random_steps_options(options),
                          options.warmup + options.repetitions);
  PhaseResult r;
  r.timing =
      time_repeated([&] { r.loss = loop.step(options.bf16); }, options.warmup, options.repetitions);
  r.tokens_per_step = loop.tokens_per_step();
  r.tokens_per_s = static_cast<double>(r.tokens_per_step) / r.timing.median_s;
  rss.finish(r);
  return r;
}

namespace {

// Memory-mode evaluation of `model` on random ids (detail::EvalLoop), timed. With
// `flops_per_token`, one more segment runs under count_matmul_flops and its matrix-product FLOPs
// per scored token land there.
PhaseResult time_memory_eval(models::TransformerLM& model, std::int64_t vocab,
                             const eval::Settings& eo, const PhaseOptions& options,
                             double* flops_per_token = nullptr) {
  const int counted = flops_per_token != nullptr ? 1 : 0;
  detail::EvalLoop loop(model, vocab, eo, options, options.warmup + options.repetitions + counted);
  PhaseResult r;
  r.timing = time_repeated([&] { r.loss = loop.segment(); }, options.warmup, options.repetitions);
  r.tokens_per_step = loop.tokens_per_segment();
  r.tokens_per_s = static_cast<double>(r.tokens_per_step) / r.timing.median_s;
  TXL_CHECK(std::isfinite(r.loss), "bench: evaluation loss is ", r.loss);
  if (counted) {
    *flops_per_token =
        count_matmul_flops([&] { loop.segment(); }) / static_cast<double>(r.tokens_per_step);
  }
  return r;
}

// One side of the sliding / memory comparison: seconds and counted FLOPs per scored token.
struct EvalCost {
  double seconds_per_token = 0.0;
  double flops_per_token = 0.0;
};

// Sliding: the vanilla model (the same sizes, no memory) scores one token per window of L tokens
// (stride 1), each batch of windows by eval::score_batch as the evaluator scores it. Batch 0
// holds the first window, which scores all its L positions; batches from 1 on score one token
// per window, as almost every batch of a real pass does. One more batch is counted.
EvalCost sliding_cost(const config::ExperimentConfig& config, std::int64_t vocab, std::int64_t l,
                      const PhaseOptions& options) {
  auto vanilla = config;
  vanilla.model.attn_type = config::AttnType::kVanilla;
  vanilla.model.mem_len = 0;
  vanilla.eval.mode = eval::Mode::kSliding;
  vanilla.eval.window = static_cast<int>(l);
  vanilla.eval.stride = 1;
  vanilla.eval.batch_size = static_cast<int>(options.batch_size);
  vanilla.run.device = config::Device::kCpu;
  vanilla.run.precision = options.bf16 ? config::Precision::kBf16 : config::Precision::kFp32;
  const eval::Settings settings = eval::resolve_settings(vanilla);
  torch::manual_seed(options.seed);
  models::TransformerLM model(vanilla.model, vocab);
  model->eval();
  const std::int64_t windows = options.batch_size * (2 + options.warmup + options.repetitions);
  data::SlidingStream stream(train::random_ids(l + windows + 1, vocab, options.seed),
                             eval::sliding_stream_options(settings));
  std::int64_t index = 1, scored = 0;
  auto window_batch = [&] {
    scored = eval::score_batch(model, stream.batch(index++), settings, nullptr).count;
  };
  auto t = time_repeated(window_batch, options.warmup, options.repetitions);
  TXL_CHECK(scored == options.batch_size, "bench: a sliding batch scored ", scored,
            " tokens, expected one per window (", options.batch_size, ")");
  EvalCost cost;
  cost.seconds_per_token = t.median_s / static_cast<double>(scored);
  cost.flops_per_token = count_matmul_flops(window_batch) / static_cast<double>(scored);
  return cost;
}

// attn_type xl unless the model already carries a memory (xl or shaw).
config::ModelConfig with_memory(config::ModelConfig model) {
  if (!config::uses_relative_positions(model.attn_type)) model.attn_type = config::AttnType::kXl;
  return model;
}

// Memory: the Transformer-XL model with Q + M = L.
EvalCost memory_cost(const config::ExperimentConfig& config, std::int64_t vocab, std::int64_t m,
                     const PhaseOptions& options) {
  auto xl = config;
  xl.model = with_memory(config.model);
  xl.model.mem_len = static_cast<int>(m);
  xl.eval.mem_len = static_cast<int>(m);
  torch::manual_seed(options.seed);
  models::TransformerLM model(xl.model, vocab);
  EvalCost cost;
  auto r = time_memory_eval(model, vocab, memory_eval_settings(xl), options, &cost.flops_per_token);
  cost.seconds_per_token = r.timing.median_s / static_cast<double>(r.tokens_per_step);
  return cost;
}

// The ratio models/flops.h predicts: L x the vanilla forward FLOPs per token of an L-token
// segment over the xl forward FLOPs per token at (Q, M) with the memory's keys and values
// carried.
double predicted_flop_ratio(const config::ModelConfig& model, std::int64_t vocab, std::int64_t l,
                            std::int64_t q) {
  auto vanilla_config = model;
  vanilla_config.attn_type = config::AttnType::kVanilla;
  const double sliding_flops =
      static_cast<double>(l) * models::count_flops_per_token(vanilla_config, vocab, l, 0).forward;
  const double memory_flops =
      models::count_flops_per_token(with_memory(model), vocab, q, l - q, /*memory_kv_cached=*/true)
          .forward;
  return sliding_flops / memory_flops;
}

}  // namespace

eval::Settings memory_eval_settings(const config::ExperimentConfig& config) {
  auto memory = config;
  memory.eval.mode = eval::Mode::kMemory;
  memory.eval.warmup = 0;
  memory.run.device = config::Device::kCpu;
  memory.run.precision = config::Precision::kFp32;
  return eval::resolve_settings(memory);
}

PhaseResult measure_eval(const config::ExperimentConfig& config, std::int64_t vocab,
                         const PhaseOptions& options) {
  check_phase(options);
  RssWindow rss;
  torch::manual_seed(options.seed);
  models::TransformerLM model(config.model, vocab);
  model->to(options.device);
  auto r = time_memory_eval(model, vocab, memory_eval_settings(config), options);
  rss.finish(r);
  return r;
}

EvalCostComparison sliding_over_memory_cost(const config::ExperimentConfig& config,
                                            std::int64_t vocab, std::int64_t attention_length,
                                            const PhaseOptions& sliding,
                                            const PhaseOptions& memory) {
  check_phase(sliding);
  check_phase(memory);
  const std::int64_t q = memory_eval_settings(config).tgt_len, l = attention_length;
  TXL_CHECK(l > q, "bench: attention length ", l, " must exceed the segment length ",
            "eval.tgt_len = ", q, " (memory mode uses M = L - Q)");
  EvalCostComparison c;
  c.attention_length = l;
  c.tgt_len = q;
  c.mem_len = l - q;
  c.sliding_batch = sliding.batch_size;
  c.memory_batch = memory.batch_size;
  const EvalCost slide = sliding_cost(config, vocab, l, sliding);
  const EvalCost mem = memory_cost(config, vocab, c.mem_len, memory);
  c.sliding_s_per_token = slide.seconds_per_token;
  c.memory_s_per_token = mem.seconds_per_token;
  c.ratio = c.sliding_s_per_token / c.memory_s_per_token;
  c.sliding_flops_per_token = slide.flops_per_token;
  c.memory_flops_per_token = mem.flops_per_token;
  c.counted_flop_ratio = slide.flops_per_token / mem.flops_per_token;
  c.flop_ratio = predicted_flop_ratio(config.model, vocab, l, q);
  return c;
}

AttentionCostFit attention_cost_by_mem_len(const config::ModelConfig& model_config,
                                           std::int64_t batch, std::int64_t tgt_len,
                                           const std::vector<std::int64_t>& mem_lens, int warmup,
                                           int repetitions) {
  TXL_CHECK(!mem_lens.empty() && batch >= 1 && tgt_len >= 1,
            "attention_cost_by_mem_len: needs memory lengths, batch >= 1 and tgt_len >= 1");
  torch::NoGradGuard no_grad;
  auto c = model_config;
  c.cutoffs.clear();  // only the first layer runs: a small plain vocabulary is enough
  c.n_layer = 1;
  models::TransformerLM model(c, 16);
  model->eval();
  auto attention = model->layer_list().front()->attn;
  AttentionCostFit fit;
  for (std::int64_t m : mem_lens) {
    TXL_CHECK(m >= 0, "attention_cost_by_mem_len: memory length ", m, " must be >= 0");
    auto x = torch::randn({batch, tgt_len, c.d_model});                           // [B, Q, d]
    auto memory = m > 0 ? torch::randn({batch, m, c.d_model}) : torch::Tensor();  // [B, M, d]
    models::Lookback lookback;
    lookback.mem_len = m;
    lookback.clamp_len = c.clamp_len;
    auto inputs =
        model->segment_inputs(tgt_len, m, {}, lookback, torch::kFloat, torch::Device(torch::kCPU));
    auto t = time_repeated([&] { attention->forward(x, memory, inputs); }, warmup, repetitions);
    fit.points.push_back({m, 1e6 * t.median_s / static_cast<double>(batch * tgt_len)});
  }
  // Least-squares line through the points.
  const double n = static_cast<double>(fit.points.size());
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& p : fit.points) {
    const double x = static_cast<double>(p.mem_len);
    sx += x;
    sy += p.us_per_token;
    sxx += x * x;
    sxy += x * p.us_per_token;
  }
  const double denominator = n * sxx - sx * sx;
  fit.slope_us = denominator > 0 ? (n * sxy - sx * sy) / denominator : 0.0;
  fit.intercept_us = (sy - fit.slope_us * sx) / n;
  double ss_res = 0, ss_tot = 0;
  for (const auto& p : fit.points) {
    const double predicted = fit.intercept_us + fit.slope_us * static_cast<double>(p.mem_len);
    ss_res += (p.us_per_token - predicted) * (p.us_per_token - predicted);
    ss_tot += (p.us_per_token - sy / n) * (p.us_per_token - sy / n);
  }
  fit.r2 = ss_tot > 0 ? 1.0 - ss_res / ss_tot : 1.0;
  return fit;
}

}  // namespace txl::bench
