#include "txl/bench/bench.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <thread>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "txl/config/device.h"
#include "txl/eval/evaluator.h"
#include "txl/models/flops.h"
#include "txl/models/transformer_lm.h"
#include "txl/util/cpu.h"
#include "txl/util/error.h"
#include "txl/util/json.h"
#include "txl/util/log.h"

namespace txl::bench {

config::ExperimentConfig bench_experiment() { return config::ExperimentConfig{}; }

BenchSettings BenchSettings::full() { return BenchSettings{}; }

BenchSettings BenchSettings::quick() {
  BenchSettings s;
  s.warmup = 1;
  s.repetitions = 3;  // a median of 3 still ignores one disturbed step
  s.peak_sizes = {256, 512, 1024};
  s.peak_repetitions = 3;
  s.sliding_batch = 2;
  s.sliding_warmup = 1;
  s.sliding_repetitions = 2;
  s.generate_new_tokens = 128;
  return s;
}

double load_average() {
  std::ifstream in("/proc/loadavg");
  double one = -1.0;
  if (!(in >> one)) return -1.0;
  return one;
}

namespace {

// The CPU's model name from /proc/cpuinfo, or "unknown".
std::string cpu_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const auto colon = line.find(':');
    if (colon != std::string::npos && colon + 2 <= line.size()) return line.substr(colon + 2);
  }
  return "unknown";
}

// The machine: its device, load average and the threads the program set; a warning when the
// load makes the figures measure contention.
void describe_machine(const BenchOptions& options, const torch::Device& device, BenchReport& r) {
  r.device = device.str();
  r.device_name = device.is_cpu() ? cpu_name() : "unknown";
  r.blas_core = util::openblas_core();
  r.load_average = load_average();
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  r.threads = options.threads > 0 ? options.threads : cores;
  if (r.threads > 1 && r.load_average > 0.5 * cores) {
    // OpenMP barriers wait for descheduled threads: on a busy machine every parallel op pays a
    // time slice, and element-wise ops (Adam, dropout) slow down by an order of magnitude.
    log::warn("bench",
              "load average {:.1f} on {} cores: figures with {} threads measure the "
              "contention more than the code; compare with --threads 1",
              r.load_average, cores, r.threads);
  }
}

// The model, batch and evaluation geometry, the parameter count and the FLOPs per token.
void describe_model(const config::ExperimentConfig& config, const BenchOptions& options,
                    BenchReport& r) {
  const auto& m = config.model;
  const auto eo = memory_eval_settings(config);
  r.source = config.source;
  r.attn_type = config::to_string(m.attn_type);
  r.n_layer = m.n_layer;
  r.d_model = m.d_model;
  r.n_head = m.n_head;
  r.d_head = m.d_head;
  r.d_inner = m.d_inner;
  r.tgt_len = m.tgt_len;
  r.mem_len = m.mem_len;
  r.batch_size = config.train.batch_size;
  r.vocab = options.vocab;
  r.eval_batch_size = config.eval.batch_size;
  r.eval_tgt_len = eo.tgt_len;
  r.eval_mem_len = eo.mem_len;
  r.quick = options.settings.repetitions < BenchSettings::full().repetitions;
  r.warmup = options.settings.warmup;
  r.repetitions = options.settings.repetitions;
  {
    models::TransformerLM probe(m, options.vocab);  // also validates the model against V
    for (const auto& p : probe->parameters()) r.n_params += p.numel();
  }
  const auto train_flops = models::count_flops_per_token(m, options.vocab, m.tgt_len, m.mem_len);
  r.flops_per_token = train_flops.training;
  r.flops_per_token_forward = train_flops.forward;
  r.eval_flops_per_token = models::count_flops_per_token(m, options.vocab, r.eval_tgt_len,
                                                         r.eval_mem_len, /*memory_kv_cached=*/true)
                               .forward;  // the evaluator carries the memory's keys and values
}

// Training and memory-mode evaluation throughput, fp32 and (when asked) bf16 autocast.
void measure_throughput(const config::ExperimentConfig& config, const BenchOptions& options,
                        const PhaseOptions& train, const PhaseOptions& evaluation, BenchReport& r) {
  const auto& m = config.model;
  r.rss_per_phase = reset_peak_rss();
  log::info("bench", "training fp32: batch {} x {} (mem {})", train.batch_size, m.tgt_len,
            m.mem_len);
  r.train_fp32 = measure_training(config, options.vocab, train);
  if (options.settings.bf16) {
    log::info("bench", "training bf16 autocast");
    auto bf16 = train;
    bf16.bf16 = true;
    r.train_bf16 = measure_training(config, options.vocab, bf16);
  }
  log::info("bench", "evaluation (memory mode): batch {} x {} (mem {})", evaluation.batch_size,
            r.eval_tgt_len, r.eval_mem_len);
  r.eval_fp32 = measure_eval(config, options.vocab, evaluation);
  if (options.settings.bf16) {
    auto bf16 = evaluation;
    bf16.bf16 = true;
    r.eval_bf16 = measure_eval(config, options.vocab, bf16);
  }
}

