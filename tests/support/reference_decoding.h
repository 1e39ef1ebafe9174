#pragma once
// What incremental decoding must reproduce, computed with the model's own forward pass:
// log-probabilities [1, N, V] at every position of a text [1, N].

#include <torch/torch.h>

#include "txl/models/incremental.h"
#include "txl/models/transformer_lm.h"

namespace txl::test {

// Evaluation in memory mode: segments of o.tgt_len, memory o.mem_len (clamp_len, same_length),
// the model's plain path (no key/value cache).
torch::Tensor segmented_log_probs(models::TransformerLM& model, const torch::Tensor& tokens,
                                  const models::DecodeOptions& o);

// Position t read by one forward over the last `window` tokens up to t, without memory.
torch::Tensor windowed_log_probs(models::TransformerLM& model, const torch::Tensor& tokens,
                                 int64_t window, int64_t clamp_len = -1);

// One forward over the whole text, without memory.
torch::Tensor one_pass_log_probs(models::TransformerLM& model, const torch::Tensor& tokens);

// What the decoder must give for `o`: windowed for absolute positions or mem_len 0, else
// segmented.
torch::Tensor reference_log_probs(models::TransformerLM& model, const torch::Tensor& tokens,
                                  const models::DecodeOptions& o);

}  // namespace txl::test
