#pragma once
// The members of Transformer-XL's family that the contract tests run over.

#include <optional>
#include <string>
#include <vector>

#include "txl/config/config.h"
#include "txl/config/enums.h"
#include "txl/modules/position_scheme.h"

namespace txl::test {

// The position schemes that carry Transformer-XL's memory, as the registry lists them
// (modules/position_scheme.h). The model's and the decoder's contract tests (causality,
// recurrence equals one pass, padding, the stop-gradient, cached keys and values, decoding
// equals the forward) loop over this list: a new scheme meets them all.
inline const std::vector<config::AttnType>& memory_attn_types() {
  static const std::vector<config::AttnType> kTypes = [] {
    std::vector<config::AttnType> out;
    for (const auto* scheme : modules::memory_schemes()) {
      const auto type = config::parse_enum<config::AttnType>(scheme->name());
      if (type) out.push_back(*type);
    }
    return out;
  }();
  return kTypes;
}

// A member of the family: a position scheme that carries memory, and what the memory holds
// (Transformer-XL's cache, with cmem_len > 0 a compressive memory, Rae et al. 2020, with
// mem_tokens > 0 recurrent memory tokens, Bulatov et al. 2022).
struct MemoryMember {
  std::string name;
  config::AttnType attn_type;
  int cmem_len = 0;  // compressed rows (0 = Transformer-XL's memory alone)
  // The compression function (conv | mean | max); none = the configuration's own.
  std::optional<config::Compression> compress = std::nullopt;
  int mem_tokens = 0;  // recurrent memory tokens m (0 = none)
  int mem_len = -1;    // memory positions kept (-1 = the configuration's own)
  int knn_layer = 0;   // the layer with a kNN memory (0 = none): top 2 of 6 stored positions
  // Back-propagation through segments reaches the segment before: false where the state is a
  // kNN store alone, which takes no gradient (Wu et al. 2022).
  bool gradient_through_state = true;
  // Sets the member on a model configuration (groups of 2 positions compressed).
  void apply(config::ModelConfig& c) const {
    c.attn_type = attn_type;
    c.cmem_len = cmem_len;
    c.cmem_rate = 2;
    if (compress) c.cmem_compress = *compress;
    c.mem_tokens = mem_tokens;
    if (mem_len >= 0) c.mem_len = mem_len;
    c.knn_layer = knn_layer;
    c.knn_topk = 2;
    c.knn_size = 6;
  }
};

// Every scheme of memory_attn_types() with Transformer-XL's memory, compressive memory with a
// trained (conv) and a pooling (mean) compressor, and memory tokens alone (no memory positions)
// and beside Transformer-XL's memory: the evaluator's contract tests loop over it.
inline const std::vector<MemoryMember>& memory_members() {
  static const std::vector<MemoryMember> kMembers = [] {
    std::vector<MemoryMember> out;
    for (auto type : memory_attn_types()) out.push_back({config::to_string(type), type});
    out.push_back({"xl+compressive(conv)", config::AttnType::kXl, 4, config::Compression::kConv});
    out.push_back(
        {"rope+compressive(mean)", config::AttnType::kRope, 4, config::Compression::kMean});
    out.push_back(
        {"alibi+memory tokens", config::AttnType::kAlibi, 0, std::nullopt, 2, /*mem_len=*/0});
    out.push_back({"xl+memory tokens", config::AttnType::kXl, 0, std::nullopt, 2});
    out.push_back({"xl+knn", config::AttnType::kXl, 0, std::nullopt, 0, -1, 2});
    out.push_back(
        {"rope+knn, no memory", config::AttnType::kRope, 0, std::nullopt, 0, 0, 1, false});
    return out;
  }();
  return kMembers;
}

// Every scheme of memory_attn_types() with every memory mechanism: Transformer-XL's cache,
// compressive memory over it (groups of 2, 3 compressed rows; a trained convolution, mean or
// max pooling, in turn), memory tokens alone (mem_len 0) and memory tokens beside the cache, and
// a kNN memory in the last layer beside the cache and in the first without one.
// The model-level contract suite (tests/models/family_contract_test.cpp) runs every property over
// it: a new scheme or mechanism enters by joining this list and passing it.
inline const std::vector<MemoryMember>& contract_members() {
  static const std::vector<MemoryMember> kMembers = [] {
    std::vector<MemoryMember> out;
    const std::vector<config::Compression> compressions = {
        config::Compression::kConv, config::Compression::kMean, config::Compression::kMax};
    size_t next = 0;
    for (auto type : memory_attn_types()) {
      const std::string name = config::to_string(type);
      const config::Compression compress = compressions[next++ % compressions.size()];
      out.push_back({name, type});
      out.push_back(
          {name + "+compressive(" + config::to_string(compress) + ")", type, 3, compress});
      out.push_back({name + "+memory tokens", type, 0, std::nullopt, 2, /*mem_len=*/0});
      out.push_back({name + "+memory tokens+memory", type, 0, std::nullopt, 2});
      out.push_back({name + "+knn", type, 0, std::nullopt, 0, -1, 2});
      out.push_back({name + "+knn, no memory", type, 0, std::nullopt, 0, 0, 1, false});
    }
    return out;
  }();
  return kMembers;
}

}  // namespace txl::test