// The matrix-product peaks, and the GFLOP/s and MFU of the measured throughput against them.
void measure_peaks(const BenchSettings& s, const torch::Device& device, BenchReport& r) {
  // A GPU reaches its peak only on products large enough to hide launch and wait times.
  const std::vector<std::int64_t> sizes =
      device.is_cpu() ? s.peak_sizes : std::vector<std::int64_t>{4096, 8192};
  log::info("bench", "matmul peak probe on {}: sizes {}", device.str(), fmt::join(sizes, ", "));
  r.peak_fp32 = probe_matmul_peak(torch::kFloat, sizes, s.peak_repetitions, device);
  r.peak_bf16 = probe_matmul_peak(torch::kBFloat16, sizes, s.peak_repetitions, device);
  r.train_gflops = r.train_fp32.tokens_per_s * r.flops_per_token / 1e9;
  r.train_gflops_bf16 = r.train_bf16.tokens_per_s * r.flops_per_token / 1e9;
  r.eval_gflops = r.eval_fp32.tokens_per_s * r.eval_flops_per_token / 1e9;
  r.mfu = r.peak_fp32.gflops > 0 ? r.train_gflops / r.peak_fp32.gflops : 0.0;
  r.mfu_bf16 = r.peak_bf16.gflops > 0 ? r.train_gflops_bf16 / r.peak_bf16.gflops : 0.0;
}

// Sliding-window against memory evaluation at every attention length of the settings.
void measure_sliding_costs(const config::ExperimentConfig& config, const BenchOptions& options,
                           const PhaseOptions& memory, BenchReport& r) {
  const auto& s = options.settings;
  PhaseOptions sliding;
  sliding.batch_size = s.sliding_batch;
  sliding.warmup = s.sliding_warmup;
  sliding.repetitions = s.sliding_repetitions;
  sliding.seed = config.run.seed;
  for (std::int64_t l : s.attention_lengths) {
    log::info("bench", "sliding window vs memory evaluation at attention length {}", l);
    r.sliding_vs_memory.push_back(
        sliding_over_memory_cost(config, options.vocab, l, sliding, memory));
  }
}

// Generation: batch 1 and 16 at the experiment's memory, then ms per token by memory length.
void measure_generations(const config::ExperimentConfig& config, const BenchOptions& options,
                         BenchReport& r) {
  const auto& s = options.settings;
  GenerationOptions g;
  g.context = r.eval_tgt_len;
  g.new_tokens = s.generate_new_tokens;
  g.repetitions = s.generate_repetitions;
  g.seed = config.run.seed;
  log::info("bench", "generation: batch 1, {} new tokens after {}", g.new_tokens, g.context);
  r.generate_b1 = measure_generation(config, options.vocab, g);
  g.batch_size = 16;
  log::info("bench", "generation: batch 16");
  r.generate_b16 = measure_generation(config, options.vocab, g);
  g.batch_size = 1;
  for (std::int64_t context : s.generate_contexts) {
    g.context = g.mem_len = context;
    log::info("bench", "generation: batch 1 after {} tokens with memory {}", context, context);
    r.generate_by_context.push_back(measure_generation(config, options.vocab, g));
  }
}

// The process's peak resident memory; where the peak was reset per phase, their maximum.
double overall_peak_rss_mb(const BenchReport& r) {
  double peak = peak_rss_mb();
  if (r.rss_per_phase) {
    for (const auto* p : {&r.train_fp32, &r.train_bf16, &r.eval_fp32, &r.eval_bf16}) {
      peak = std::max(peak, p->peak_rss_mb);
    }
  }
  return peak;
}

void measure_others(const config::ExperimentConfig& config, const BenchOptions& options,
                    const torch::Device& device, BenchReport& r) {
  PhaseOptions train;
  train.batch_size = config.train.batch_size;
  train.warmup = options.settings.warmup;
  train.repetitions = options.settings.repetitions;
  train.seed = config.run.seed;
  train.device = device;
  PhaseOptions evaluation = train;
  evaluation.batch_size = config.eval.batch_size;
  measure_throughput(config, options, train, evaluation, r);
  measure_peaks(options.settings, device, r);
  if (device.is_cpu()) {
    measure_sliding_costs(config, options, evaluation, r);
  } else {
    log::info("bench", "the sliding window / memory comparison is measured on the CPU only");
  }
}

}  // namespace

