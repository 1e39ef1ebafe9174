#include "txl/models/memory.h"

#include <map>

#include "txl/models/memory_mechanism.h"
#include "txl/util/error.h"

namespace txl::models {

namespace {

// The registry's part `index` of `memory` as (layers, mask), or (null, null) where the memory
// has none: the first, Transformer-XL's, is the memory of positions (Memory::layers,
// Memory::key_mask), the others entries of Memory::parts.
std::pair<const std::vector<torch::Tensor>*, const torch::Tensor*> find_part(const Memory& memory,
                                                                             size_t index) {
  if (index == 0) return {&memory.layers, &memory.key_mask};
  const auto found = memory.parts.find(memory_mechanisms()[index]->layout().name);
  if (found == memory.parts.end()) return {nullptr, nullptr};
  return {&found->second.layers, &found->second.mask};
}

// Stores `part` as the registry's part `index` of `memory` (a part without tensors: none).
void store_part(Memory& memory, size_t index, MemoryPart part) {
  if (index == 0) {
    memory.layers = std::move(part.layers);
    memory.key_mask = part.mask;
  } else if (!part.layers.empty()) {
    memory.parts[memory_mechanisms()[index]->layout().name] = std::move(part);
  }
}

}  // namespace

void check_part(const MemoryPart& part, const PartLayout& layout, const PartShape& shape,
                const torch::Device& device) {
  TXL_CHECK(part.layers.size() == shape.tensors, "model memory: the ", layout.what, " is ",
            part.layers.size(), " tensors; expected ", shape.tensors);
  const int64_t n = part.length();
  const bool length_ok = shape.length >= 0 ? n == shape.length : n <= shape.max_length;
  const std::string n_text =
      shape.length >= 0 ? std::to_string(shape.length) : "<= " + std::to_string(shape.max_length);
  for (size_t l = 0; l < part.layers.size(); ++l) {
    const auto& t = part.layers[l];
    TXL_CHECK(t.defined() && t.dim() == 3 && t.size(0) == shape.batch && length_ok &&
                  t.size(1) == n && t.size(2) == shape.width && t.device() == device &&
                  (shape.grad || !t.requires_grad()),
              "model memory: the ", layout.what, "'s tensor ", l, " must be [B = ", shape.batch,
              ", ", layout.length, " = ", n_text, ", d = ", shape.width, "] on ", device,
              shape.grad ? "" : " without gradient", ", got ",
              t.defined() ? t.sizes() : torch::IntArrayRef{},
              t.defined() && t.requires_grad() ? " with gradient" : "");
  }
  if (!layout.mask_required && !part.mask.defined()) return;
  const auto& mask = part.mask;
  TXL_CHECK(mask.defined() && mask.dim() == 2 && mask.size(0) == shape.batch && mask.size(1) == n &&
                mask.scalar_type() == torch::kBool,
            "model memory: the ", layout.what, "'s mask must be bool [B = ", shape.batch, ", ",
            layout.length, " = ", n, "]");
}

int64_t Memory::rows() const {
  if (!layers.empty()) return layers.front().size(0);
  for (const auto& [name, part] : parts) {
    if (!part.layers.empty()) return part.rows();
  }
  return 0;
}

const MemoryPart& Memory::part(const std::string& name) const {
  static const MemoryPart kNone;
  const auto found = parts.find(name);
  return found == parts.end() ? kNone : found->second;
}

torch::Tensor Memory::mask_or_ones() const {
  TXL_CHECK(!layers.empty(), "Memory::mask_or_ones: the memory holds no positions");
  if (key_mask.defined()) return key_mask;
  return torch::ones({rows(), length()},
                     torch::dtype(torch::kBool).device(layers.front().device()));  // [B, M]
}

Memory Memory::detached() const {
  Memory out = *this;
  out.kv.clear();
  for (auto& t : out.layers) t = t.detach();
  for (auto& [name, part] : out.parts) {
    for (auto& t : part.layers) t = t.detach();
  }
  return out;
}

Memory Memory::narrow_rows(int64_t begin, int64_t count) const {
  Memory out;
  if (empty()) return out;
  TXL_CHECK(begin >= 0 && count >= 0 && begin + count <= rows(), "Memory::narrow_rows: rows [",
            begin, ", ", begin + count, ") outside the memory's ", rows(), " rows");
  out = *this;
  out.kv.clear();
  const auto narrow = [&](std::vector<torch::Tensor>& tensors, torch::Tensor& mask) {
    for (auto& t : tensors) t = t.narrow(0, begin, count);    // [count, n, d]
    if (mask.defined()) mask = mask.narrow(0, begin, count);  // [count, n]
  };
  narrow(out.layers, out.key_mask);
  for (auto& [name, part] : out.parts) narrow(part.layers, part.mask);
  return out;
}

Memory Memory::index_rows(const torch::Tensor& index) const {
  Memory out;
  if (empty()) return out;
  out = *this;
  out.kv.clear();
  const auto pick = [&](std::vector<torch::Tensor>& tensors, torch::Tensor& mask) {
    for (auto& t : tensors) t = t.index_select(0, index);    // [B', n, d]
    if (mask.defined()) mask = mask.index_select(0, index);  // [B', n]
  };
  pick(out.layers, out.key_mask);
  for (auto& [name, part] : out.parts) pick(part.layers, part.mask);
  return out;
}

namespace {

// The pieces' part `index` of the registry, as (layers, mask) of each piece (no tensors and no
// mask where a piece has none).
std::vector<std::pair<const std::vector<torch::Tensor>*, const torch::Tensor*>> piece_parts(
    const std::vector<Memory>& pieces, size_t index) {
  static const std::vector<torch::Tensor> kNoLayers;
  static const torch::Tensor kNoMask;
  std::vector<std::pair<const std::vector<torch::Tensor>*, const torch::Tensor*>> out;
  for (const auto& p : pieces) {
    const auto [layers, mask] = find_part(p, index);
    out.emplace_back(layers != nullptr ? layers : &kNoLayers, mask != nullptr ? mask : &kNoMask);
  }
  return out;
}

// Joins one part of every piece; `layers` and `mask` receive it. The pieces must agree on the
// number of tensors and their length.
void join_part(const std::vector<
                   std::pair<const std::vector<torch::Tensor>*, const torch::Tensor*>>& of_pieces,
               const PartLayout& layout, std::vector<torch::Tensor>& layers, torch::Tensor& mask) {
  const auto& first = *of_pieces.front().first;
  const auto length = [](const std::vector<torch::Tensor>& t) {
    return t.empty() ? int64_t{0} : t.front().size(1);
  };
  bool any_mask = false;
  for (const auto& [tensors, piece_mask] : of_pieces) {
    TXL_CHECK(tensors->size() == first.size() && length(*tensors) == length(first),
              "Memory::join_rows: pieces whose ", layout.what, " is ", tensors->size(),
              " layers x ", length(*tensors), " and ", first.size(), " x ", length(first),
              " cannot be joined");
    any_mask = any_mask || piece_mask->defined();
  }
  if (first.empty()) return;
  for (size_t l = 0; l < first.size(); ++l) {
    std::vector<torch::Tensor> rows;
    for (const auto& piece : of_pieces) rows.push_back((*piece.first)[l]);
    layers.push_back(torch::cat(rows, 0));  // [rows, n, d]
  }
  if (!any_mask) return;
  for (const auto& piece : of_pieces) {
    TXL_CHECK(piece.second->defined() || !layout.mask_required, "Memory::join_rows: a piece's ",
              layout.what, " has no mask");
  }
  std::vector<torch::Tensor> masks;  // a piece without a mask: every row real
  for (const auto& [tensors, piece_mask] : of_pieces) {
    const auto& t = tensors->front();
    masks.push_back(
        piece_mask->defined()
            ? *piece_mask
            : torch::ones({t.size(0), t.size(1)}, torch::dtype(torch::kBool).device(t.device())));
  }
  mask = torch::cat(masks, 0);  // [rows, n]
}

}  // namespace

Memory Memory::join_rows(const std::vector<Memory>& pieces) {
  Memory out;
  if (pieces.empty() || pieces.front().empty()) {
    for (const auto& p : pieces)
      TXL_CHECK(p.empty(), "Memory::join_rows: some pieces hold memory and others none");
    return out;
  }
  const auto& all = memory_mechanisms();
  for (const auto& p : pieces) {
    for (const auto& [name, part] : p.parts) {
      TXL_CHECK(pieces.front().has(name), "Memory::join_rows: pieces with and without the part '",
                name, "' cannot be joined");
    }
  }
  for (size_t i = 0; i < all.size(); ++i) {
    MemoryPart part;
    join_part(piece_parts(pieces, i), all[i]->layout(), part.layers, part.mask);
    store_part(out, i, std::move(part));
  }
  return out;
}

std::vector<std::pair<std::string, torch::Tensor>> Memory::to_tensors(
    const std::string& prefix) const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  const auto& all = memory_mechanisms();
  for (size_t i = 0; i < all.size(); ++i) {
    const PartLayout& layout = all[i]->layout();
    const auto [tensors, mask] = find_part(*this, i);
    if (tensors == nullptr || tensors->empty()) continue;
    for (size_t l = 0; l < tensors->size(); ++l) {
      out.emplace_back(prefix + layout.name + (layout.per_layer ? "." + std::to_string(l) : ""),
                       (*tensors)[l]);  // [B, n, d]
    }
    if (mask->defined() && !layout.mask_name.empty()) {
      out.emplace_back(prefix + layout.mask_name, *mask);  // [B, n]
    }
  }
  return out;
}

