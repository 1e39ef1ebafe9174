#pragma once
// The ablation runner: every variant of an ablation file is trained in turn on the same data,
// seed and budget, then evaluated in the modes that fit its attention (docs/model.md sections 6,
// 7), and the results go into one report (report.h) under runs/<ablation>/.
//
// Interrupted work is never redone: a variant's run directory holds
//   done.json                 {"stage": "trained" | "evaluated", "fingerprint": ..., training
//                             figures, "sha256": of the rest}
//   eval_results.json         the evaluations finished so far, each under the settings it was
//                             run with, the SHA-256 of each one's per-token losses, "sha256"
//   token_losses.safetensors  those per-token losses
//   job.log                   (--jobs) the output of every run of the job, appended
// (numbers that are not finite as null, with their reason under "null_because": util/json.h).
// Nothing read back is trusted unverified: a file that fails its checksum, a record whose ppl is
// not exp(loss), losses whose checksum, count or mean is not their record's are recomputed
// (done.json's figures from the checkpoint), with a warning naming the file. A variant whose
// training settings changed since (another training_fingerprint) is trained again from scratch,
// with a warning listing what changed; evaluation settings (the `eval:` section) only
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
  bool sweep = false;       // a point of the context sweep (sweep_plan)

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

// The context sweep's grid of attention lengths c (tokens a scored token sees): the ablation's
// `contexts:`, else from Q/2 to 4Q in steps of Q/2 (Q = the base's model.tgt_len), so the step
// D of RECL (docs/model.md section 8) is Q/2.
std::vector<std::int64_t> sweep_contexts(const config::AblationConfig& ablation);

// The sweep's evaluations of a variant, on every split, one per context c of `contexts`, each
// the variant at eval::at_context(c) (memory M = c with same_length for relative positions, a
// sliding window L = c at stride c/8 for absolute ones, only up to their training length Q:
// they have no positions beyond it). All score the same prefix (eval.max_tokens), so their
// per-token losses line up for RECL.
std::vector<PlannedEval> sweep_plan(const config::ExperimentConfig& variant,
                                    const std::vector<std::int64_t>& contexts);

// One training run of an ablation: a variant at one seed.
struct Job {
  std::string variant;
  std::int64_t seed = 0;            // run.seed
  bool replicate = false;           // one of the ablation's `seeds:`, in <variant>/seed<k>/
  config::ExperimentConfig config;  // the variant with that seed and folder

  std::string label() const;  // "xl", or "xl@2" for a replicate
};

// The ablation's jobs in file order, each variant once per seed of `seeds:` (else once).
std::vector<Job> ablation_jobs(const config::AblationConfig& ablation);

// The fingerprint deciding whether a finished variant's training still stands: every setting
// but those that cannot change what the run computes (config::result_neutral_keys: threads,
// device, log and checkpoint intervals, the folders, the `eval:` section), so a rerun with one
// of those changed, or from a moved folder, trains nothing; with the periodic validation's
// settings (eval::validation_settings), which choose checkpoint_best.
std::string training_fingerprint(const config::ExperimentConfig& variant);

struct AblationOptions {
  std::vector<std::string> only;  // train/evaluate only these variants, every seed (empty = all)
  std::vector<int> memory_multiples = {1, 2, 4};  // memory evaluation lengths, x training M
  // Score only the first N tokens of each split (0 = all), the same N tokens in every mode and
  // variant; bounds the cost of sliding-window evaluation.
  std::int64_t eval_max_tokens = 0;
  bool sweep = true;     // evaluate the context sweep (sweep_plan over sweep_contexts)
  bool quiet = false;    // no training progress lines
  ReportOptions report;  // plots and their interpreter
  // Jobs run at once, each in its own process started with `job_command` (txl-ablate's own
  // command line: program, ablation file, --set overrides) followed by --job LABEL --quiet
  // --set run.threads=T, T = threads / jobs (at least 1); its output goes to job.log in its run
  // folder. 1 = every job in this process, one after another.
  int jobs = 1;
  int threads = 0;  // threads to share among jobs (0 = the hardware's)
  std::vector<std::string> job_command;
  // Run only the job with this label (Job::label) and write no report: the child of --jobs,
  // or one task of a Slurm array.
  std::string job;
  // The job's run folder is locked for it by the process that started it (the parent of
  // --jobs, which passes the lock on with --lock-held), so the job does not take the lock.
  bool lock_held = false;
};

enum class AblationStatus {
  kCompleted,    // every selected job trained and evaluated, report written
  kInterrupted,  // stopped by a signal (util::stop_signal); rerun the same command to resume
  kFailed,       // some jobs failed (AblationResult::failed); the report has the others
};

struct AblationResult {
  AblationStatus status = AblationStatus::kCompleted;
  int signal = 0;                     // the signal that stopped it (kInterrupted)
  std::string stopped_variant;        // the job in progress when it stopped
  std::vector<std::string> failed;    // "label: why" of each failed job (kFailed)
  std::filesystem::path dir;          // runs/<ablation> (or the ablation's output_dir)
  std::vector<ResultRecord> records;  // every record of the report
  Report report;                      // what write_report wrote (empty when interrupted)
};

// Runs the ablation's jobs (ablation_jobs; restricted to `only`, or to `job`): trains each with
// train::train (resuming the checkpoint an interrupted run left, else from scratch) unless it
// finished earlier, evaluates it on its plan and its sweep with the best checkpoint (the last one
// when no validation ran), caching results and per-token losses; then writes the report with
// every job that has current results. A job that fails is reported (its log's last lines) and
// does not stop the others. Throws txl::Error on unknown `only` or `job` names and on an
// ablation without variants.
AblationResult run_ablation(const config::AblationConfig& ablation,
                            const AblationOptions& options = {});

// The Slurm submission of `txl-ablate --slurm`: the sbatch command of a job array with one
// task per unfinished job (each runs `job_command --job LABEL`), and the sbatch command of the
// report job that runs after the array (`job_command` alone, which skips finished jobs).
struct SlurmPlan {
  std::vector<std::string> labels;          // task i runs labels[i]
  std::filesystem::path script;             // the array's batch script (written by submit_slurm)
  std::vector<std::string> array_command;   // sbatch ... script
  std::vector<std::string> report_command;  // sbatch --dependency=afterany:<id> ... (id filled in)
};

// Writes the array's batch script under <ablation dir>/slurm/ and submits it, then the report
// job, with run_program("sbatch", ...) (never a shell); `sbatch_options` (the ablation's
// `sbatch:` then the command line's) go to both. Returns the plan with the array's job id in
// the report command. Throws txl::Error when there is nothing to run or sbatch fails.
SlurmPlan submit_slurm(const config::AblationConfig& ablation, const AblationOptions& options,
                       const std::vector<std::string>& sbatch_options);

// The directory of an ablation's report: its output_dir, or runs/<name>.
std::filesystem::path ablation_dir(const config::AblationConfig& ablation);

}  // namespace txl::experiment
