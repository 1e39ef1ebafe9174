// Where memory helps, for an ablation: the pairs (no memory, memory), the inputs of
// eval::memory_gain from the corpus and the headline settings, and the report's section.
#include "txl/experiment/memory_help.h"

#include <fmt/core.h>

#include <algorithm>
#include <optional>

#include "report_parts.h"
#include "txl/data/dataset.h"
#include "txl/eval/evaluator.h"
#include "txl/util/error.h"
#include "txl/util/json.h"
#include "txl/util/log.h"
#include "txl/util/record.h"

namespace txl::experiment {

namespace {

const config::ExperimentConfig* variant_config(const config::AblationConfig& ablation,
                                               const std::string& name) {
  for (const auto& [n, cfg] : ablation.variants)
    if (n == name) return &cfg;
  return nullptr;
}

// The headline records of `variant` on `split` (one per seed).
std::vector<const ResultRecord*> headline(const std::vector<ResultRecord>& records,
                                          const std::string& variant, const std::string& split) {
  std::vector<const ResultRecord*> out;
  for (const auto& r : records)
    if (r.variant == variant && r.split == split && is_headline(r)) out.push_back(&r);
  return out;
}

// The per-token losses of `picked`, averaged over seeds; nullopt when one lacks them.
std::optional<torch::Tensor> mean_losses(const std::vector<const ResultRecord*>& picked) {
  if (picked.empty()) return std::nullopt;
  torch::Tensor sum;
  for (const ResultRecord* r : picked) {
    if (!r->token_losses.defined() || r->token_losses.dim() != 1) return std::nullopt;
    auto l = r->token_losses.to(torch::kDouble);  // [T]
    if (sum.defined() && l.size(0) != sum.size(0)) return std::nullopt;
    sum = sum.defined() ? sum + l : l;
  }
  return sum / static_cast<double>(picked.size());
}

// The (a, b) pairs: same attention, a trained without memory, b with it; relative positions
// only (absolute ones carry no memory).
std::vector<std::pair<std::string, std::string>> memory_pairs(
    const std::vector<ResultRecord>& records) {
  std::vector<const ResultRecord*> firsts;
  for (const auto& r : records) {
    if (!r.sweep && std::none_of(firsts.begin(), firsts.end(),
                                 [&](const ResultRecord* f) { return f->variant == r.variant; }))
      firsts.push_back(&r);
  }
  std::vector<std::pair<std::string, std::string>> out;
  for (const ResultRecord* a : firsts) {
    if (a->train_mem_len != 0 || config::uses_absolute_positions(a->attn_type)) continue;
    for (const ResultRecord* b : firsts) {
      if (b->train_mem_len > 0 && b->attn_type == a->attn_type &&
          b->train_tgt_len == a->train_tgt_len)
        out.emplace_back(a->variant, b->variant);
    }
  }
  return out;
}

// eval::memory_gain of one pair on one split; nullopt when its losses are missing or differ in
// length.
std::optional<MemoryHelp> one_pair(const config::ExperimentConfig& b_config,
                                   const data::Dataset& dataset, const std::string& split,
                                   const std::string& a, const std::string& b,
                                   const std::vector<ResultRecord>& records,
                                   const AnalysisOptions& options) {
  const auto picked_b = headline(records, b, split);
  const auto loss_a = mean_losses(headline(records, a, split));
  const auto loss_b = mean_losses(picked_b);
  if (!loss_a || !loss_b || loss_a->size(0) != loss_b->size(0)) return std::nullopt;
  config::ExperimentConfig c = b_config;
  c.eval.mode = eval::Mode::kMemory;
  c.eval.mem_len = picked_b.front()->mem_len;
  const eval::Settings settings = eval::resolve_settings(c);
  const data::EncodedSplit text = eval::scored_prefix(dataset.split(split), settings.max_tokens);
  eval::GainInputs in;
  in.loss_a = *loss_a;
  in.loss_b = *loss_b;
  in.ids = text.ids;
  in.doc_starts = text.doc_starts;
  in.reach = eval::segment_reach(text.ids.size(0), text.doc_starts, eval::reach_options(settings));
  in.train_counts = torch::bincount(dataset.train.ids, {}, dataset.tokenizer->vocab_size());
  in.words = eval::word_flags(*dataset.tokenizer);
  eval::GainOptions gain_options;
  gain_options.block = options.block;
  gain_options.samples = options.samples;
  MemoryHelp help{split, a, b, static_cast<int>(picked_b.size()), {}};
  help.gain = eval::memory_gain(in, gain_options);
  return help;
}

}  // namespace

std::vector<MemoryHelp> where_memory_helps(const config::AblationConfig& ablation,
                                           const std::vector<ResultRecord>& records,
                                           const AnalysisOptions& options) {
  std::vector<MemoryHelp> out;
  for (const auto& [a, b] : memory_pairs(records)) {
    const config::ExperimentConfig* b_config = variant_config(ablation, b);
    if (b_config == nullptr) continue;
    try {  // an analysis the report can do without: a failure is a warning
      const data::Dataset dataset = data::load_dataset(b_config->data);
      for (const auto& split : detail::splits_in_order(records)) {
        if (auto help = one_pair(*b_config, dataset, split, a, b, records, options))
          out.push_back(std::move(*help));
      }
    } catch (const Error& e) {
      log::warn("report", "where memory helps ({} over {}) left out: {}", b, a, e.what());
    }
  }
  return out;
}

std::string memory_help_csv(const std::vector<MemoryHelp>& help) {
  std::string out;
  for (const auto& h : help) {
    auto row = [&](const eval::GainRow& g, const char* figure, double value) {
      out += fmt::format("memory_gain,{},{},{},{},0,{},{}\n", record::csv_text(h.b),
                         record::csv_text(h.a), record::csv_text(h.split),
                         record::csv_text(g.group), figure, record::csv_number(value));
    };
    std::vector<const eval::GainRow*> rows = {&h.gain.total};
    for (const auto* table : {&h.gain.by_distance, &h.gain.by_frequency, &h.gain.by_case})
      for (const auto& g : table->rows) rows.push_back(&g);
    for (const auto* g : rows) {
      row(*g, "tokens", static_cast<double>(g->tokens));
      row(*g, "share", g->share);
      row(*g, "ppl_ratio", g->ratio.ratio);
      row(*g, "ratio_low", g->ratio.low);
      row(*g, "ratio_high", g->ratio.high);
    }
  }
  return out;
}

namespace {

json::OrderedJson row_json(const eval::GainRow& g) {
  json::OrderedJson j;
  j["group"] = g.group;
  j["tokens"] = g.tokens;
  for (const auto& [key, value] : {std::pair<const char*, double>{"loss_a", g.loss_a},
                                   {"loss_b", g.loss_b},
                                   {"ratio", g.ratio.ratio},
                                   {"low", g.ratio.low},
                                   {"high", g.ratio.high},
                                   {"gain", g.gain},
                                   {"share", g.share}})
    json::put_number(j, key, value);
  return j;
}

}  // namespace

std::string memory_help_json(const std::vector<MemoryHelp>& help) {
  json::OrderedJson list = json::OrderedJson::array();
  for (const auto& h : help) {
    json::OrderedJson j;
    j["split"] = h.split;
    j["a"] = h.a;
    j["b"] = h.b;
    j["seeds"] = h.seeds;
    j["total"] = row_json(h.gain.total);
    j["tables"] = json::OrderedJson::array();
    for (const auto* table : {&h.gain.by_distance, &h.gain.by_frequency, &h.gain.by_case}) {
      json::OrderedJson t;
      t["title"] = table->title;
      t["rows"] = json::OrderedJson::array();
      for (const auto& g : table->rows) t["rows"].push_back(row_json(g));
      j["tables"].push_back(t);
    }
    list.push_back(j);
  }
  return list.dump();
}

std::string memory_help_markdown(const std::vector<MemoryHelp>& help) {
  std::string out;
  for (const auto& h : help) {
    const eval::RatioInterval& all = h.gain.total.ratio;
    out += fmt::format(
        "\n## Where memory helps: {} over {} ({})\n\n"
        "The per-token gain of {}'s memory over {} (their headline evaluations, losses averaged "
        "over {} seed(s)): ppl ratio {:.4f} [{:.4f}, {:.4f}] on {} tokens. Each table splits "
        "the tokens three ways; share is a group's part of the summed gain. \"in segment\": the "
        "token occurred earlier in its segment (both models see it); \"in memory\": only the "
        "memory reaches it; \"beyond memory\": neither reaches it; \"first in document\": it "
        "never occurred before. Intervals are paired block bootstraps over a group's tokens (not "
        "contiguous text).\n\n",
        h.b, h.a, h.split, h.b, h.a, h.seeds, all.ratio, all.low, all.high,
        detail::count(h.gain.total.tokens));
    out += eval::gain_markdown(h.gain, h.a, h.b);
  }
  return out;
}

}  // namespace txl::experiment
