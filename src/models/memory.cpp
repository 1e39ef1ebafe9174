#include "txl/models/memory.h"

#include <map>

#include "txl/util/error.h"

namespace txl::models {

torch::Tensor Memory::mask_or_ones() const {
  TXL_CHECK(!layers.empty(), "Memory::mask_or_ones: the memory holds no positions");
  if (key_mask.defined()) return key_mask;
  return torch::ones({rows(), length()},
                     torch::dtype(torch::kBool).device(layers.front().device()));  // [B, M]
}

Memory Memory::detached() const {
  Memory out;
  for (const auto& layer : layers) out.layers.push_back(layer.detach());
  out.key_mask = key_mask;
  out.compressed = compressed;  // always detached (the compressor trains by its own loss)
  out.compressed_mask = compressed_mask;
  if (tokens.defined()) out.tokens = tokens.detach();
  return out;
}

Memory Memory::narrow_rows(int64_t begin, int64_t count) const {
  Memory out;
  if (empty()) return out;
  TXL_CHECK(begin >= 0 && count >= 0 && begin + count <= rows(), "Memory::narrow_rows: rows [",
            begin, ", ", begin + count, ") outside the memory's ", rows(), " rows");
  for (const auto& t : layers) out.layers.push_back(t.narrow(0, begin, count));  // [count, M, d]
  if (key_mask.defined()) out.key_mask = key_mask.narrow(0, begin, count);       // [count, M]
  for (const auto& t : compressed) out.compressed.push_back(t.narrow(0, begin, count));
  if (compressed_mask.defined()) out.compressed_mask = compressed_mask.narrow(0, begin, count);
  if (tokens.defined()) out.tokens = tokens.narrow(0, begin, count);  // [count, m, d]
  return out;
}

Memory Memory::join_rows(const std::vector<Memory>& pieces) {
  Memory out;
  if (pieces.empty() || pieces.front().empty()) {
    for (const auto& p : pieces)
      TXL_CHECK(p.empty(), "Memory::join_rows: some pieces hold memory and others none");
    return out;
  }
  const auto& first = pieces.front();
  bool any_mask = false;
  for (const auto& p : pieces) {
    TXL_CHECK(p.layers.size() == first.layers.size() && p.length() == first.length() &&
                  p.compressed.size() == first.compressed.size() &&
                  p.compressed_length() == first.compressed_length() &&
                  p.tokens.defined() == first.tokens.defined(),
              "Memory::join_rows: pieces of ", p.layers.size(), " layers x ", p.length(), " + ",
              p.compressed_length(), " compressed positions and ", first.layers.size(), " x ",
              first.length(), " + ", first.compressed_length(), " cannot be joined");
    any_mask = any_mask || p.key_mask.defined();
  }
  // One tensor of every piece (`of` picks it), rows joined in order.
  auto joined = [&](const auto& of) {
    std::vector<torch::Tensor> rows;
    for (const auto& p : pieces) rows.push_back(of(p));
    return torch::cat(rows, 0);
  };
  for (size_t l = 0; l < first.layers.size(); ++l) {
    out.layers.push_back(joined([l](const Memory& p) { return p.layers[l]; }));  // [rows, M, d]
  }
  if (any_mask) out.key_mask = joined([](const Memory& p) { return p.mask_or_ones(); });
  for (size_t l = 0; l < first.compressed.size(); ++l) {
    out.compressed.push_back(joined([l](const Memory& p) { return p.compressed[l]; }));
  }
  if (!first.compressed.empty()) {
    out.compressed_mask = joined([](const Memory& p) { return p.compressed_mask; });  // [rows, N]
  }
  if (first.tokens.defined()) out.tokens = joined([](const Memory& p) { return p.tokens; });
  return out;
}

std::vector<std::pair<std::string, torch::Tensor>> Memory::to_tensors(
    const std::string& prefix) const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (size_t l = 0; l < layers.size(); ++l)
    out.emplace_back(prefix + "layer." + std::to_string(l), layers[l]);                 // [B, M, d]
  if (!empty() && key_mask.defined()) out.emplace_back(prefix + "key_mask", key_mask);  // [B, M]
  for (size_t l = 0; l < compressed.size(); ++l)
    out.emplace_back(prefix + "compressed." + std::to_string(l), compressed[l]);  // [B, N, d]
  if (!compressed.empty()) out.emplace_back(prefix + "compressed_mask", compressed_mask);
  if (tokens.defined()) out.emplace_back(prefix + "tokens", tokens);  // [B, m, d]
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

// The tensors of one family ("layer." or "compressed."), numbered 0..L-1 and of one floating
// shape [B, length, d] (`length` names it in messages), each on `device`; `mask` (may be
// undefined) bool [B, length].
std::vector<torch::Tensor> checked_layers(const std::map<int64_t, torch::Tensor>& by_layer,
                                          const torch::Tensor& mask, int64_t n_layer,
                                          int64_t d_model, const torch::Device& device,
                                          const std::string& origin, const std::string& what,
                                          const char* length) {
  TXL_CHECK(
      static_cast<int64_t>(by_layer.size()) == n_layer && by_layer.rbegin()->first == n_layer - 1,
      origin, ": the ", what, " has ", by_layer.size(), " layers (numbered up to ",
      by_layer.rbegin()->first, ") but the model has ", n_layer);
  const torch::Tensor& first = by_layer.begin()->second;
  std::vector<torch::Tensor> out;
  for (const auto& [l, t] : by_layer) {
    TXL_CHECK(t.dim() == 3 && t.size(2) == d_model && t.sizes() == first.sizes() &&
                  t.scalar_type() == first.scalar_type() && t.is_floating_point(),
              origin, ": ", what, " layer ", l, " is ", t.scalar_type(), " ", t.sizes(),
              "; expected one floating shape [B, ", length, ", ", d_model, "] for every layer");
    out.push_back(t.to(device));  // [B, length, d]
  }
  if (mask.defined()) {
    TXL_CHECK(mask.scalar_type() == torch::kBool && mask.dim() == 2 &&
                  mask.size(0) == first.size(0) && mask.size(1) == first.size(1),
              origin, ": the ", what, " key mask is ", mask.scalar_type(), " ", mask.sizes(),
              "; expected bool [", first.size(0), ", ", first.size(1), "]");
  }
  return out;
}

}  // namespace

