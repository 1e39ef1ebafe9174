#pragma once
// Where one training step or one evaluation segment spends its time: it runs under LibTorch's
// autograd profiler (the legacy CPU profiler, present in 1.13 and 2.x) and every op is charged its
// self time (its own time minus the ops nested inside it: aten::matmul -> aten::bmm, backward nodes
// -> aten ops), so the column adds up to the profiled time of the calling thread.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "txl/bench/measure.h"
#include "txl/config/config.h"

namespace txl::bench {

struct OpTime {
  std::string name;  // e.g. "aten::bmm", "MmBackward0"
  std::int64_t calls = 0;
  double self_ms = 0.0;
  double share = 0.0;  // self_ms / total_ms
};

struct StepProfile {
  std::vector<OpTime> ops;  // every op, by self time, largest first
  double total_ms = 0.0;    // sum of the self times (the profiled step on the calling thread)
  double copy_share = 0.0;  // aten::copy_, contiguous, clone, cat, _to_copy, constant_pad_nd
  double fill_share = 0.0;  // aten::fill_, zero_, zeros, zeros_like, full, full_like, ones
  double masked_fill_share = 0.0;  // aten::masked_fill(_), the attention masks
  std::string what;                // "one training step", "one evaluation segment (memory mode)"
  bool bf16 = false;
};

// Self time of a list of (name, self time) records folded by name; shares and the copy / fill
// groups computed. Exposed for tests.
StepProfile summarize_ops(const std::vector<std::pair<std::string, double>>& self_ms);

// Runs `fn` once under the profiler and folds its ops (by input shape too with `by_shape`).
StepProfile profile_call(const std::function<void()>& fn, bool by_shape = false);

// Takes options.warmup training steps as measure_training does, then profiles one more. With
// `by_shape`, ops are told apart by their input shapes too ("aten::copy_ [16,128,256],[...]"),
// to find which copy or fill is the expensive one.
StepProfile profile_training_step(const config::ExperimentConfig& config, std::int64_t vocab,
                                  const PhaseOptions& options, bool by_shape = false);

// Takes options.warmup memory-mode evaluation segments as measure_eval does (same model, batch
// options.batch_size, eval.tgt_len and memory), then profiles one more.
StepProfile profile_eval_segment(const config::ExperimentConfig& config, std::int64_t vocab,
                                 const PhaseOptions& options, bool by_shape = false);

// The matrix-product FLOPs one call of `fn` performs, counted from the ops it runs (the same
// profiler, with input shapes): 2 m k n for every aten::mm and addmm ([m, k] x [k, n]), bmm and
// baddbmm (times the batch) and txl's batched_matmul (the attention's, the same way), mv and
// addmv (2 m k). Composite ops (matmul, linear, einsum) are
// counted through the products they call. A count of work: it does not depend on the machine.
double count_matmul_flops(const std::function<void()>& fn);

// A table of the `top` largest ops and the copy / fill shares.
std::string format_profile(const StepProfile& profile, int top = 20);

}  // namespace txl::bench
