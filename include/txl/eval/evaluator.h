#pragma once
// Perplexity evaluation (docs/model.md section 7): memory mode (Transformer-XL: segments in order,
// each with memory M, optional unscored warm-up), segments (each segment on its own, no
// memory) and sliding (each token predicted from the L tokens before it, stride s), all with
// one eval::Settings (settings.h).
//
// Legend: N tokens of the text, B rows of a batch, T positions of a batch.

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "txl/data/batch.h"
#include "txl/data/dataset.h"
#include "txl/eval/settings.h"
#include "txl/models/memory.h"
#include "txl/models/transformer_lm.h"

namespace txl::eval {

struct EvalResult {
  std::string split;            // "valid", "test" or a file name (set by the caller)
  Mode mode = Mode::kMemory;    // the mode evaluated
  int tgt_len = 0;              // Q used (sliding: the window L)
  int mem_len = 0;              // M used (0 for segments and sliding)
  int window = 0;               // sliding window L (0 otherwise)
  int stride = 0;               // sliding stride (0 otherwise)
  bool documents = false;       // memory reset at every document (Settings::documents)
  std::int64_t max_tokens = 0;  // the text's first max_tokens targets were scored (0 = all)
  double loss = 0.0;            // mean negative log-likelihood per scored token, nats
  double ppl = 0.0;             // exp(loss)
  double bits_per_token = 0.0;  // loss / ln 2
  double bits_per_byte = 0.0;   // total bits / UTF-8 bytes of the scored text
  double bits_per_char = 0.0;   // total bits / characters (byte and char corpora; else 0)
  // Word-level perplexity: exp(summed nll / words of the scored text), words counted by
  // data::count_words's rule (prorated for a prefix, as bytes are); 0 when the text has none.
  double word_ppl = 0.0;
  std::int64_t words = 0;     // the words it divides by
  std::int64_t tokens = 0;    // scored tokens
  double seconds = 0.0;       // wall time
  double tokens_per_s = 0.0;  // scored tokens per second
  // Recall tokens (synthetic corpus): mean loss on the targets a recall mask selects, and how
  // many there were; 0 when no mask was given.
  double recall_loss = 0.0;  // nats per recall token; ln 64 = 4.159 = no recall
  std::int64_t recall_tokens = 0;
  // float [tokens] in text order, when asked (Extras); else undefined. Plain text: index t holds
  // the loss of the target at offset t + 1. Document mode: the scored targets only (every
  // document's first token is none), still in text order.
  torch::Tensor token_losses;
  // When asked (Extras::by_position): the mean loss at each position 0..Q-1 of a segment (NaN
  // where no token was scored) and the tokens scored there. Without memory, position 0 has no
  // context at all; with it, every position has M tokens or more.
  std::vector<double> loss_by_position;
  std::vector<std::int64_t> tokens_by_position;
};

// What an evaluation gives beyond its figures, on request. The recall mask needs plain text (not
// Settings::documents); per-token losses in document mode need one process.
struct BatchScore;  // one batch scored (below)

struct Extras {
  bool token_losses = false;  // fill EvalResult::token_losses
  torch::Tensor recall_mask;  // bool [N] (e.g. data::synthetic_recall_mask): targets whose loss is
                              // also reported on its own (recall_loss)
  bool by_position = false;   // fill EvalResult::loss_by_position (memory and segments modes,
                              // model.ext_len 0)
  // Memory and segments modes: called after each batch this process scores with every layer's
  // attention weights, float [B, H, T, K] each (K = keys before the segment + T) on the device,
  // and the batch's score: its target_mask and count are the queries scored
  // (eval::attention_by_distance).
  std::function<void(const std::vector<torch::Tensor>& weights, const BatchScore& score)> attention;
};

// Evaluates `model` (on settings.device) on `text`: its first settings.max_tokens targets
// (scored_prefix), in settings.mode, its documents on their own when settings.documents. The
// model is put in eval mode and no gradient is recorded. Bits per byte / character use the
// text's n_bytes / n_chars (0 = not reported). Throws txl::Error on bad input.
EvalResult evaluate(models::TransformerLM& model, const data::EncodedSplit& text,
                    const Settings& settings, const Extras& extras = {});

// The text one evaluation scores: the first max_tokens targets of `split` (all of them when
// max_tokens is 0 or not smaller than N - 1), i.e. ids [max_tokens + 1]; bytes and characters
// prorated by targets and rounded to the nearest; the document starts inside the prefix. Every
// mode scores the same tokens: memory and segments modes read B parallel streams, so stopping
// after max_tokens scored tokens would sample B places of the text instead.
data::EncodedSplit scored_prefix(const data::EncodedSplit& split, std::int64_t max_tokens);

// The negative log-likelihood summed over the positions `mask` selects, in double precision,
// as a tensor on nll's device (no host read). nll float [B, T]; mask bool [B, T].
torch::Tensor masked_sum(const torch::Tensor& nll, const torch::Tensor& mask);

// One batch scored: the per-position nll and its masked sum over the batch's target_mask, both
// left on the evaluation's device (an evaluation reads its sum once, at the end).
struct BatchScore {
  torch::Tensor nll;          // float [B, T] on the device; meaningful where target_mask is true
  torch::Tensor sum;          // double [] on the device: masked_sum(nll, target_mask), nats
  torch::Tensor target_mask;  // bool [B, T] on the device
  std::int64_t count = 0;     // scored targets (the batch's n_scored)

  double sum_value() const;  // `sum` read to the host (waits for the device)
};

// The evaluation forward, the only one: `batch` (on the CPU) is moved to settings.device and
// run through the model with segment_lookback(settings, model), under bf16 autocast when
// settings.bf16. `memory` (memory mode) holds the memory of the previous batch and receives the
// new one; null = no memory. No gradient is recorded; the caller puts the model in eval mode.
// `attention`, when given, receives every layer's attention weights (TransformerLM::forward).
BatchScore score_batch(models::TransformerLM& model, const data::Batch& batch,
                       const Settings& settings, models::Memory* memory,
                       std::vector<torch::Tensor>* attention = nullptr);

// One JSON object per result, with the fields above (not the token losses).
std::string to_json(const EvalResult& result);

}  // namespace txl::eval
