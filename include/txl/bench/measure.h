#pragma once
// The measurements txl-bench is made of, each usable on its own (tests run them on a tiny model).
// Every timing excludes warm-up calls (allocator, memory filling up, lazy initialisation) and
// reports the median of the timed repetitions, so one slow repetition (another process on the
// machine) does not move the figure.
//
// Legend: B batch, Q segment length (tgt_len), M memory length, K = M + Q keys, L attention
// length of the evaluation comparison, d model width, V vocabulary.

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "txl/config/config.h"
#include "txl/eval/settings.h"

namespace txl::bench {

// ------------------------------------------------------------------------------ timing
struct Timing {
  double median_s = 0.0;  // median of the timed repetitions, seconds
  double best_s = 0.0;    // fastest repetition
  int repetitions = 0;
};

// Calls `fn` `warmup` times untimed, then `repetitions` (>= 1) times timed.
Timing time_repeated(const std::function<void()>& fn, int warmup, int repetitions);

// ------------------------------------------------------------------------------ memory
// Resident memory of this process in MiB, from /proc/self/status (Linux); 0 where unavailable.
double current_rss_mb();
// The highest resident memory since the process started or since the last reset_peak_rss()
// (VmHWM; getrusage's ru_maxrss where /proc is missing).
double peak_rss_mb();
// Starts a new peak-memory window (writes "5" to /proc/self/clear_refs, Linux >= 4.0), so that
// peak_rss_mb() reports the peak of one phase. Returns false where the kernel refuses: then
// peaks are cumulative over the process.
bool reset_peak_rss();

// -------------------------------------------------------------------------- matmul peak
struct MatmulPeak {
  double gflops = 0.0;    // best achieved GFLOP/s over sizes and repetitions (2 n^3 per product)
  std::int64_t size = 0;  // n of the best square product
};

// The matrix-product peak of `device` for `dtype` (kFloat or kBFloat16), on the CPU with the
// current intra-op threads: square torch::mm of each size in `sizes`, best of `repetitions` (after
// one warm-up each; a GPU is waited for inside each timing). Throws txl::Error for an empty size
// list or a size < 1.
MatmulPeak probe_matmul_peak(torch::ScalarType dtype, const std::vector<std::int64_t>& sizes,
                             int repetitions, const torch::Device& device = torch::kCPU);

// Waits until `device` has finished the work queued so far (nothing to wait for on the CPU).
void wait_for(const torch::Device& device);

// -------------------------------------------------------------------- model throughput
struct PhaseOptions {
  std::int64_t batch_size = 16;  // B rows (streams, or windows for sliding evaluation)
  int warmup = 2;                // untimed steps / segments / windows batches
  int repetitions = 5;           // timed ones; the median counts
  bool bf16 = false;             // bf16 autocast (fp32 master weights), as run.precision: bf16
  std::uint64_t seed = 1234;     // model initialisation and the random token ids
  torch::Device device = torch::kCPU;  // where the model runs (run.device)
};

struct PhaseResult {
  double tokens_per_s = 0.0;         // tokens_per_step / timing.median_s
  Timing timing;                     // per step (training) or per batch (evaluation)
  std::int64_t tokens_per_step = 0;  // scored tokens per timed call, B * Q
  double rss_start_mb = 0.0;         // resident memory when the phase started
  double peak_rss_mb = 0.0;          // highest resident memory during the phase
  double loss = 0.0;  // mean nll of the last call, a sanity check (finite); evaluation runs
                      // on a random memory, so it is not the model's real loss
};

// Training steps as the trainer takes them, through the same train::Step (chunks of
// train.batch_chunk, gradient norm and clip, the optimizer of config.train at the learning rate
// of its schedule) on TrainStream batches of B x Q random token ids, in one process. Memory
// carries over between steps. Throws txl::Error for a vocabulary the model rejects (e.g.
// smaller than the last adaptive cutoff).
PhaseResult measure_training(const config::ExperimentConfig& config, std::int64_t vocab,
                             const PhaseOptions& options);

// The evaluation settings of `config` in memory mode (eval::resolve_settings with eval.mode =
// memory): Q = eval.tgt_len, M = eval.mem_len, clamp_len, same_length, ext_len as resolved; no
// warm-up (the bench's memory starts full), on the CPU in fp32 (PhaseOptions::bf16 decides).
eval::Settings memory_eval_settings(const config::ExperimentConfig& config);

// Evaluation in memory mode as eval::evaluate runs it: eval mode, no gradient, EvalStream
// segments of Q (eval.tgt_len) with memory M (eval.mem_len, resolved from the model), the
// memory carried between segments; timed with the memory full (it starts full of random hidden
// states: the cost does not depend on their values).
PhaseResult measure_eval(const config::ExperimentConfig& config, std::int64_t vocab,
                         const PhaseOptions& options);

// ----------------------------------------------------- sliding versus memory evaluation
// The cost per scored token of vanilla sliding-window evaluation (stride 1) against
// Transformer-XL memory evaluation at the same attention length L (paper section 4.3, table 9:
// both attend to L tokens per prediction):
//   sliding  the model with attn_type vanilla (the same sizes, no memory) scores one token per
//            window of L tokens: every batch of B windows of L tokens (SlidingStream, as
//            eval.mode: sliding runs it) costs one forward; per token = time / B;
//   memory   the configured model (attn_type xl unless it is xl or shaw) in memory mode with
//            Q = eval.tgt_len (resolved) and M = L - Q, so that the last query of a segment
//            attends to exactly L keys; timed with the memory full; per token = time / (B Q).
// Besides the seconds, one more call of each side runs under count_matmul_flops (profile.h):
// the work each mode does per scored token, counted from the products it ran, whatever the
// machine's speed.
struct EvalCostComparison {
  std::int64_t attention_length = 0;  // L
  std::int64_t tgt_len = 0;           // Q of memory mode
  std::int64_t mem_len = 0;           // M = L - Q
  std::int64_t sliding_batch = 0;     // windows per sliding forward
  std::int64_t memory_batch = 0;      // streams of memory mode
  double sliding_s_per_token = 0.0;
  double memory_s_per_token = 0.0;
  double ratio = 0.0;  // sliding_s_per_token / memory_s_per_token
  // The same ratio predicted by models/flops.h: L x the vanilla forward FLOPs per token of an
  // L-token segment (the output layer over all L positions, as the evaluator runs it) over the
  // xl forward FLOPs per token at (Q, M). A measured ratio far below it means the memory side
  // runs further from peak than the sliding side.
  double flop_ratio = 0.0;
  // Counted: matrix-product FLOPs of one sliding batch over the tokens it scored, of one memory
  // segment over its B Q tokens, and their ratio (what flop_ratio predicts).
  double sliding_flops_per_token = 0.0;
  double memory_flops_per_token = 0.0;
  double counted_flop_ratio = 0.0;
};

// `sliding` and `memory` give batch, warm-up and repetitions of each side (bf16 applies to
// both). Throws txl::Error when L <= Q.
EvalCostComparison sliding_over_memory_cost(const config::ExperimentConfig& config,
                                            std::int64_t vocab, std::int64_t attention_length,
                                            const PhaseOptions& sliding,
                                            const PhaseOptions& memory);

// ---------------------------------------------------------------- attention cost vs M
struct AttentionCostPoint {
  std::int64_t mem_len = 0;
  double us_per_token = 0.0;  // median forward time of one attention block per query token
};

struct AttentionCostFit {
  std::vector<AttentionCostPoint> points;
  double intercept_us = 0.0;  // least-squares line us_per_token = intercept + slope * M
  double slope_us = 0.0;
  double r2 = 0.0;  // coefficient of determination of that line (1 = exactly linear)
};

// The first layer's attention block of the configured model alone (no gradient, eval mode) on
// x [B, Q, d] and memory [B, M, d] of random values, for each M in `mem_lens`, with the masks
// and relative encodings the model builds for that shape. Per query token the work is linear
// in K = M + Q, so the fitted line should explain the points (r2 near 1).
AttentionCostFit attention_cost_by_mem_len(const config::ModelConfig& model, std::int64_t batch,
                                           std::int64_t tgt_len,
                                           const std::vector<std::int64_t>& mem_lens, int warmup,
                                           int repetitions);

}  // namespace txl::bench