namespace {

// The layer index of "<head><l>", or -1 for any other name.
int64_t layer_index(const std::string& name, const std::string& head) {
  if (name.rfind(head, 0) != 0) return -1;
  const std::string digits = name.substr(head.size());
  if (digits.empty() || digits.size() > 6 ||
      digits.find_first_not_of("0123456789") != std::string::npos)
    return -1;
  return std::stoll(digits);
}

// One part as found under a prefix: its tensors by layer (by -1 for a part of the whole model)
// and its mask.
struct Found {
  std::map<int64_t, torch::Tensor> by_layer;
  torch::Tensor mask;
};

// The part's tensors, numbered 0..L-1 (or the one tensor of the whole model) and of one floating
// shape [B, n, d], each on `device`, with the mask bool [B, n] checked.
MemoryPart checked_part(const Found& found, const PartLayout& layout, int64_t n_layer,
                        int64_t d_model, const torch::Device& device, const std::string& origin) {
  const auto& by_layer = found.by_layer;
  const std::string& what = layout.what;
  if (layout.per_layer) {
    TXL_CHECK(
        static_cast<int64_t>(by_layer.size()) == n_layer && by_layer.rbegin()->first == n_layer - 1,
        origin, ": the ", what, " has ", by_layer.size(), " layers (numbered up to ",
        by_layer.rbegin()->first, ") but the model has ", n_layer);
  }
  const torch::Tensor& first = by_layer.begin()->second;
  MemoryPart out;
  for (const auto& [l, t] : by_layer) {
    TXL_CHECK(
        t.dim() == 3 && t.size(2) == d_model && t.sizes() == first.sizes() &&
            t.scalar_type() == first.scalar_type() && t.is_floating_point(),
        origin, ": ",
        layout.per_layer ? what + " layer " + std::to_string(l) + " is " : "the " + what + " are ",
        t.scalar_type(), " ", t.sizes(), "; expected one floating shape [B, ", layout.length, ", ",
        d_model, "]", layout.per_layer ? " for every layer" : "");
    out.layers.push_back(t.to(device));  // [B, n, d]
  }
  const auto& mask = found.mask;
  TXL_CHECK(mask.defined() || !layout.mask_required, origin, ": a ", what,
            " needs both its layers and its mask");
  if (mask.defined()) {
    TXL_CHECK(mask.scalar_type() == torch::kBool && mask.dim() == 2 &&
                  mask.size(0) == first.size(0) && mask.size(1) == first.size(1),
              origin, ": the ", what, " key mask is ", mask.scalar_type(), " ", mask.sizes(),
              "; expected bool [", first.size(0), ", ", first.size(1), "]");
    out.mask = mask.to(device);  // [B, n]
  }
  return out;
}

// Which part, and which of its tensors, `name` (after the prefix) is: (index in the registry,
// layer or -1 for a part's single tensor, -2 for its mask), or (-1, 0) for none.
std::pair<int, int64_t> part_of(const std::string& name) {
  const auto& all = memory_mechanisms();
  for (size_t i = 0; i < all.size(); ++i) {
    const PartLayout& layout = all[i]->layout();
    if (!layout.mask_name.empty() && name == layout.mask_name) return {static_cast<int>(i), -2};
    if (!layout.per_layer && name == layout.name) return {static_cast<int>(i), -1};
    if (layout.per_layer) {
      if (const int64_t l = layer_index(name, layout.name + "."); l >= 0)
        return {static_cast<int>(i), l};
    }
  }
  return {-1, 0};
}

}  // namespace

