#pragma once
// The ablation runner: every variant of an ablation file is trained in turn on the same data,
// seed and budget, then evaluated in the modes that fit its attention (MODEL.md sections 6, 7),
// and the results go into one report (report.h) under runs/<ablation>/.
//
// Interrupted work is never redone: a variant's run directory holds
//   done.json          {"stage": "trained" | "evaluated", "fingerprint": ..., training figures}
//   eval_results.json  the evaluations finished so far, each under the settings it was run with
// (numbers that are not finite as null, with their reason under "null_because": util/json.h).
// A variant whose training settings changed since (another fingerprint) is trained again from
// scratch, with a warning listing what changed; evaluation settings (the `eval:` section) only
// invalidate the evaluations they affect.

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "txl/config/config.h"
#include "txl/eval/settings.h"
#include "txl/experiment/report.h"

namespace txl::experiment {

// One evaluation the runner performs: a split, with the settings of its mode and context.
struct PlannedEval {
  std::string split;        // valid | test
  eval::Settings settings;  // resolved from the variant with eval.mode (and eval.mem_len) set

  // "test/memory/Q128/M256/L0/s0" (eval::shape_of): identifies the evaluation in caches and
  // logs.
  std::string key() const;
};

// The evaluations that fit a variant, on every split of eval.splits, each resolved with
// eval::resolve_settings from the variant with its mode (and memory length) set:
//   vanilla, vanilla_learned (absolute positions): segments at Q, and sliding with window
//     L = eval.window (0 = Q) and stride eval.stride;
//   xl, shaw (relative positions): memory at the training M (eval.mem_len when set, else
//     model.mem_len) and at each further multiple in `memory_multiples` (2M, 4M by default;
//     duplicates dropped, so M = 0, rel_no_memory, is evaluated once), plus segments at Q for
//     reference.
std::vector<PlannedEval> evaluation_plan(const config::ExperimentConfig& variant,
                                         const std::vector<int>& memory_multiples = {1, 2, 4});

// The fingerprint deciding whether a finished variant's training still stands: every setting
// except the `eval:` section, which does not change the trained weights.
std::string training_fingerprint(const config::ExperimentConfig& variant);

struct AblationOptions {
  std::vector<std::string> only;  // train/evaluate only these variants (empty = all)
  std::vector<int> memory_multiples = {1, 2, 4};  // memory evaluation lengths, x training M
  // Score only the first N tokens of each split (0 = all), the same N tokens in every mode and
  // variant; bounds the cost of sliding-window evaluation.
  std::int64_t eval_max_tokens = 0;
  bool quiet = false;    // no training progress lines
  ReportOptions report;  // plots and their interpreter
};

enum class AblationStatus {
  kCompleted,    // every selected variant trained and evaluated, report written
  kInterrupted,  // stopped by a signal (train::stop_signal); rerun the same command to resume
};

struct AblationResult {
  AblationStatus status = AblationStatus::kCompleted;
  int signal = 0;                     // the signal that stopped it (kInterrupted)
  std::string stopped_variant;        // the variant in progress when it stopped
  std::filesystem::path dir;          // runs/<ablation> (or the ablation's output_dir)
  std::vector<ResultRecord> records;  // every record of the report
  Report report;                      // what write_report wrote (empty when interrupted)
};

// Runs the ablation: for each variant in file order (restricted to `only`), trains it with
// train::train (resuming the checkpoint an interrupted run left, else from scratch), evaluates
// it on its plan with the best checkpoint (the last one when no validation ran), caches the
// results; then writes the report with every variant that has results (variants outside `only`
// contribute their cached results when still current).
// Throws txl::Error on unknown `only` names, on an ablation without variants, and on the errors
// of training and evaluation.
AblationResult run_ablation(const config::AblationConfig& ablation,
                            const AblationOptions& options = {});

// The directory of an ablation's report: its output_dir, or runs/<name>.
std::filesystem::path ablation_dir(const config::AblationConfig& ablation);

}  // namespace txl::experiment