Memory Memory::from_tensors(const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                            const std::string& prefix, int64_t n_layer, int64_t d_model,
                            const torch::Device& device, const std::string& origin) {
  std::map<int64_t, torch::Tensor> by_layer, by_compressed;
  torch::Tensor mask, compressed_mask, tokens;
  for (const auto& [name, t] : tensors) {
    if (name.rfind(prefix, 0) != 0) continue;
    if (name == prefix + "tokens") {
      tokens = t;
    } else if (name == prefix + "key_mask") {
      mask = t;
    } else if (name == prefix + "compressed_mask") {
      compressed_mask = t;
    } else if (const int64_t l = layer_index(name, prefix + "layer."); l >= 0) {
      by_layer[l] = t;
    } else if (const int64_t c = layer_index(name, prefix + "compressed."); c >= 0) {
      by_compressed[c] = t;
    } else {
      TXL_FAIL(origin, ": unexpected memory tensor '", name, "'");
    }
  }
  Memory out;
  if (tokens.defined()) {
    TXL_CHECK(tokens.dim() == 3 && tokens.size(2) == d_model && tokens.is_floating_point(), origin,
              ": the memory tokens are ", tokens.scalar_type(), " ", tokens.sizes(),
              "; expected a floating [B, m, ", d_model, "]");
    out.tokens = tokens.to(device);  // [B, m, d]
  }
  if (by_layer.empty()) {
    TXL_CHECK(!mask.defined() && by_compressed.empty() && !compressed_mask.defined(), origin,
              ": a memory key mask or compressed memory without memory layers");
    return out;
  }
  out.layers = checked_layers(by_layer, mask, n_layer, d_model, device, origin, "memory", "M");
  TXL_CHECK(!tokens.defined() || tokens.size(0) == out.rows(), origin, ": the memory tokens have ",
            tokens.size(0), " rows, the memory ", out.rows());
  if (mask.defined()) out.key_mask = mask.to(device);  // [B, M]
  TXL_CHECK(by_compressed.empty() == !compressed_mask.defined(), origin,
            ": a compressed memory needs both its layers and its mask");
  if (by_compressed.empty()) return out;
  out.compressed = checked_layers(by_compressed, compressed_mask, n_layer, d_model, device, origin,
                                  "compressed memory", "N");
  TXL_CHECK(out.compressed.front().size(0) == out.rows(), origin, ": the compressed memory has ",
            out.compressed.front().size(0), " rows, the memory ", out.rows());
  out.compressed_mask = compressed_mask.to(device);  // [B, N]
  return out;
}

}  // namespace txl::models
