#pragma once
// The recurrent state of paper 3.2 (docs/model.md section 3), owned by the caller: the model takes
// it and returns the next one. It is made of named parts, one per memory mechanism
// (models/memory_mechanism.h): Transformer-XL's memory of positions, and the parts of the
// mechanisms a model adds (a compressive memory, memory tokens). Its row operations
// (gradient-accumulation chunks and data-parallel ranks hold consecutive rows of one batch),
// detaching and named-tensor form (what checkpoints carry) are written once over the parts.
//
// Legend: B batch rows, M memory length, n a part's length, d model width, L layers, H heads,
// D head size.

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace txl::models {

// One mechanism's part of the memory: rows of every layer (or of the whole model) and which are
// real.
struct MemoryPart {
  // L tensors [B, n, d], one per layer; a part of the whole model (PartLayout::per_layer false)
  // holds one. Detached from the graph unless the caller back-propagates through segments.
  std::vector<torch::Tensor> layers;
  // bool [B, n], true = a real row; undefined = all real.
  torch::Tensor mask;

  int64_t length() const { return layers.empty() ? 0 : layers.front().size(1); }
  int64_t rows() const { return layers.empty() ? 0 : layers.front().size(0); }
};

// How a part is named in a checkpoint and checked when it is read back: its mechanism's
// (MemoryMechanism::layout).
struct PartLayout {
  std::string name;              // the tensors' stem: "<prefix><name>.<l>", or "<prefix><name>"
  bool per_layer = true;         // one tensor per layer (else one for the model)
  std::string mask_name;         // "<prefix><mask_name>" bool [B, n]; empty = the part has no mask
  bool mask_required = false;    // a stored part always has its mask
  bool needs_positions = false;  // only beside the memory of positions (Memory::layers)
  std::string what = "memory";   // the part in messages ("compressed memory")
  std::string length = "M";      // its length's letter in messages
  std::string setting;           // the model setting that gives a model the part
};

// What a forward is given as a mechanism's part must be (MechanismPart::check): `tensors`
// tensors [batch, n, width] on `device`, n = `length` (or n <= `max_length` when length is -1),
// without gradient unless `grad`; its mask, where the layout requires one or the part has one,
// bool [batch, n].
struct PartShape {
  size_t tensors = 1;
  int64_t batch = 0;
  int64_t length = -1;
  int64_t max_length = -1;
  int64_t width = 0;
  bool grad = false;
};

// Throws txl::Error naming the part (its layout's words and letters) when `part` is not `shape`.
void check_part(const MemoryPart& part, const PartLayout& layout, const PartShape& shape,
                const torch::Device& device);

struct Memory {
  // Transformer-XL's memory of positions (the part of models/memory/xl_cache.cpp, named "layer"
  // in checkpoints): L tensors [B, M, d], the input of each layer (the embedding output for
  // layer 1) at the M most recent positions, detached from the graph. Empty = none (M = 0).
  std::vector<torch::Tensor> layers;
  // bool [B, M], true = a real token; padding that moved into memory stays invisible.
  // Undefined with non-empty layers = all real.
  torch::Tensor key_mask;
  // With Lookback::cache_kv: L tensors [2, H, B, M, D], each layer's keys and values of the same
  // M positions, so that the next segment does not project them again. Empty = not cached.
  // Never saved: evaluation rebuilds it.
  std::vector<torch::Tensor> kv;
  // The other mechanisms' parts by their layout's name (compressive memory's "compressed",
  // memory tokens' "tokens"). A part that is absent is empty.
  std::map<std::string, MemoryPart> parts;

  // No state at all: no memory positions and no part.
  bool empty() const { return layers.empty() && parts.empty(); }
  int64_t length() const { return layers.empty() ? 0 : layers.front().size(1); }
  int64_t rows() const;

  // The part `name`, or an empty one when the memory has none.
  const MemoryPart& part(const std::string& name) const;
  bool has(const std::string& name) const { return parts.count(name) > 0; }

  // bool [B, M]: key_mask, or all true when undefined. Requires memory positions.
  torch::Tensor mask_or_ones() const;

  // The same memory cut from the graph (every part detached, kv dropped): where the gradient of
  // back-propagation through segments stops.
  Memory detached() const;

  // Rows [begin, begin + count) (views; kv dropped). An empty memory stays empty.
  Memory narrow_rows(int64_t begin, int64_t count) const;
  // The rows `index` (int64 [B'], on the memory's device) picks, in its order (copies; kv
  // dropped). An empty memory stays empty.
  Memory index_rows(const torch::Tensor& index) const;

  // Pieces of consecutive rows joined in order (chunks, then ranks). Empty pieces must all be
  // empty; a part's mask is kept when any piece has one (the others' rows count as real).
  // Throws txl::Error on mismatched pieces.
  static Memory join_rows(const std::vector<Memory>& pieces);

  // Named tensors for a checkpoint, part by part in the registry's order: the memory of
  // positions as "<prefix>layer.<l>" [B, M, d] and, when defined, "<prefix>key_mask" bool
  // [B, M]; a compressed memory as "<prefix>compressed.<l>" and "<prefix>compressed_mask";
  // memory tokens as "<prefix>tokens" [B, m, d]. Nothing for an empty memory.
  std::vector<std::pair<std::string, torch::Tensor>> to_tensors(const std::string& prefix) const;

  // The memory stored under `prefix` among `tensors` (empty when there is none), on `device`.
  // Checks each part against its layout: layers numbered 0..L-1 without gaps, one floating shape
  // [B, n, d] and dtype, a bool [B, n] mask, every part of the same B; `n_layer` and `d_model`
  // must match the model. Throws txl::Error naming `origin` otherwise.
  static Memory from_tensors(const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                             const std::string& prefix, int64_t n_layer, int64_t d_model,
                             const torch::Device& device, const std::string& origin);
};

}  // namespace txl::models
