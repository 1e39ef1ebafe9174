#pragma once
// What the data layer hands the model: one batch of B rows of T positions, with the masks that
// say which inputs are real and which targets are scored (docs/model.md section 1), and padded
// batches of variable-length sequences.
//
// Shapes: B batch rows (parallel streams or windows), T positions in this batch (the segment
// length Q, plus any unscored context columns in front of it).

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace txl::data {

struct Batch {
  torch::Tensor tokens;       // int64 [B, T] input ids, PAD where input_mask is false
  torch::Tensor targets;      // int64 [B, T] next-token ids, PAD where target_mask is false
  torch::Tensor input_mask;   // bool [B, T] true where the input token is real (keys that may be
                              // attended); false only on padding
  torch::Tensor target_mask;  // bool [B, T] true where the target must be scored (loss, token
                              // counts, perplexity); real-but-unscored inputs (ext_len context,
                              // warm-up text) have input_mask true and target_mask false
  torch::Tensor reset;        // bool [B] true where this row starts a new stream or document, so
                              // that row's memory must be cleared before this batch
  std::int64_t n_scored = 0;  // number of true entries of target_mask
  std::int64_t index = 0;     // batch index within the epoch (or evaluation pass)

  std::int64_t rows() const { return tokens.size(0); }
  std::int64_t length() const { return tokens.size(1); }

  // The same batch with every tensor on `device` (n_scored and index unchanged).
  Batch to(const torch::Device& device, bool non_blocking = false) const;

  // Rows [begin, begin + count) as views (a data-parallel rank's share); n_scored counts them.
  Batch narrow_rows(std::int64_t begin, std::int64_t count) const;
};

enum class PadSide {
  kRight,  // real tokens first, padding after them (the usual layout for causal models)
  kLeft,   // padding first, real tokens last, so every row ends at the same column
};

struct PaddedBatch {
  torch::Tensor ids;      // int64 [B, T] the sequences, pad_id where mask is false
  torch::Tensor mask;     // bool [B, T] true (1) on real tokens, false (0) on padding
  torch::Tensor lengths;  // int64 [B] real tokens per row
};

// Pads variable-length sequences to T = the longest length. Empty sequences are allowed (a row
// of padding); if every sequence is empty the result has T = 0. Throws txl::Error when `seqs`
// itself is empty (there is no batch to build).
PaddedBatch pad_sequences(const std::vector<std::vector<std::int64_t>>& seqs, std::int64_t pad_id,
                          PadSide side = PadSide::kRight);

}  // namespace txl::data
