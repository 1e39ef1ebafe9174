#pragma once
// What incremental decoding must reproduce, computed with the model's own forward pass:
// log-probabilities [1, N, V] at every position of a text [1, N].

#include <torch/torch.h>

#include <string>
#include <vector>

#include "txl/generation/incremental.h"
#include "txl/models/transformer_lm.h"

namespace txl::test {

// Evaluation in memory mode: segments of o.tgt_len, memory o.mem_len (clamp_len, same_length,
// and the model's compressive memory and memory tokens), the model's plain path (no key/value
// cache).
torch::Tensor segmented_log_probs(models::TransformerLM& model, const torch::Tensor& tokens,
                                  const generation::DecodeOptions& o);

// Position t read by one forward over the last `window` tokens up to t, without memory.
torch::Tensor windowed_log_probs(models::TransformerLM& model, const torch::Tensor& tokens,
                                 int64_t window, int64_t clamp_len = -1);

// One forward over the whole text, without memory.
torch::Tensor one_pass_log_probs(models::TransformerLM& model, const torch::Tensor& tokens);

// What the decoder must give for `o`: windowed for absolute positions or mem_len 0 (without
// memory tokens), else segmented.
torch::Tensor reference_log_probs(models::TransformerLM& model, const torch::Tensor& tokens,
                                  const generation::DecodeOptions& o);

// The decoder's log-probabilities of rows tokens [B, N] (on any device of the model's) after
// every position from prompt_len - 1 on, reading the prompt at once and then one token at a
// time: [B, N - prompt_len + 1, V], on the CPU.
torch::Tensor decoded(models::TransformerLM& model, const torch::Tensor& tokens, int64_t prompt_len,
                      const generation::DecodeOptions& o);

// Decoding at the sizes users run, in fp32: d_model 256, heads of 64, a vocabulary of 10,000,
// 2 layers, segments of 16, a prompt of 21 and 35 decoded tokens. One case per attention type
// and memory length (models/incremental_test on the CPU, models/gpu_decoding_test on CUDA).
struct SizedDecodingCase {
  std::string name;
  config::AttnType attn_type;
  int mem_len;
  bool adaptive = false;  // adaptive softmax (cutoffs 1000, 4000)
  int cmem_len = 0;       // compressive memory (rate 2, conv), decoded segment by segment
  int mem_tokens = 0;     // memory tokens, decoded segment by segment
};
const std::vector<SizedDecodingCase>& sized_decoding_cases();

// fp32 through 2 layers of width 256 and a 10k softmax: on the CPU 2 ulps of a log-probability
// near -16 (2e-6); rows of a packed product of 16 (AVX-512) were seen 7e-5 from alone.
constexpr double kSizedDecodingTolerance = 2e-4;

// The largest differences of one case, the model's weights and the decoder on `device`:
//   alone    decoding one row against the fp64 forward of the same weights on the CPU
//   batch    that row, left-padded in a batch of 16 rows with longer prompts, against alone
//   control  a decoder of another memory length (or window) against the fp64 forward: how far
//            a wrong computation lands
//   spread   the smallest standard deviation of a position's expected log-probabilities (a
//            model near uniform would make the comparison weak)
//   device   where the decoder's tensors were
struct SizedDecodingErrors {
  double alone = 0, batch = 0, control = 0, spread = 0;
  torch::Device device = torch::kCPU;
};
SizedDecodingErrors sized_decoding_errors(const SizedDecodingCase& c, const torch::Device& device);

// Every case on `device`, asserted (gtest): decoded there, not near uniform, decoding and a row
// of the batch within kSizedDecodingTolerance, the control 20 times beyond; each case's figures
// printed after `tag`.
void expect_sized_decoding(const torch::Device& device, const std::string& tag);

}  // namespace txl::test
