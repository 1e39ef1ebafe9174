#pragma once
// Perplexity evaluation (MODEL.md section 7): memory mode (Transformer-XL: segments in order,
// each with memory M, optional unscored warm-up), segments (each segment on its own, no
// memory) and sliding (each token predicted from the L tokens before it, stride s).

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "txl/config/config.h"
#include "txl/dist/group.h"
#include "txl/models/transformer_lm.h"

namespace txl::eval {

// The resolved evaluation settings: EvalConfig with every "inherit" value filled from the model.
struct EvalOptions {
  std::string mode = "memory";  // memory | segments | sliding
  int tgt_len = 128;            // segment length Q (memory, segments)
  int mem_len = 128;            // memory length M (memory mode)
  int clamp_len = -1;           // -1 = no clamp
  bool same_length = false;     // every query sees the same number of keys
  int window = 128;             // sliding: window L
  int stride = 1;               // sliding: scored tokens per window
  int warmup = 0;               // memory: unscored tokens before each stream's start
  int batch_size = 16;          // streams (memory, segments) or windows (sliding) per batch
  std::int64_t max_tokens = 0;  // score only the text's first max_tokens targets (0 = all);
                                // bytes and characters are prorated
  bool cache_kv = true;         // memory: carry the memory's keys and values between segments
                                // (models::Context::cache_kv); false projects them anew each time
  // Data-parallel evaluation: each rank of `group` scores its share of every batch's rows
  // (memory, segments: dist::shard_rows, so each stream's memory stays on one rank) or its
  // stretch of whole batches (sliding: windows stand alone), and the sums are reduced and the
  // per-token losses gathered in text order, so every rank returns the single-process result.
  // Null = this process alone.
  dist::Group* group = nullptr;
};

// Fills an EvalOptions from the experiment's eval section, inheriting from the model section.
EvalOptions resolve_eval_options(const config::ExperimentConfig& config);

// The model context of memory and segments mode: memory (mem_len, same_length and the carried
// keys and values) only in memory mode with mem_len > 0, clamp_len always. What evaluate() runs
// every segment with, and the bench with it.
models::Context segment_context(const EvalOptions& options, const models::TransformerLM& model);

struct EvalResult {
  std::string split;              // "valid", "test" or a file name
  std::string mode;               // memory | segments | sliding
  int tgt_len = 0;                // Q used
  int mem_len = 0;                // M used (0 for segments and sliding)
  int window = 0;                 // sliding window L (0 otherwise)
  int stride = 0;                 // sliding stride (0 otherwise)
  double loss = 0.0;              // mean negative log-likelihood per scored token, nats
  double ppl = 0.0;               // exp(loss)
  double bits_per_token = 0.0;    // loss / ln 2
  double bits_per_byte = 0.0;     // total bits / UTF-8 bytes of the original text
  double bits_per_char = 0.0;     // total bits / characters (byte and char corpora; else 0)
  std::int64_t tokens = 0;        // scored tokens
  double seconds = 0.0;           // wall time
  double tokens_per_s = 0.0;      // scored tokens per second
  // Recall tokens (synthetic corpus): mean loss on the targets a recall mask selects, and how
  // many there were; 0 when no mask was given.
  double recall_loss = 0.0;          // nats per recall token; ln 64 = 4.159 = no recall
  std::int64_t recall_tokens = 0;
};

// Evaluates `model` on token ids (int64 [N]); the model is put in eval mode and no gradient is
// recorded. n_bytes / n_chars are the original text's sizes for bits per byte / character
// (0 = not reported). When `token_losses` is not null it receives the per-token losses in
// text order (float [tokens]).
// `recall_mask` (bool [N], e.g. data::synthetic_recall_mask) selects target tokens whose loss
// is also reported on its own (recall_loss).
// `doc_starts` (int64 [n_docs], memory and segments modes) evaluates documents on their own, as
// data.document_mode trains them: memory is reset at each document and its first token is not
// scored. Per-token losses and recall need plain text (no doc_starts).
EvalResult evaluate(models::TransformerLM& model, const torch::Tensor& ids,
                    const EvalOptions& options, std::int64_t n_bytes = 0,
                    std::int64_t n_chars = 0, torch::Tensor* token_losses = nullptr,
                    const torch::Tensor& recall_mask = {},
                    const torch::Tensor& doc_starts = {});

// One JSON object per result, with the fields above.
std::string to_json(const EvalResult& result);

}  // namespace txl::eval
