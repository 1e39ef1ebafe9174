// Where memory helps, for an ablation: the pairs (no memory, memory), the inputs of
// eval::memory_gain from the corpus and the headline settings, and the report's section.
#include "txl/experiment/memory_help.h"

#include <fmt/core.h>

#include <algorithm>
#include <optional>

#include "jobs.h"
#include "report_parts.h"
#include "txl/data/dataset.h"
#include "txl/models/checkpoint.h"
#include "txl/train/run_folder.h"
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

// eval::compare_memory of one pair on one split (b's headline settings give the layout);
// nullopt when its losses are missing or differ in length.
std::optional<MemoryHelp> one_pair(const config::ExperimentConfig& b_config,
                                   const data::EncodedSplit& split, const std::string& split_name,
                                   const std::string& a, const std::string& b,
                                   const std::vector<ResultRecord>& records,
                                   const torch::Tensor& train_counts, const eval::WordFlags& words,
                                   const AnalysisOptions& options) {
  const auto loss_a = headline_losses(records, a, split_name);
  const auto loss_b = headline_losses(records, b, split_name);
  if (!loss_a || !loss_b || loss_a->losses.size(0) != loss_b->losses.size(0)) return std::nullopt;
  config::ExperimentConfig c = b_config;
  c.eval.mode = eval::Mode::kMemory;
  c.eval.mem_len = loss_b->first->mem_len;
  eval::GainOptions gain_options;
  gain_options.block = options.block;
  gain_options.samples = options.samples;
  MemoryHelp help;
  help.split = split_name;
  help.a = a;
  help.b = b;
  help.seeds = loss_b->seeds;
  help.gain = eval::compare_memory(loss_a->losses, loss_b->losses, split, eval::resolve_settings(c),
                                   train_counts, words, gain_options);
  return help;
}

// Where `variant`'s attention looks on `split`: its first seed's checkpoint, evaluated with its
// headline record's memory length (memory mode).
eval::AttentionMass attention_of(const config::AblationConfig& ablation, const std::string& variant,
                                 const ResultRecord& headline, const data::EncodedSplit& split) {
  for (const Job& job : ablation_jobs(ablation)) {
    if (job.variant != variant || job.seed != headline.seed) continue;
    const auto checkpoint = detail::checkpoint_to_evaluate(job.label(), train::run_dir(job.config));
    config::ExperimentConfig c = job.config;
    c.eval.mode = eval::Mode::kMemory;
    c.eval.mem_len = headline.mem_len;
    const eval::Settings settings = eval::resolve_settings(c);
    auto loaded = models::rebuild_model(models::read_checkpoint(checkpoint.string()),
                                        checkpoint.string(), settings.device);
    return eval::attention_by_distance(loaded.model, split, settings,
                                       eval::default_distance_edges());
  }
  TXL_FAIL("no job of variant ", variant, " with seed ", headline.seed);
}

// Both models' attention on the pair's split; left out with a warning when it cannot be measured.
void add_attention(const config::AblationConfig& ablation, const std::vector<ResultRecord>& records,
                   const data::EncodedSplit& split, MemoryHelp* help) {
  const auto a = headline_losses(records, help->a, help->split);
  const auto b = headline_losses(records, help->b, help->split);
  if (!a || !b) return;
  try {
    help->attention_a = attention_of(ablation, help->a, *a->first, split);
    help->attention_b = attention_of(ablation, help->b, *b->first, split);
    help->attention_seed_a = a->first->seed;
    help->attention_seed_b = b->first->seed;
  } catch (const std::exception& e) {  // torch's errors too (no such device, out of memory)
    help->attention_a.reset();
    help->attention_b.reset();
    log::warn("report", "where attention looks ({} and {}) left out: {}", help->a, help->b,
              e.what());
  }
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
      const auto counts = torch::bincount(dataset.train.ids, {}, dataset.tokenizer->vocab_size());
      const auto words = eval::word_flags(*dataset.tokenizer);
      for (const auto& split : detail::splits_in_order(records)) {
        if (auto help = one_pair(*b_config, dataset.split(split), split, a, b, records, counts,
                                 words, options)) {
          add_attention(ablation, records, dataset.split(split), &*help);
          out.push_back(std::move(*help));
        }
      }
    } catch (const std::exception& e) {
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
    for (const auto& [variant, mass] : {std::pair{&h.a, &h.attention_a}, {&h.b, &h.attention_b}}) {
      if (!*mass) continue;
      const eval::AttentionMass& m = **mass;
      for (std::int64_t l = 0; l < m.mass.size(0); ++l) {
        auto share = [&](const std::string& group, double value) {
          out += fmt::format("attention_mass,{},layer {},{},{},0,share,{}\n",
                             record::csv_text(*variant), l + 1, record::csv_text(h.split),
                             record::csv_text(group), record::csv_number(value));
        };
        for (size_t g = 0; g < m.edges.size(); ++g)
          share(eval::distance_edge_name(m.edges, g),
                m.mass[l][static_cast<std::int64_t>(g)].item<double>());
        share("in memory", m.memory[l].item<double>());
      }
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

json::OrderedJson attention_json(const MemoryHelp& h) {
  json::OrderedJson j;
  j["seed"] = h.attention_seed_b;
  j["seed_a"] = h.attention_seed_a;
  j["edges"] = h.attention_b->edges;
  j["groups"] = json::OrderedJson::array();
  for (size_t g = 0; g < h.attention_b->edges.size(); ++g)
    j["groups"].push_back(eval::distance_edge_name(h.attention_b->edges, g));
  j["a"] = json::OrderedJson::parse(eval::attention_mass_json(*h.attention_a));
  j["b"] = json::OrderedJson::parse(eval::attention_mass_json(*h.attention_b));
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
    if (h.attention_a && h.attention_b) j["attention"] = attention_json(h);
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
    if (h.attention_a && h.attention_b) {
      out += fmt::format(
          "\nWhere attention looks (seed {} of {}, seed {} of {}; attention_mass.png): the share "
          "of each layer's attention weight at each distance to the query, and on the memory. A "
          "share on the memory near what a uniform attention over the visible keys would give "
          "says that the model spreads its weight rather than reads its memory.\n\n{}: {}\n{}: "
          "{}",
          h.attention_seed_a, h.a, h.attention_seed_b, h.b, h.a,
          eval::attention_mass_markdown(*h.attention_a), h.b,
          eval::attention_mass_markdown(*h.attention_b));
    }
  }
  return out;
}

}  // namespace txl::experiment
