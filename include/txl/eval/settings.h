#pragma once
// The one set of evaluation settings (docs/model.md section 7). Every evaluation path takes a
// Settings: the trainer's periodic validation, txl-eval, the ablation and the bench. It is
// resolved once from the experiment's eval section and the model section (resolve_settings),
// which takes the "inherit" values of EvalConfig (-1 = model.mem_len, 0 = tgt_len, ...) from
// config::effective_eval, their one reading, which the validator's rules also use. Other modes
// or lengths of one experiment (the ablation's plan, the memory sweep, the bench) are resolved
// from a copy of the experiment with those eval keys changed.

#include <torch/torch.h>

#include <cstdint>
#include <string>

#include "txl/config/config.h"
#include "txl/data/stream.h"
#include "txl/models/transformer_lm.h"

namespace txl::dist {
class Group;
}

namespace txl::eval {

// eval.mode: memory | segments | sliding (config::EvalMode, named by config::to_string).
using Mode = config::EvalMode;

struct Settings {
  Mode mode = Mode::kMemory;    // eval.mode
  int tgt_len = 128;            // segment length Q (memory, segments; sliding keeps it for reports)
  int mem_len = 128;            // memory length M; 0 outside memory mode
  int clamp_len = -1;           // distances above it share one encoding; -1 = no clamp
  bool same_length = false;     // every query sees the same number of keys (memory mode)
  bool zero_memory = false;     // eval.mem_init (model = model.mem_init) is zeros: streams start
                                // from mem_len zero vectors (memory mode, models::Lookback)
  int ext_len = 0;              // model.ext_len: E preceding tokens as unscored input of every
                                // segment (memory, segments); the memory ends E positions before
                                // the segment's end, as in training
  int window = 128;             // sliding: window L
  int stride = 1;               // sliding: targets scored per window
  int warmup = 0;               // memory: unscored tokens before each stream's start
  int batch_size = 16;          // streams (memory, segments) or windows (sliding) per batch
  std::int64_t max_tokens = 0;  // score only the text's first max_tokens targets (0 = all), bytes
                                // and characters prorated (scored_prefix)
  bool cache_kv = true;         // memory: carry the memory's keys and values between segments
                                // (models::Lookback::cache_kv); false projects them anew each time
  bool documents = false;       // data.document_mode: each document on its own (memory reset at
                                // its start, its first token not scored), from the split's
                                // doc_starts; memory and segments modes only
  torch::Device device = torch::kCPU;  // run.device: where the model is and evaluation runs
  bool bf16 = false;                   // run.precision = bf16: the forward under bf16 autocast
  // Data-parallel evaluation: each rank of `group` scores its share of every batch's rows
  // (memory, segments: dist::shard_rows, so each stream's memory stays on one rank) or its
  // stretch of whole batches (sliding: windows stand alone), and the sums are reduced and the
  // per-token losses gathered in text order, so every rank returns the single-process result.
  // Null (or a group of one) = this process alone.
  dist::Group* group = nullptr;
};

// The settings of `config`: eval.tgt_len (0 = model.tgt_len), eval.mem_len (-1 =
// model.mem_len; 0 outside memory mode), eval.clamp_len (-2 = model.clamp_len), eval.same_length
// (-1 = model.same_length), eval.window (0 = tgt_len), model.ext_len, the other eval keys as
// they are, data.document_mode, run.device (on GPU `group`'s local rank) and run.precision.
// Throws txl::Error naming the key for eval.warmup > 0 in memory mode with model.ext_len > 0
// (warm-up text carries no ext context).
Settings resolve_settings(const config::ExperimentConfig& config, dist::Group* group = nullptr);

// Sliding windows of a context sweep score c / kSweepStrideDivisor tokens each (at least 1), so
// every scored token sees between 7c/8 and c tokens, at about 8 segment passes of cost per point
// instead of c.
inline constexpr std::int64_t kSweepStrideDivisor = 8;

// `config` evaluated at attention length c, the tokens each scored token sees (docs/model.md
// section 8), as the context sweeps of txl-ablate and txl-eval --sweep define it:
//   relative positions: memory mode with M = c and same_length (every query sees c keys), each
//     stream warmed up with c unscored tokens; c = 0 is memory mode without memory;
//   absolute positions: sliding windows L = c (0 = Q) with stride max(1, L / kSweepStrideDivisor).
// Throws txl::Error for c < 0.
config::ExperimentConfig at_context(const config::ExperimentConfig& config, std::int64_t c);

// The trainer's periodic validation: resolve_settings, with segments instead of sliding (periodic
// evaluation stays cheap), train.eval_max_tokens as the scored prefix when set, and plain text
// (the trainer evaluates documents on their own as a second, logged figure).
Settings validation_settings(const config::ExperimentConfig& config, dist::Group* group);

// The model's per-forward context of an evaluation, for every mode: memory (mem_len,
// same_length, ext_len and the carried keys and values) only in memory mode with mem_len > 0,
// clamp_len always.
models::Lookback segment_lookback(const Settings& settings, const models::TransformerLM& model);

// Whether an evaluation carries state from each segment to the next: in memory mode, with memory
// positions (mem_len > 0) or the model's recurrent memory tokens (model.mem_tokens > 0).
bool carries_memory(const Settings& settings, const models::TransformerLM& model);

// The streams an evaluation reads (memory and segments; sliding).
data::EvalStreamOptions eval_stream_options(const Settings& settings);
data::SlidingStreamOptions sliding_stream_options(const Settings& settings);

// The lengths that describe an evaluation in reports and cache keys: Q always, M in memory mode,
// L and s in sliding mode, 0 where the mode does not use them.
struct Shape {
  int tgt_len = 0;
  int mem_len = 0;
  int window = 0;
  int stride = 0;
};
Shape shape_of(const Settings& settings);

}  // namespace txl::eval
