#pragma once
// What the ablation's runner (ablation.cpp) shares with its caches (caches.cpp: done.json,
// eval_results.json, token_losses.safetensors) and its jobs (jobs.cpp: one variant and seed
// trained, evaluated and read back). Private to src/experiment.

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "txl/config/load.h"
#include "txl/data/dataset.h"
#include "txl/experiment/ablation.h"
#include "txl/util/run_lock.h"

namespace txl::experiment::detail {

inline constexpr const char* kTag = "ablate";
inline constexpr const char* kDoneFile = "done.json";
inline constexpr const char* kEvalFile = "eval_results.json";
inline constexpr const char* kPrecisionFile = "precision.json";  // run.precision: auto's answer

// A variant's progress marker: written once training finished ("trained") and again once every
// planned evaluation is cached ("evaluated"), with the figures the report needs from training.
struct DoneMarker {
  std::string stage;        // trained | evaluated
  std::string fingerprint;  // training_fingerprint of the config that produced it
  std::int64_t steps = 0;
  std::int64_t tokens = 0;
  double train_seconds = 0.0;
  double train_tokens_per_s = 0.0;
  std::int64_t params = 0;
  std::string stop_reason;
  double final_train_loss = std::nan("");  // the trainer's last progress record (NaN = none)
  double best_valid_loss = std::nan("");   // its best validation (NaN = never validated)
};

// Finished evaluations of one trained model, keyed by everything that changes their result.
struct EvalCache {
  std::string fingerprint;                      // training fingerprint they were computed under
  std::vector<std::string> keys;                // in the order they were computed
  std::map<std::string, ResultRecord> records;  // key -> record
};

// Set while job_finished only looks at a job's files (its own process, which reads them
// again, says what it finds): the readers' warnings are then left out.
extern thread_local bool t_probing;

// The variant's progress marker in `dir`, or nothing (with a warning naming the file, unless
// probing) when it is missing, damaged or not one.
std::optional<DoneMarker> read_done(const std::filesystem::path& dir);
void write_done(const std::filesystem::path& dir, const DoneMarker& done);

// The cached evaluations in `dir` made under `fingerprint` (none when stale or damaged, with a
// warning), and writing them with their per-token losses.
EvalCache read_cache(const std::filesystem::path& dir, const std::string& fingerprint);
void write_cache(const std::filesystem::path& dir, const EvalCache& cache);

// Every setting that changes an evaluation's result, so a cached one is reused only when equal.
std::string cache_key(const PlannedEval& p);

// Whether an evaluation keeps per-token losses: all but a data-parallel one in document mode
// (eval::Extras).
bool keeps_losses(const PlannedEval& p);

// Loads datasets once per distinct data section and tokenizer (variants normally share one),
// encoded with the tokenizer of the checkpoint that is evaluated.
class DatasetCache {
 public:
  const data::Dataset& get(const config::DataConfig& cfg,
                           const std::shared_ptr<data::Tokenizer>& tokenizer) {
    config::ExperimentConfig probe;
    probe.data = cfg;
    const std::string key = config::fingerprint(probe) + ":" + tokenizer->fingerprint();
    if (key_ != key) {
      dataset_ = data::load_dataset(cfg, tokenizer);
      key_ = key;
    }
    return dataset_;
  }

 private:
  std::string key_;
  data::Dataset dataset_;
};

// One planned evaluation of the variant's model as a record (without the training figures).

// What happened to one variant.
struct VariantOutcome {
  std::vector<ResultRecord> records;
  TrainingCurve curve;
};

// Targets scored per split: --eval-max-tokens when given, else the experiment's eval.max_tokens.
std::int64_t eval_limit(const config::ExperimentConfig& cfg, const AblationOptions& options);

// The checkpoint a variant is evaluated with: <dir>/checkpoint_best.safetensors, else the last
// one; throws txl::Error naming the variant when there is none.
std::filesystem::path checkpoint_to_evaluate(const std::string& name,
                                             const std::filesystem::path& dir);

// Takes the job's run folder lock (fs::RunLock), waiting while another process holds it (one
// line says which); holds nothing when a stop signal came first.
fs::RunLock lock_job_folder(const Job& job);

// Trains (or resumes) and evaluates one job in this process, under its run folder's lock unless
// options.lock_held; false when a stop signal ended it.
bool run_job(const Job& job, const AblationOptions& options,
             const std::vector<std::int64_t>& contexts, DatasetCache& datasets);

// A job's current results: its cached evaluations when its training still matches its settings.
VariantOutcome cached_outcome(const Job& job, const AblationOptions& options,
                              const std::vector<std::int64_t>& contexts);

// Whether a job's training and evaluations are all current (nothing for it to do).
bool job_finished(const Job& job, const AblationOptions& options,
                  const std::vector<std::int64_t>& contexts);

// The intra-op threads of one job: options.threads (0 = the hardware's) shared among
// options.jobs processes when `in_processes`, at least 1; all of them otherwise.
int job_threads(const AblationOptions& options, bool in_processes);

// The ablation with run.precision: auto replaced by fp32 or bf16 in the base and every variant
// that asks for it (precision.cpp): read from <ablation dir>/precision.json, or measured with the
// first such job's model, data and share of the threads and written there. Unchanged when no
// variant asks for auto.
config::AblationConfig with_precision_resolved(const config::AblationConfig& ablation,
                                               const AblationOptions& options);

}  // namespace txl::experiment::detail
