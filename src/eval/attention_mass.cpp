#include "txl/eval/attention_mass.h"

#include <fmt/core.h>

#include "txl/eval/evaluator.h"
#include "txl/util/error.h"
#include "txl/util/json.h"

namespace txl::eval {

std::vector<std::int64_t> default_distance_edges() {
  std::vector<std::int64_t> edges = {0, 1};
  while (edges.back() < 1024) edges.push_back(edges.back() * 2);
  return edges;
}

std::string distance_edge_name(const std::vector<std::int64_t>& edges, size_t g) {
  if (g + 1 == edges.size()) return std::to_string(edges[g]) + "+";
  if (edges[g + 1] == edges[g] + 1) return std::to_string(edges[g]);
  return std::to_string(edges[g]) + "-" + std::to_string(edges[g + 1] - 1);
}

namespace {

void check_request(const models::TransformerLM& model, const std::vector<std::int64_t>& edges) {
  for (const auto* mechanism : model->memory_mechanisms()) {
    TXL_CHECK(mechanism->traits().keys_at_distance,
              "attention by distance needs keys at a distance: not with ", mechanism->layout().what,
              " (", mechanism->layout().setting, " must be 0)");
  }
  TXL_CHECK(!edges.empty() && edges.front() == 0, "distance groups must start at 0");
  for (size_t g = 1; g < edges.size(); ++g)
    TXL_CHECK(edges[g] > edges[g - 1], "distance group edges must increase");
}

// Adds one batch's weights to the totals: weights [B, H, T, K] of one layer and the scored
// queries bool [B, T]. The keys before the segment's T are the memory's M = K - T (memory tokens
// and compressed rows are refused), so key k of query t is at distance M + t - k.
void add_layer(const torch::Tensor& weights, const torch::Tensor& scored,
               const torch::Tensor& edges, torch::Tensor mass, torch::Tensor memory,
               torch::Tensor future) {
  const std::int64_t t_len = weights.size(2), k_len = weights.size(3), m_len = k_len - t_len;
  const auto w = weights.to(torch::kDouble).mean(1).to(torch::kCPU) *
                 scored.to(torch::kCPU, torch::kDouble).unsqueeze(-1);  // [B, T, K]
  const auto distance = torch::arange(t_len, torch::kLong).unsqueeze(1) + m_len -
                        torch::arange(k_len, torch::kLong).unsqueeze(0);  // [T, K]
  const auto per_key = w.sum(0);                                          // [T, K]
  const auto ahead = distance.ge(0);                                      // [T, K]
  const auto group = torch::bucketize(distance.clamp_min(0), edges, /*out_int32=*/false,
                                      /*right=*/true) -
                     1;  // [T, K]
  mass.index_add_(0, group.masked_select(ahead), per_key.masked_select(ahead));
  future.add_(per_key.masked_select(ahead.logical_not()).sum());
  memory.add_(per_key.narrow(1, 0, std::min(m_len, k_len)).sum());
}

}  // namespace

AttentionMass attention_by_distance(models::TransformerLM& model, const data::EncodedSplit& text,
                                    const Settings& settings,
                                    const std::vector<std::int64_t>& edges) {
  check_request(model, edges);
  const auto layers = static_cast<std::int64_t>(model->config().n_layer);
  const auto edge_tensor = torch::tensor(edges, torch::kLong);  // [G]
  AttentionMass out;
  out.edges = edges;
  out.mass = torch::zeros({layers, static_cast<std::int64_t>(edges.size())}, torch::kDouble);
  out.memory = torch::zeros({layers}, torch::kDouble);
  out.future = torch::zeros({layers}, torch::kDouble);
  // The evaluation's own segments, memory and autocast; its losses are not needed here.
  Settings alone = settings;
  alone.group = nullptr;
  Extras extras;
  extras.attention = [&](const std::vector<torch::Tensor>& weights, const BatchScore& score) {
    TXL_CHECK(static_cast<std::int64_t>(weights.size()) == layers, "the model gave ",
              weights.size(), " layers' attention weights for ", layers, " layers");
    for (std::int64_t l = 0; l < layers; ++l)
      add_layer(weights[static_cast<size_t>(l)], score.target_mask, edge_tensor, out.mass[l],
                out.memory[l], out.future[l]);
    out.queries += score.count;
    // The keys before the segment: the memory (zero memory's too, eval.mem_init).
    out.mem_len = std::max(out.mem_len, weights.front().size(3) - weights.front().size(2));
  };
  evaluate(model, text, alone, extras);
  if (out.queries > 0) {
    const double n = static_cast<double>(out.queries);
    out.mass.div_(n);
    out.memory.div_(n);
    out.future.div_(n);
  }
  return out;
}

std::string attention_mass_json(const AttentionMass& mass) {
  json::OrderedJson j;
  j["edges"] = mass.edges;
  j["mass"] = json::OrderedJson::array();
  j["memory"] = json::OrderedJson::array();
  for (std::int64_t l = 0; l < mass.mass.size(0); ++l) {
    json::OrderedJson row = json::OrderedJson::array();
    for (std::int64_t g = 0; g < mass.mass.size(1); ++g)
      row.push_back(mass.mass[l][g].item<double>());
    j["mass"].push_back(row);
    j["memory"].push_back(mass.memory[l].item<double>());
  }
  j["queries"] = mass.queries;
  j["mem_len"] = mass.mem_len;
  return j.dump();
}

std::string attention_mass_markdown(const AttentionMass& mass) {
  std::string out = fmt::format(
      "Share of attention weight by distance to the query (averaged over heads and {} scored "
      "queries; memory of {} tokens)\n\n| layer |",
      mass.queries, mass.mem_len);
  std::string rule = "| --- |";
  for (size_t g = 0; g < mass.edges.size(); ++g) {
    out += " " + distance_edge_name(mass.edges, g) + " |";
    rule += " ---: |";
  }
  out += " in memory |\n" + rule + " ---: |\n";
  for (std::int64_t l = 0; l < mass.mass.size(0); ++l) {
    out += fmt::format("| {} |", l + 1);
    for (std::int64_t g = 0; g < mass.mass.size(1); ++g)
      out += fmt::format(" {:.3f} |", mass.mass[l][g].item<double>());
    out += fmt::format(" {:.3f} |\n", mass.memory[l].item<double>());
  }
  return out;
}

}  // namespace txl::eval
