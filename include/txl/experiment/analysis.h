#pragma once
// What the ablation report concludes from its records (issue 14): figures over seeds (mean and
// standard deviation), whether each difference between two variants is real (a paired block
// bootstrap interval of the ppl ratio on the same tokens), how ppl changes with the attention
// length (the context sweep, with the paper's Table 6 "PPL init", "PPL best" and "Attn Len"),
// and the group's relative effective context length (RECL, docs/model.md section 8). Pure functions
// of ResultRecords; the report (tables.cpp, findings.cpp, report.cpp) formats them.

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "txl/eval/statistics.h"
#include "txl/experiment/records.h"

namespace txl::experiment {

// Mean and sample standard deviation (n - 1; 0 for one value) of the finite values given; NaN
// mean when there are none.
struct MeanStd {
  double mean = std::nan("");
  double std = 0.0;
  int n = 0;
};
MeanStd mean_std(const std::vector<double>& values);

// One evaluation of one variant summed up over its seeds: the records that share variant,
// split, mode, lengths and sweep flag.
struct SeedSummary {
  ResultRecord first;               // the first seed's record (without its token losses)
  std::vector<std::int64_t> seeds;  // in record order
  MeanStd ppl, loss, bits_per_byte, word_ppl, recall_loss;  // over the seeds
};
std::vector<SeedSummary> summarize_seeds(const std::vector<ResultRecord>& records);

// One record per summary with the seeds' mean ppl, loss, bits per byte, recall loss and loss by
// position (the other figures are the first seed's), for the report's findings.
std::vector<ResultRecord> mean_records(const std::vector<SeedSummary>& summaries,
                                       const std::vector<ResultRecord>& records);

// The evaluation a variant is compared on: relative positions at the training memory (memory
// mode), absolute positions on fixed segments; never a sweep point.
bool is_headline(const ResultRecord& record);

// The per-token losses of `variant`'s headline evaluations on `split`, averaged over its seeds:
// double [T], with the seeds and the first seed's record. nullopt when there is none or one
// lacks its losses or scored other tokens.
struct HeadlineLosses {
  torch::Tensor losses;  // double [T]
  int seeds = 0;
  const ResultRecord* first = nullptr;
};
std::optional<HeadlineLosses> headline_losses(const std::vector<ResultRecord>& records,
                                              const std::string& variant, const std::string& split);

// The ratio of perplexities of variants a and b on one split, from their headline evaluations'
// per-token losses averaged over seeds, with eval::paired_bootstrap_ppl_ratio's interval.
struct PairComparison {
  std::string split, a, b;
  int seeds_a = 0, seeds_b = 0;  // seeds averaged per token
  eval::RatioInterval interval;  // ratio < 1: a has the lower ppl
};

struct AnalysisOptions {
  std::int64_t block = 64;  // bootstrap block, tokens
  int samples = 1000;       // bootstrap resamples
  eval::ReclOptions recl;   // r = 0.1, 0.5, 1.0 and the 1% threshold
};

// Every pair of variants (in record order, a before b) whose headline evaluations on `split`
// kept per-token losses on the same number of tokens.
std::vector<PairComparison> compare_pairs(const std::vector<ResultRecord>& records,
                                          const std::string& split,
                                          const AnalysisOptions& options = {});

// A variant's ppl against attention length c (sweep records on one split, over seeds), with
// the paper's Table 6 figures: PPL init at the longest context of training (Q + M; a grid point
// at most that, else the smallest), PPL best over the grid and Attn Len, the shortest context
// that reaches it.
struct ContextSweep {
  std::string variant, split;
  config::AttnType attn_type = config::AttnType::kXl;
  std::vector<std::int64_t> contexts;  // increasing
  std::vector<MeanStd> ppl;            // per context
  std::int64_t train_tgt_len = 0;      // Q of training
  std::int64_t train_context = 0;      // Q + M of training
  std::int64_t init_context = 0;       // the grid point PPL init is read at
  double ppl_init = std::nan(""), ppl_best = std::nan("");
  std::int64_t attn_len = 0;
};
std::vector<ContextSweep> context_sweeps(const std::vector<ResultRecord>& records,
                                         const std::string& split);

// RECL of the group of variants whose sweeps on `split` cover the grid shared by all of them,
// each from its per-token losses averaged over seeds. An absolute-position model has no
// positions beyond its training length Q, so at a context c > Q its losses are those at the
// longest grid point within Q (the last Q tokens are the most it can use). `note` says why it was
// not computed (fewer than two contexts shared, missing token losses, different token counts).
struct ReclTable {
  std::string split;
  std::vector<std::string> variants;  // the group, in record order
  eval::Recl recl;                    // recl.recl[variant][ratio]
  std::int64_t tokens = 0;            // T
  std::string note;                   // "" when computed
};
ReclTable group_recl(const std::vector<ResultRecord>& records, const std::string& split,
                     const AnalysisOptions& options = {});

// Everything above for one split.
struct Analysis {
  std::string split;
  std::vector<SeedSummary> summaries;
  std::vector<PairComparison> pairs;
  std::vector<ContextSweep> sweeps;
  ReclTable recl;
};
Analysis analyse(const std::vector<ResultRecord>& records, const std::string& split,
                 const AnalysisOptions& options = {});

// The analysis as the "analysis" object of results.json, and as rows of results_summary.csv
// (table,variant,versus,split,eval,context,figure,value: one figure per row).
std::string analysis_json(const Analysis& analysis, const AnalysisOptions& options = {});
std::string analysis_csv(const Analysis& analysis);

}  // namespace txl::experiment