BenchReport run_bench(const config::ExperimentConfig& config, const BenchOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  BenchReport r;
  const torch::Device device = config::resolve_device(config.run.device);
  describe_machine(options, device, r);
  describe_model(config, options, r);
  if (!options.generate_only) measure_others(config, options, device, r);
  measure_generations(config, options, r);
  r.peak_rss_mb = overall_peak_rss_mb(r);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

namespace {

using json::OrderedJson;

OrderedJson phase_json(const PhaseResult& p) {
  OrderedJson o;
  json::put_number(o, "tokens_per_s", p.tokens_per_s);
  json::put_number(o, "median_s", p.timing.median_s);
  json::put_number(o, "best_s", p.timing.best_s);
  o["repetitions"] = p.timing.repetitions;
  o["tokens_per_step"] = p.tokens_per_step;
  json::put_number(o, "rss_start_mb", p.rss_start_mb);
  json::put_number(o, "peak_rss_mb", p.peak_rss_mb);
  json::put_number(o, "loss", p.loss);
  return o;
}

OrderedJson comparison_json(const EvalCostComparison& c) {
  OrderedJson o;
  o["attention_length"] = c.attention_length;
  o["tgt_len"] = c.tgt_len;
  o["mem_len"] = c.mem_len;
  o["sliding_batch"] = c.sliding_batch;
  o["memory_batch"] = c.memory_batch;
  json::put_number(o, "sliding_us_per_token", 1e6 * c.sliding_s_per_token);
  json::put_number(o, "memory_us_per_token", 1e6 * c.memory_s_per_token);
  json::put_number(o, "ratio", c.ratio);
  json::put_number(o, "flop_ratio", c.flop_ratio);
  json::put_number(o, "sliding_flops_per_token", c.sliding_flops_per_token);
  json::put_number(o, "memory_flops_per_token", c.memory_flops_per_token);
  json::put_number(o, "counted_flop_ratio", c.counted_flop_ratio);
  return o;
}

OrderedJson generation_json(const GenerationResult& g) {
  OrderedJson o;
  o["batch_size"] = g.batch_size;
  o["context"] = g.context;
  o["tgt_len"] = g.tgt_len;
  o["mem_len"] = g.mem_len;
  o["new_tokens"] = g.new_tokens;
  json::put_number(o, "tokens_per_s", g.tokens_per_s);
  json::put_number(o, "ms_per_token", g.ms_per_token);
  json::put_number(o, "read_tokens_per_s", g.read_tokens_per_s);
  return o;
}

double ratio_or_zero(double numerator, double denominator) {
  return denominator > 0 ? numerator / denominator : 0.0;
}

// The keys of record: throughput, FLOPs, peaks, MFU, memory and the sliding / memory costs.
void put_figures(OrderedJson& o, const BenchReport& r) {
  const std::pair<const char*, double> figures[] = {
      {"train_tokens_per_s", r.train_fp32.tokens_per_s},
      {"train_tokens_per_s_bf16", r.train_bf16.tokens_per_s},
      {"eval_tokens_per_s", r.eval_fp32.tokens_per_s},
      {"eval_tokens_per_s_bf16", r.eval_bf16.tokens_per_s},
      {"flops_per_token", r.flops_per_token},
      {"flops_per_token_forward", r.flops_per_token_forward},
      {"eval_flops_per_token", r.eval_flops_per_token},
      {"train_gflops", r.train_gflops},
      {"train_gflops_bf16", r.train_gflops_bf16},
      {"eval_gflops", r.eval_gflops},
      {"peak_gflops_fp32", r.peak_fp32.gflops},
      {"peak_gflops_bf16", r.peak_bf16.gflops},
      {"mfu", r.mfu},
      {"mfu_bf16", r.mfu_bf16},
      {"bf16_speedup", ratio_or_zero(r.train_bf16.tokens_per_s, r.train_fp32.tokens_per_s)},
      {"eval_over_train", ratio_or_zero(r.eval_fp32.tokens_per_s, r.train_fp32.tokens_per_s)},
      {"peak_rss_mb", r.peak_rss_mb}};
  for (const auto& [key, value] : figures) json::put_number(o, key, value);
  for (const auto& c : r.sliding_vs_memory) {
    json::put_number(o, fmt::format("sliding_over_memory_cost_{}", c.attention_length), c.ratio);
  }
  json::put_number(o, "generate_tokens_per_s_b1", r.generate_b1.tokens_per_s);
  json::put_number(o, "generate_tokens_per_s_b16", r.generate_b16.tokens_per_s);
  for (const auto& g : r.generate_by_context)
    json::put_number(o, fmt::format("generate_ms_per_token_ctx{}", g.context), g.ms_per_token);
  OrderedJson generations = OrderedJson::array();
  for (const auto* g : {&r.generate_b1, &r.generate_b16})
    generations.push_back(generation_json(*g));
  for (const auto& g : r.generate_by_context) generations.push_back(generation_json(g));
  o["generation"] = std::move(generations);
  OrderedJson comparisons = OrderedJson::array();
  for (const auto& c : r.sliding_vs_memory) comparisons.push_back(comparison_json(c));
  o["sliding_vs_memory"] = std::move(comparisons);
  o["train_fp32"] = phase_json(r.train_fp32);
  o["train_bf16"] = phase_json(r.train_bf16);
  o["eval_fp32"] = phase_json(r.eval_fp32);
  o["eval_bf16"] = phase_json(r.eval_bf16);
  o["peak_size_fp32"] = r.peak_fp32.size;
  o["peak_size_bf16"] = r.peak_bf16.size;
  o["rss_per_phase"] = r.rss_per_phase;
}

// What was measured, and how.
void put_setup(OrderedJson& o, const BenchReport& r) {
  o["source"] = r.source;
  o["attn_type"] = r.attn_type;
  o["n_layer"] = r.n_layer;
  o["d_model"] = r.d_model;
  o["n_head"] = r.n_head;
  o["d_head"] = r.d_head;
  o["d_inner"] = r.d_inner;
  o["tgt_len"] = r.tgt_len;
  o["mem_len"] = r.mem_len;
  o["batch_size"] = r.batch_size;
  o["eval_batch_size"] = r.eval_batch_size;
  o["eval_tgt_len"] = r.eval_tgt_len;
  o["eval_mem_len"] = r.eval_mem_len;
  o["vocab"] = r.vocab;
  o["n_params"] = r.n_params;
  o["threads"] = r.threads;
  o["device"] = r.device;
  o["device_name"] = r.device_name;
  o["blas_core"] = r.blas_core;
  json::put_number(o, "load_average", r.load_average);
  o["quick"] = r.quick;
  o["warmup"] = r.warmup;
  o["repetitions"] = r.repetitions;
  json::put_number(o, "seconds", r.seconds);
}

}  // namespace

std::string to_json(const BenchReport& r) {
  OrderedJson o;
  put_figures(o, r);
  put_setup(o, r);
  return o.dump();
}

namespace {

std::string format_generations(const BenchReport& r) {
  if (r.generate_b1.tokens_per_s <= 0) return "";
  std::string s = "\ngeneration (greedy, fp32, random prompts; prompt reading not timed)\n";
  s += fmt::format("{:>6} {:>8} {:>6} {:>6} {:>11} {:>12} {:>14}\n", "batch", "context", "Q", "M",
                   "new tok/s", "ms per step", "read tok/s");
  std::vector<const GenerationResult*> all = {&r.generate_b1, &r.generate_b16};
  for (const auto& g : r.generate_by_context) all.push_back(&g);
  for (const auto* g : all) {
    s += fmt::format("{:>6} {:>8} {:>6} {:>6} {:>11.0f} {:>12.3f} {:>14.0f}\n", g->batch_size,
                     g->context, g->tgt_len, g->mem_len, g->tokens_per_s, g->ms_per_token,
                     g->read_tokens_per_s);
  }
  return s;
}

}  // namespace

std::string format_table(const BenchReport& r) {
  std::string s;
  s += fmt::format(
      "txl-bench: {} {} layers, d_model {}, {} heads of {}, FF {}, {:.2f}M parameters, V {}\n",
      r.source.empty() ? std::string("bench model") : r.source, r.n_layer, r.d_model, r.n_head,
      r.d_head, r.d_inner, r.n_params / 1e6, r.vocab);
  s += fmt::format(
      "attn {}, train batch {} x tgt_len {} (mem {}), eval batch {} x {} (mem {}), {} threads, "
      "load average {:.2f}{}\ndevice {} ({}), fp32 BLAS {}\n\n",
      r.attn_type, r.batch_size, r.tgt_len, r.mem_len, r.eval_batch_size, r.eval_tgt_len,
      r.eval_mem_len, r.threads, r.load_average, r.quick ? ", quick" : "", r.device, r.device_name,
      r.blas_core.empty() ? std::string("not OpenBLAS") : "OpenBLAS " + r.blas_core);
  s += fmt::format("{:<26} {:>9} {:>9} {:>9} {:>8} {:>11} {:>11} {:>8}\n", "phase", "tokens/s",
                   "ms/step", "best ms", "GFLOP/s", "RSS start", "RSS peak", "loss");
  auto row = [&](const char* name, const PhaseResult& p, double flops) {
    if (p.tokens_per_s <= 0) return;
    s +=
        fmt::format("{:<26} {:>9.0f} {:>9.1f} {:>9.1f} {:>8.1f} {:>8.0f} MB {:>8.0f} MB {:>8.4f}\n",
                    name, p.tokens_per_s, 1e3 * p.timing.median_s, 1e3 * p.timing.best_s,
                    p.tokens_per_s * flops / 1e9, p.rss_start_mb, p.peak_rss_mb, p.loss);
  };
  row("training fp32", r.train_fp32, r.flops_per_token);
  row("training bf16 autocast", r.train_bf16, r.flops_per_token);
  row("evaluation fp32 (memory)", r.eval_fp32, r.eval_flops_per_token);
  row("evaluation bf16 (memory)", r.eval_bf16, r.eval_flops_per_token);
  s += "\n";
  s += fmt::format(
      "FLOPs per token               {:.1f} M training (3 x {:.1f} M forward), "
      "{:.1f} M evaluation forward\n",
      r.flops_per_token / 1e6, r.flops_per_token_forward / 1e6, r.eval_flops_per_token / 1e6);
  s += fmt::format(
      "matmul peak                   fp32 {:.1f} GFLOP/s (n = {}), bf16 {:.1f} "
      "GFLOP/s (n = {})\n",
      r.peak_fp32.gflops, r.peak_fp32.size, r.peak_bf16.gflops, r.peak_bf16.size);
  const bool bf16 = r.train_bf16.tokens_per_s > 0;
  s += fmt::format("MFU                           fp32 {:.3f} (training GFLOP/s / fp32 peak){}\n",
                   r.mfu, bf16 ? fmt::format(", bf16 {:.3f} (/ bf16 peak)", r.mfu_bf16) : "");
  if (r.train_fp32.tokens_per_s > 0) {
    if (bf16) {
      s += fmt::format("bf16 / fp32 training          {:.2f}x\n",
                       r.train_bf16.tokens_per_s / r.train_fp32.tokens_per_s);
    }
    s += fmt::format("evaluation / training         {:.2f}x\n",
                     r.eval_fp32.tokens_per_s / r.train_fp32.tokens_per_s);
  }
  s += fmt::format("peak RSS                      {:.0f} MB{}{}\n", r.peak_rss_mb,
                   r.rss_per_phase ? "" : " (per-phase peaks are cumulative here)",
                   r.device == "cpu" ? "" : " of host memory; the GPU's memory: unknown");
  if (!r.sliding_vs_memory.empty()) {
    s += "\nsliding window (vanilla, stride 1, window L) vs memory (xl, Q + M = L), per scored "
         "token\n";
    s += fmt::format("{:>6} {:>6} {:>6} {:>14} {:>14} {:>10} {:>12} {:>12}\n", "L", "Q", "M",
                     "sliding us", "memory us", "ratio", "FLOP ratio", "counted");
    for (const auto& c : r.sliding_vs_memory) {
      s += fmt::format("{:>6} {:>6} {:>6} {:>14.1f} {:>14.2f} {:>9.0f}x {:>11.0f}x {:>11.0f}x\n",
                       c.attention_length, c.tgt_len, c.mem_len, 1e6 * c.sliding_s_per_token,
                       1e6 * c.memory_s_per_token, c.ratio, c.flop_ratio, c.counted_flop_ratio);
    }
  }
  s += format_generations(r);
  if (r.threads > 1 && r.load_average > 0.5 * std::max(1u, std::thread::hardware_concurrency())) {
    s += fmt::format(
        "\nwarning: load average {:.1f} with {} threads: OpenMP barriers wait for "
        "descheduled threads; compare with --threads 1\n",
        r.load_average, r.threads);
  }
  s += fmt::format(
      "\n{:.0f} s in all; tokens/s from the median of {} timed repetitions after {} "
      "warm-up (best: the fastest one; far below the median = a loaded machine)\n",
      r.seconds, r.repetitions, r.warmup);
  return s;
}

}  // namespace txl::bench
