#pragma once
// txl-bench: the speed of one model and batch configuration, measured in one process:
// training tokens/s in fp32 and bf16 autocast, memory-mode evaluation tokens/s, model
// FLOPs per token (models/flops.h) and the achieved GFLOP/s, this machine's matrix-product peak
// and the MFU, peak resident memory per phase, and the cost of vanilla sliding-window evaluation
// against Transformer-XL memory evaluation per scored token. Token ids are random: speed does
// not depend on them.

#include <cstdint>
#include <string>
#include <vector>

#include "txl/bench/generation.h"
#include "txl/bench/measure.h"
#include "txl/config/config.h"

namespace txl::bench {

// The default bench configuration: the built-in defaults of config.h, which are the bench model
// (4 layers, d_model 256, 4 heads of 64, FF 1024, tgt_len = mem_len = 128, batch 16, Adam).
config::ExperimentConfig bench_experiment();
inline constexpr std::int64_t kBenchVocab = 12871;

// How much to measure. full() for the figures of record, quick() finishes within a minute on
// 2 cores, tests set tiny values directly.
struct BenchSettings {
  int warmup = 2;       // untimed training steps / evaluation segments
  int repetitions = 7;  // timed ones (median)
  bool bf16 = true;     // also measure bf16 autocast
  std::vector<std::int64_t> peak_sizes = {512, 1024, 2048};  // square matmuls of the probe
  int peak_repetitions = 5;                                  // best of
  std::vector<std::int64_t> attention_lengths = {512, 800};  // sliding vs memory comparison
  std::int64_t sliding_batch = 4;                            // windows per sliding forward
  int sliding_warmup = 1;
  int sliding_repetitions = 3;
  // Generation (bench/generation.h): new tokens per row, timed runs (median).
  std::int64_t generate_new_tokens = 256;
  int generate_repetitions = 3;
  std::vector<std::int64_t> generate_contexts = {128, 1024};  // memory lengths of ms per token

  static BenchSettings full();
  static BenchSettings quick();
};

struct BenchOptions {
  std::int64_t vocab = kBenchVocab;  // V of the random token ids
  int threads = 0;                   // the program's intra-op threads (reported); 0 = all cores
  BenchSettings settings = BenchSettings::full();
  bool generate_only = false;  // only the generation figures
};

struct BenchReport {
  // what was measured
  std::string source;     // the experiment file ("" = built-in bench model)
  std::string attn_type;  // model.attn_type's name, as the JSON report writes it
  int n_layer = 0, d_model = 0, n_head = 0, d_head = 0, d_inner = 0;
  std::int64_t tgt_len = 0, mem_len = 0, batch_size = 0, vocab = 0;
  std::int64_t eval_batch_size = 0, eval_tgt_len = 0, eval_mem_len = 0;
  std::int64_t n_params = 0;
  int threads = 0;
  double load_average = -1.0;  // 1-minute load average at the start (-1 unknown)
  std::string device;          // where the phases ran (run.device resolved), e.g. "cpu", "cuda:0"
  std::string device_name;     // the CPU's model name, or "unknown" (a GPU's name is not queried)
  std::string blas_core;       // OpenBLAS's kernels (util::openblas_core), "" when not OpenBLAS
  bool quick = false;
  int warmup = 0, repetitions = 0;  // of the training and evaluation phases

  // FLOPs (models::count_flops_per_token): training = forward + backward = 3 x forward
  double flops_per_token = 0.0;          // training FLOPs per token
  double flops_per_token_forward = 0.0;  // forward FLOPs per token (training geometry)
  double eval_flops_per_token = 0.0;     // forward FLOPs per token of the evaluation geometry

  // throughput
  PhaseResult train_fp32, train_bf16, eval_fp32, eval_bf16;  // bf16 zero when not measured
  double train_gflops = 0.0;  // train_fp32 tokens/s x flops_per_token
  double train_gflops_bf16 = 0.0;
  double eval_gflops = 0.0;
  MatmulPeak peak_fp32, peak_bf16;
  double mfu = 0.0;            // train_gflops / peak_fp32
  double mfu_bf16 = 0.0;       // train_gflops_bf16 / peak_bf16
  double peak_rss_mb = 0.0;    // of the whole process (ru_maxrss)
  bool rss_per_phase = false;  // the kernel let us reset the peak between phases

  std::vector<EvalCostComparison> sliding_vs_memory;  // one per attention length

  // Generation (greedy, fp32, random prompts of eval.tgt_len tokens): batch 1 and 16 at the
  // experiment's memory, and batch 1 at each memory length of generate_contexts (prompts of
  // that length).
  GenerationResult generate_b1, generate_b16;
  std::vector<GenerationResult> generate_by_context;

  double seconds = 0.0;  // wall time of the whole bench
};

// Runs every measurement on `config` (config.model, config.train.batch_size; eval sizes from
// config.eval resolved against the model), on the intra-op threads the program set
// (ProcessSetup; options.threads names them in the report). Throws txl::Error for a
// configuration the model rejects.
BenchReport run_bench(const config::ExperimentConfig& config, const BenchOptions& options);

// One JSON object on one line. Keys of record: train_tokens_per_s, train_tokens_per_s_bf16,
// eval_tokens_per_s, flops_per_token, peak_gflops_fp32, peak_gflops_bf16, mfu, peak_rss_mb,
// sliding_over_memory_cost_<L> for every attention length, generate_tokens_per_s_b1,
// generate_tokens_per_s_b16, generate_ms_per_token_ctx<C> for every context length C; and the
// details around them. A
// figure that is not finite is null, its reason under "null_because" (util/json.h).
std::string to_json(const BenchReport& report);

// A readable table of the same figures.
std::string format_table(const BenchReport& report);

// The 1-minute load average of this machine (/proc/loadavg), -1 where unavailable.
double load_average();

}  // namespace txl::bench
