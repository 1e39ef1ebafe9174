#pragma once
// The ablation report, from its records (records.h), written to runs/<ablation>/ as
// results.json (the records, then each split's analysis), results.csv, report.md (tables per
// split, the margin of Transformer-XL over vanilla with fixed segments, the cost of sliding-
// window against memory evaluation) and PNG plots drawn by tools/plot_report.py.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "txl/experiment/memory_help.h"
#include "txl/experiment/records.h"

namespace txl::experiment {

// A variant's training as the trainer summed it up (train::TrainSummary), and where it wrote its
// metrics.jsonl (one JSON object per line: {"kind":"train","step":N,"loss":x,...} and
// {"kind":"eval","step":N,"split":"valid",...}), which only the training-loss plot reads.
struct TrainingCurve {
  std::string variant;
  std::filesystem::path metrics;           // a missing file leaves the variant out of the plot
  double final_train_loss = std::nan("");  // the last progress record's mean loss (NaN = none)
  double best_valid_ppl = std::nan("");    // the best validation ppl (NaN = never validated)
};

// Transformer-XL at its training memory against vanilla with fixed segments at the same segment
// length, on one split: the headline of the ablation (paper table 6's comparison).
struct Margin {
  std::string split;
  std::string xl_variant;       // the first variant with attn_type xl and mem_len > 0
  std::string vanilla_variant;  // the first variant with attn_type vanilla (else vanilla_learned)
  int tgt_len = 0;              // the shared segment length Q
  int mem_len = 0;              // xl's evaluation memory (its training mem_len when evaluated)
  double xl_ppl = 0.0;
  double vanilla_ppl = 0.0;
  double margin_ppl = 0.0;      // vanilla_ppl - xl_ppl (positive: xl is better)
  double margin_percent = 0.0;  // margin_ppl / vanilla_ppl * 100
  bool xl_better = false;       // xl_ppl < vanilla_ppl
};

// The headline margin on `split`, or nothing when the records lack an xl memory evaluation or a
// vanilla segments evaluation at the same tgt_len.
std::optional<Margin> compute_margin(const std::vector<ResultRecord>& records,
                                     const std::string& split);

// One sentence stating the margin in ppl and percent and whether xl beat vanilla.
std::string margin_sentence(const Margin& margin);

// The evaluation tables (one per split: variant x mode with context, ppl, bits, tokens/s and
// cost), as printed by txl-ablate and embedded in report.md.
std::string format_table(const std::vector<ResultRecord>& records);

struct ReportOptions {
  bool plots = true;                  // draw PNG plots (needs python3 + matplotlib)
  std::string python;                 // plot interpreter; "" = plot::python_interpreter()
  std::filesystem::path plot_script;  // "" = plot::script_path() (share/txl/plot_report.py)
  std::string plot_split = "test";    // split of the context and cost plots (falls back)
  // Per variant, in order: what it changes relative to the ablation's base, e.g.
  // {"vanilla", "model.attn_type: xl -> vanilla; model.mem_len: 128 -> 0"} ("" = the base).
  std::vector<std::pair<std::string, std::string>> variant_changes;
  std::vector<std::string> failed;        // "job: why" of jobs that failed (listed first)
  std::vector<std::int64_t> contexts;     // the context sweep's grid (stated in the report)
  std::int64_t eval_max_tokens = 0;       // the scored prefix of each split (0 = the whole split)
  std::int64_t sweep_stride_divisor = 8;  // sliding sweep stride = c / this (stated)
  std::vector<MemoryHelp> memory_help;    // where memory helps (where_memory_helps); may be empty
};

struct Report {
  std::filesystem::path dir;                 // where the files went
  std::string table;                         // format_table(records)
  std::vector<std::filesystem::path> plots;  // PNGs written (empty when skipped)
  std::string plot_note;                     // why plots were skipped ("" when drawn)
};

// Writes results.json, results.csv, report.md and (when possible) training_loss.png,
// context_ppl.png and eval_cost.png into `dir`, every file atomically. A missing python3 or
// matplotlib only skips the plots, with a warning and a line in report.md. Throws txl::Error when
// the directory cannot be written.
Report write_report(const std::filesystem::path& dir, const std::string& ablation_name,
                    const std::vector<ResultRecord>& records,
                    const std::vector<TrainingCurve>& curves, const ReportOptions& options = {});

}  // namespace txl::experiment
