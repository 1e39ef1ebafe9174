#pragma once
// The ablation report: one record per (variant, split, evaluation mode and context), written to
// runs/<ablation>/ as results.json (a list of records), results.csv, report.md (tables per
// split, the margin of Transformer-XL over vanilla with fixed segments, the cost of sliding-
// window against memory evaluation) and PNG plots drawn by tools/plot_report.py.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "txl/config/enums.h"

namespace txl::eval {
struct EvalResult;
struct Settings;
}  // namespace txl::eval

namespace txl::experiment {

// One evaluation of one trained variant, with that variant's training figures repeated so that
// every row of results.csv stands on its own.
struct ResultRecord {
  // What was evaluated.
  std::string variant;    // ablation variant name, e.g. "xl"
  std::int64_t seed = 0;  // run.seed of the trained model (one replicate of `seeds:`)
  // A point of the context sweep (report "Context sweep", RECL): memory mode with same_length
  // and M = the context, or sliding with L = the context; false for the main evaluations.
  bool sweep = false;
  config::AttnType attn_type = config::AttnType::kXl;  // model.attn_type
  config::EvalMode eval_mode = config::EvalMode::kMemory;  // eval.mode
  std::string split;      // valid | test
  int tgt_len = 0;        // evaluation segment length Q
  int mem_len = 0;        // evaluation memory length M (memory mode; 0 otherwise)
  int window = 0;         // sliding window L (sliding mode; 0 otherwise)
  int stride = 0;         // sliding stride s (sliding mode; 0 otherwise)
  // Evaluation figures.
  double loss = 0.0;           // mean negative log-likelihood per scored token, nats
  double ppl = 0.0;            // exp(loss)
  double bits_per_byte = 0.0;  // bits per UTF-8 byte of the original text (0 = not reported)
  double bits_per_char = 0.0;  // bits per character (byte and char corpora; else 0)
  std::int64_t tokens = 0;     // scored tokens
  double tokens_per_s = 0.0;   // scored tokens per second
  double seconds = 0.0;        // evaluation wall time
  // Synthetic recall corpus: mean loss on the recalled values (ln 64 = 4.159 nats is chance,
  // 0 perfect recall) and their count; 0 / 0 on other corpora.
  double recall_loss = 0.0;
  std::int64_t recall_tokens = 0;
  // Mean loss at each position 0..Q-1 of the segment (memory and segments modes without
  // model.ext_len; empty otherwise, and in records of older versions).
  std::vector<double> loss_by_position;
  // Mean loss by position in the document, in buckets of powers of two (eval::
  // loss_by_document_position: 0, 1-2, 3-6, ...), when the corpus marks documents and the
  // evaluation kept per-token losses; empty otherwise.
  std::vector<double> loss_by_document_position;
  // float [tokens] per-token losses in text order (bootstrap intervals, RECL); undefined when not
  // kept. Not in results.json: the ablation caches them in token_losses.safetensors.
  torch::Tensor token_losses;
  // Training figures of the variant.
  int train_tgt_len = 0;            // model.tgt_len
  int train_mem_len = 0;            // model.mem_len
  std::int64_t train_steps = 0;     // optimizer steps done
  std::int64_t train_tokens = 0;    // training tokens seen
  double train_tokens_per_s = 0.0;  // training throughput
  double train_seconds = 0.0;       // training wall time (all invocations)
  std::int64_t params = 0;          // parameter count

  // Evaluation cost: wall seconds per scored token (0 when nothing was scored).
  double seconds_per_token() const;
  // The evaluation context length: mem_len for memory mode, window for sliding, tgt_len for
  // segments (the longest context any scored token sees).
  int context() const;
};

// The evaluation part of a record (what was evaluated, from `settings` through eval::shape_of,
// and the figures of `result`, its split included); the caller adds the variant and the
// training figures.
ResultRecord make_record(const eval::EvalResult& result, const eval::Settings& settings);

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

// Records as JSON (a list of objects with the fields above) and as CSV (a header line, then one
// line per record), and back from JSON (for caching evaluations between runs).
std::string to_json(const std::vector<ResultRecord>& records);
std::string to_csv(const std::vector<ResultRecord>& records);
std::vector<ResultRecord> records_from_json(const std::string& text, const std::string& origin);

struct ReportOptions {
  bool plots = true;                  // draw PNG plots (needs python3 + matplotlib)
  std::string python;                 // plot interpreter; "" = plot::python_interpreter()
  std::filesystem::path plot_script;  // "" = plot::script_path() (share/txl/plot_report.py)
  std::string plot_split = "test";    // split of the context and cost plots (falls back)
  // Per variant, in order: what it changes relative to the ablation's base, e.g.
  // {"vanilla", "model.attn_type: xl -> vanilla; model.mem_len: 128 -> 0"} ("" = the base).
  std::vector<std::pair<std::string, std::string>> variant_changes;
  std::vector<std::string> failed;      // "job: why" of jobs that failed (listed first)
  std::vector<std::int64_t> contexts;   // the context sweep's grid (stated in the report)
  std::int64_t eval_max_tokens = 0;     // the scored prefix of each split (0 = the whole split)
  std::int64_t sweep_stride_divisor = 8;  // sliding sweep stride = c / this (stated)
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
