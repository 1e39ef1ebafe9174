#pragma once
// The recurrent state of paper 3.2 (docs/model.md section 3), owned by the caller: the model takes
// it and returns the next one. It also owns its row operations (gradient-accumulation chunks and
// data-parallel ranks hold consecutive rows of one batch) and its named-tensor form, in which
// checkpoints carry it.
//
// Legend: B batch rows, M memory length, N compressed slots, d model width, L layers, H heads,
// D head size.

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace txl::models {

struct Memory {
  // L tensors [B, M, d]: the input of each layer (the embedding output for layer 1) at the M
  // most recent positions, detached from the graph. Empty = no memory (M = 0).
  std::vector<torch::Tensor> layers;
  // bool [B, M], true = a real token; padding that moved into memory stays invisible.
  // Undefined with non-empty layers = all real.
  torch::Tensor key_mask;
  // With Lookback::cache_kv: L tensors [2, H, B, M, D], each layer's keys and values of the same
  // M positions, so that the next segment does not project them again. Empty = not cached.
  // Never saved: evaluation rebuilds it.
  std::vector<torch::Tensor> kv;
  // Compressive memory (model.cmem_len): L tensors [B, N, d], the compressions of positions that
  // left `layers`, oldest first, detached; attention reads them before the memory. Empty = none.
  std::vector<torch::Tensor> compressed;
  // bool [B, N], true = a slot made from at least one real token; defined with `compressed`.
  torch::Tensor compressed_mask;
  // Recurrent memory tokens (model.mem_tokens = m): [B, m, d], what the last layer made of the
  // tokens written after the previous segment; the next segment reads them. Detached unless the
  // caller back-propagates through segments. Undefined = none yet (the model's own start).
  torch::Tensor tokens;

  // No state at all: no memory positions and no memory tokens.
  bool empty() const { return layers.empty() && !tokens.defined(); }
  int64_t length() const { return layers.empty() ? 0 : layers.front().size(1); }
  int64_t rows() const {
    return !layers.empty() ? layers.front().size(0) : tokens.defined() ? tokens.size(0) : 0;
  }
  int64_t compressed_length() const { return compressed.empty() ? 0 : compressed.front().size(1); }

  // bool [B, M]: key_mask, or all true when undefined. Requires memory positions.
  torch::Tensor mask_or_ones() const;

  // The same memory cut from the graph (layers detached, kv dropped): where the gradient of
  // back-propagation through segments stops.
  Memory detached() const;

  // Rows [begin, begin + count) (views; kv dropped). An empty memory stays empty.
  Memory narrow_rows(int64_t begin, int64_t count) const;

  // Pieces of consecutive rows joined in order (chunks, then ranks). Empty pieces must all be
  // empty; a key mask is kept when any piece has one. Throws txl::Error on mismatched pieces.
  static Memory join_rows(const std::vector<Memory>& pieces);

  // Named tensors for a checkpoint: "<prefix>layer.<l>" [B, M, d] and, when defined,
  // "<prefix>key_mask" bool [B, M]; with a compressed memory "<prefix>compressed.<l>" [B, N, d]
  // and "<prefix>compressed_mask" bool [B, N]; memory tokens as "<prefix>tokens" [B, m, d].
  // Nothing for an empty memory.
  std::vector<std::pair<std::string, torch::Tensor>> to_tensors(const std::string& prefix) const;

  // The memory stored under `prefix` among `tensors` (empty when there is none), on `device`.
  // Checks that layers are numbered 0..L-1 without gaps, share one shape [B, M, d] and dtype,
  // and that the key mask is bool [B, M] (the compressed memory likewise, [B, N, d]; memory
  // tokens [B, m, d]); `n_layer` and `d_model` must match the model. Throws txl::Error naming
  // `origin` otherwise.
  static Memory from_tensors(const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                             const std::string& prefix, int64_t n_layer, int64_t d_model,
                             const torch::Device& device, const std::string& origin);
};

}  // namespace txl::models