Memory Memory::from_tensors(const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                            const std::string& prefix, int64_t n_layer, int64_t d_model,
                            const torch::Device& device, const std::string& origin) {
  const auto& all = memory_mechanisms();
  std::vector<Found> found(all.size());
  for (const auto& [name, t] : tensors) {
    if (name.rfind(prefix, 0) != 0) continue;
    const auto [index, which] = part_of(name.substr(prefix.size()));
    TXL_CHECK(index >= 0, origin, ": unexpected memory tensor '", name, "'");
    if (which == -2) {
      found[index].mask = t;
    } else {
      found[index].by_layer[which] = t;
    }
  }
  Memory out;
  for (size_t i = 0; i < all.size(); ++i) {
    const PartLayout& layout = all[i]->layout();
    if (found[i].by_layer.empty()) {
      TXL_CHECK(!found[i].mask.defined(), origin, ": a ", layout.what,
                " needs both its layers and its mask");
      continue;
    }
    TXL_CHECK(!layout.needs_positions || !out.layers.empty(), origin, ": a ", layout.what,
              " without memory layers");
    MemoryPart part = checked_part(found[i], layout, n_layer, d_model, device, origin);
    TXL_CHECK(out.empty() || part.rows() == out.rows(), origin, ": the ", layout.what, " has ",
              part.rows(), " rows, the memory ", out.rows());
    store_part(out, i, std::move(part));
  }
  return out;
}

}  // namespace txl::models
