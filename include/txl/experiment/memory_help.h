#pragma once
// Where memory helps, for an ablation (issue 29 item 6): every pair of variants of the same
// attention, `a` trained without memory and `b` with it, compared on their headline evaluations'
// per-token losses (averaged over seeds) with eval::memory_gain: the gain grouped by distance to
// the previous occurrence of the token, by frequency and by capitalised words. The report gives
// the tables (report.cpp) and results_summary.csv the figures.

#include <optional>
#include <string>
#include <vector>

#include "txl/config/config.h"
#include "txl/eval/attention_mass.h"
#include "txl/eval/memory_gain.h"
#include "txl/experiment/analysis.h"

namespace txl::experiment {

struct MemoryHelp {
  std::string split, a, b;  // a: no memory in training; b: memory
  int seeds = 0;            // seeds averaged per token (of b)
  eval::MemoryGain gain;    // loss_a - loss_b per group: > 0 where b's memory helps
  // Where each model's attention looks on the same tokens (eval::attention_by_distance, each with
  // its headline settings, on the checkpoint of its first seed); absent when it was not measured
  // (no checkpoint, memory tokens or compressed memory).
  std::optional<eval::AttentionMass> attention_a, attention_b;
  std::int64_t attention_seed_a = 0, attention_seed_b = 0;  // the seeds of those checkpoints
};

// The pairs of `records` that qualify, on every split they were evaluated on. The text, its
// documents, the train counts and the tokenizer's pieces come from the corpus of b's experiment
// (data::load_dataset: the cache); the segment and memory layout from b's headline settings.
// Pairs whose losses are missing or of different lengths are left out.
std::vector<MemoryHelp> where_memory_helps(const config::AblationConfig& ablation,
                                           const std::vector<ResultRecord>& records,
                                           const AnalysisOptions& options = {});

// results_summary.csv rows ("memory_gain", b, a, split, group, 0, figure, value) of every group:
// tokens, share, ppl_ratio (a over b), ratio_low, ratio_high; and ("attention_mass", variant,
// "layer <l>", split, distance group, 0, "share", value) of each model's attention, with the group
// "in memory" for its share on the memory.
std::string memory_help_csv(const std::vector<MemoryHelp>& help);

// results.json's "memory_help": a list of {split, a, b, seeds, total, tables: [{title, rows:
// [{group, tokens, loss_a, loss_b, ratio, low, high, gain, share}]}], attention: {seed (b's),
// seed_a, edges, groups, a: eval::attention_mass_json of a, b: that of b}}
// (non-finite numbers as null), which the plot script draws as memory_gain.png and
// attention_mass.png.
std::string memory_help_json(const std::vector<MemoryHelp>& help);

// The report section, one per pair: the three tables and what they say.
std::string memory_help_markdown(const std::vector<MemoryHelp>& help);

}  // namespace txl::experiment
