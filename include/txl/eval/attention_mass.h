#pragma once
// Where attention looks: the share of attention weight each layer puts at each relative distance
// (query position minus key position, memory included), over an evaluation's scored queries
// (issue 29, item 6). Together with where memory helps (memory_gain.h) it shows whether a model
// reads its memory at all: a layer whose mass stays within the last few tokens gains nothing
// from a longer memory.

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "txl/data/dataset.h"
#include "txl/eval/settings.h"
#include "txl/models/transformer_lm.h"

namespace txl::eval {

struct AttentionMass {
  // Distance groups: group g holds distances [edges[g], edges[g + 1]), the last one [edges.back(),
  // infinity). edges[0] = 0, increasing.
  std::vector<std::int64_t> edges;
  // double [L, G]: per layer, the attention weight (averaged over heads) at each distance group,
  // summed over the scored queries and divided by their number: each row sums to 1.
  torch::Tensor mass;
  torch::Tensor memory;      // double [L]: the share on keys of the memory (before the segment)
  torch::Tensor future;      // double [L]: the share on keys after the query (0 for a causal model)
  std::int64_t queries = 0;  // scored queries averaged over
  std::int64_t mem_len = 0;  // the memory length the evaluation used
};

// The default groups: 0, 1, 2-3, 4-7, ... doubling up to 1024, then 1024+.
std::vector<std::int64_t> default_distance_edges();

// Runs eval::evaluate as `settings` describe (memory or segments mode, on the first
// settings.max_tokens targets of `text`, in this process alone: settings.group is not used),
// observes every layer's attention weights (Extras::attention) and groups them by distance.
// Throws txl::Error for sliding mode, a model with memory tokens or compressed memory (their keys
// are not at a distance), bad edges, or what evaluate refuses.
AttentionMass attention_by_distance(models::TransformerLM& model, const data::EncodedSplit& text,
                                    const Settings& settings,
                                    const std::vector<std::int64_t>& edges);

// A markdown table: one row per layer, one column per distance group, then the memory's share.
std::string attention_mass_markdown(const AttentionMass& mass);

// {edges, mass: [[share per group] per layer], memory: [share per layer], queries, mem_len} as
// JSON text (txl-eval --json, the ablation report's results.json).
std::string attention_mass_json(const AttentionMass& mass);

// The name of group g ("0", "2-3", "1024+").
std::string distance_edge_name(const std::vector<std::int64_t>& edges, size_t g);

}  // namespace txl::eval
