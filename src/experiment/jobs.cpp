// One job of an ablation (a variant at one seed): trained unless its progress marker says it
// is, evaluated in every planned mode that is not cached, and its current results read back.
#include "txl/experiment/ablation.h"

#include <fmt/core.h>

#include <algorithm>
#include <optional>
#include <thread>

#include "txl/config/load.h"
#include "txl/data/dataset.h"
#include "txl/data/synthetic.h"
#include "txl/eval/evaluator.h"
#include "txl/eval/statistics.h"
#include "txl/models/checkpoint.h"
#include "txl/train/trainer.h"
#include "txl/util/error.h"
#include "txl/util/fs.h"
#include "txl/util/log.h"
#include "txl/util/stop.h"

#include "jobs.h"

namespace txl::experiment::detail {

namespace stdfs = std::filesystem;

namespace {

// Buckets of the loss by position in the document: 0, 1-2, 3-6, ..., 511-1022, 1023 and beyond.
constexpr int kDocumentBuckets = 11;

}  // namespace

// Targets scored per split: --eval-max-tokens when given, else the experiment's eval.max_tokens.
std::int64_t eval_limit(const config::ExperimentConfig& cfg, const AblationOptions& options) {
  return options.eval_max_tokens > 0 ? options.eval_max_tokens : cfg.eval.max_tokens;
}

namespace {

// The job's evaluations, then its context sweep (options.sweep), each scoring the same prefix
// of its split (eval_limit).
std::vector<PlannedEval> planned_evals(const config::ExperimentConfig& cfg,
                                       const AblationOptions& options,
                                       const std::vector<std::int64_t>& contexts) {
  config::ExperimentConfig limited = cfg;
  limited.eval.max_tokens = eval_limit(cfg, options);
  std::vector<PlannedEval> plan = evaluation_plan(limited, options.memory_multiples);
  if (options.sweep) {
    for (auto& p : sweep_plan(limited, contexts)) plan.push_back(std::move(p));
  }
  return plan;
}

// The settings that differ between the run directory's config.yaml and `cfg`, training ones only.
std::string describe_changes(const stdfs::path& dir, const config::ExperimentConfig& cfg) {
  const stdfs::path path = dir / "config.yaml";
  std::error_code ec;
  if (!stdfs::exists(path, ec)) return "its config.yaml is missing";
  try {
    auto before = config::parse_experiment_string(fs::read_file(path), path.string());
    const std::vector<std::string> lines = config::diff_experiments(
        config::without_result_neutral_keys(before), config::without_result_neutral_keys(cfg));
    if (lines.empty()) return "settings differ";
    std::string out;
    for (size_t i = 0; i < lines.size() && i < 8; ++i) out += (i ? "; " : "") + lines[i];
    if (lines.size() > 8) out += fmt::format("; and {} more", lines.size() - 8);
    return out;
  } catch (const Error& e) {
    return std::string("its config.yaml does not load (") + e.what() + ")";
  }
}

// Whether a half-finished run (a checkpoint without done.json) was started with these settings.
bool same_training(const stdfs::path& dir, const std::string& fingerprint) {
  const stdfs::path path = dir / "config.yaml";
  std::error_code ec;
  if (!stdfs::exists(path, ec)) return false;
  try {
    auto before = config::parse_experiment_string(fs::read_file(path), path.string());
    return training_fingerprint(before) == fingerprint;
  } catch (const Error&) {
    return false;
  }
}

// Clears what a previous training of the variant left, so that it starts from scratch.
void reset_variant(const stdfs::path& dir) {
  for (const char* name : {kDoneFile, kEvalFile, train::kLastCheckpoint, train::kBestCheckpoint,
                           train::kMetricsFile}) {
    std::error_code ec;
    stdfs::remove(dir / name, ec);
    TXL_CHECK(!ec, "cannot remove ", (dir / name).string(), ": ", ec.message());
  }
}

ResultRecord evaluate_planned(const std::string& name, const config::ExperimentConfig& cfg,
                              models::TransformerLM& model, const data::Dataset& dataset,
                              const PlannedEval& p) {
  const data::EncodedSplit& split = dataset.split(p.split);
  eval::Extras extras;
  extras.by_position = p.settings.mode != eval::Mode::kSliding && p.settings.ext_len == 0;
  extras.token_losses = keeps_losses(p);
  if (cfg.data.corpus == config::Corpus::kSynthetic && !p.settings.documents)
    extras.recall_mask = data::synthetic_recall_mask(split.ids, *dataset.tokenizer);  // bool [N]
  auto r = eval::evaluate(model, split, p.settings, extras);
  r.split = p.split;
  const eval::Shape shape = eval::shape_of(p.settings);
  log::info(kTag, "variant {}: {} {} (Q {}, M {}, L {}, s {}): ppl {:.3f}, {:.0f} tok/s, {:.1f} s",
            name, p.split, config::to_string(p.settings.mode), shape.tgt_len, shape.mem_len,
            shape.window, shape.stride, r.ppl, r.tokens_per_s, r.seconds);
  ResultRecord record = make_record(r, p.settings);
  record.variant = name;
  record.attn_type = cfg.model.attn_type;
  record.sweep = p.sweep;
  if (r.token_losses.defined() && split.doc_starts.defined() && split.doc_starts.numel() > 1) {
    record.loss_by_document_position = eval::loss_by_document_position(
        r.token_losses, split.doc_starts, kDocumentBuckets, nullptr, p.settings.documents);
  }
  return record;
}

void fill_training(ResultRecord& rec, const config::ExperimentConfig& cfg, const DoneMarker& d) {
  rec.attn_type = cfg.model.attn_type;
  rec.train_tgt_len = cfg.model.tgt_len;
  rec.train_mem_len = cfg.model.mem_len;
  rec.train_steps = d.steps;
  rec.train_tokens = d.tokens;
  rec.train_tokens_per_s = d.train_tokens_per_s;
  rec.train_seconds = d.train_seconds;
  rec.params = d.params;
}

// The variant's training figures for the report, from its progress marker.
TrainingCurve training_curve(const std::string& name, const config::ExperimentConfig& cfg,
                             const DoneMarker& d) {
  TrainingCurve curve;
  curve.variant = name;
  curve.metrics = train::run_dir(cfg) / train::kMetricsFile;
  curve.final_train_loss = d.final_train_loss;
  curve.best_valid_ppl = std::exp(d.best_valid_loss);  // NaN (never validated) stays NaN
  return curve;
}

// The variant's progress marker when it still describes `cfg`. A marker or an unfinished run
// left by other settings is cleared with a warning, and the variant starts again.
std::optional<DoneMarker> current_progress(const std::string& name,
                                           const config::ExperimentConfig& cfg,
                                           const std::string& fingerprint) {
  const stdfs::path dir = train::run_dir(cfg);
  std::error_code ec;
  std::optional<DoneMarker> done = read_done(dir);
  if (done && done->fingerprint != fingerprint) {
    log::warn(kTag, "variant {} changed since it was trained ({}); training it again from scratch",
              name, describe_changes(dir, cfg));
    reset_variant(dir);
    return std::nullopt;
  }
  if (!done && stdfs::exists(dir / train::kLastCheckpoint, ec) &&
      !same_training(dir, fingerprint)) {
    log::warn(kTag,
              "variant {} was started with other settings ({}); starting it again from "
              "scratch",
              name, describe_changes(dir, cfg));
    reset_variant(dir);
  }
  return done;
}

// Trains the variant, resumed where a previous run stopped; its progress marker, or nothing
// when a signal interrupted it.
std::optional<DoneMarker> train_variant(const std::string& name,
                                        const config::ExperimentConfig& cfg,
                                        const AblationOptions& options,
                                        const std::string& fingerprint) {
  const stdfs::path dir = train::run_dir(cfg);
  std::error_code ec;
  const bool resume = stdfs::exists(dir / train::kLastCheckpoint, ec);
  log::info(kTag, "variant {}: {} ({}, Q {}, M {}) in {}", name,
            resume ? "resuming training" : "training", config::to_string(cfg.model.attn_type),
            cfg.model.tgt_len, cfg.model.mem_len, dir.string());
  train::TrainOptions train_options;
  // Without a checkpoint, whatever an earlier attempt left before its first one is replaced.
  train_options.start = resume ? train::StartMode::kResume : train::StartMode::kOverwrite;
  train_options.quiet = options.quiet;
  train_options.lock = false;  // run_job holds the run folder's lock for the whole job
  const train::TrainSummary summary = train::train(cfg, train_options);
  if (summary.status == train::TrainStatus::kInterrupted) return std::nullopt;
  DoneMarker d;
  d.stage = "trained";
  d.fingerprint = fingerprint;
  d.steps = summary.step;
  d.tokens = summary.tokens;
  d.stop_reason = summary.stop_reason;
  d.train_seconds = summary.total_seconds;
  d.train_tokens_per_s = d.train_seconds > 0 ? d.tokens / d.train_seconds : 0.0;
  d.final_train_loss = summary.final_train_loss;
  d.best_valid_loss = summary.best_step >= 0 ? summary.best_valid_loss : std::nan("");
  d.params = summary.params;  // also when every evaluation is cached, and nothing loads the model
  write_done(dir, d);
  return d;
}

// Whether `cache` holds plan entry `p` (under `key`) with everything the report needs.
bool cached(const EvalCache& cache, const PlannedEval& p, const std::string& key) {
  auto it = cache.records.find(key);
  return it != cache.records.end() && (!keeps_losses(p) || it->second.token_losses.defined());
}

// Runs every evaluation of `plan` that `cache` lacks (keys[i] is plan[i]'s), writing the cache
// after each; false when a signal interrupted them.
bool evaluate_missing(const Job& job, const std::vector<PlannedEval>& plan,
                      const std::vector<std::string>& keys, EvalCache& cache, DoneMarker& done,
                      DatasetCache& datasets) {
  const config::ExperimentConfig& cfg = job.config;
  const stdfs::path dir = train::run_dir(cfg);
  const stdfs::path checkpoint = checkpoint_to_evaluate(job.label(), dir);
  models::LoadedModel loaded = models::load_model(checkpoint);
  std::int64_t params = 0;
  for (const auto& t : loaded.model->parameters()) params += t.numel();
  if (done.params != params) {
    done.params = params;
    write_done(dir, done);
  }
  loaded.model->to(plan.front().settings.device);  // run.device, the same for every evaluation
  const data::Dataset& dataset = datasets.get(cfg.data, loaded.tokenizer);
  log::info(kTag, "job {}: evaluating {}", job.label(), checkpoint.string());
  for (size_t i = 0; i < plan.size(); ++i) {
    if (cached(cache, plan[i], keys[i])) continue;
    if (util::stop_signal().load() != 0) return false;
    const bool known = cache.records.count(keys[i]) != 0;
    cache.records[keys[i]] = evaluate_planned(job.label(), cfg, loaded.model, dataset, plan[i]);
    if (!known) cache.keys.push_back(keys[i]);
    write_cache(dir, cache);
  }
  return true;
}

// The records of every planned evaluation found in `cache`, with the job's training figures.
std::vector<ResultRecord> cached_plan_records(const Job& job, const std::vector<PlannedEval>& plan,
                                              const EvalCache& cache, const DoneMarker& done) {
  std::vector<ResultRecord> records;
  for (const auto& p : plan) {
    auto it = cache.records.find(cache_key(p));
    if (it == cache.records.end()) continue;
    ResultRecord rec = it->second;
    fill_training(rec, job.config, done);
    rec.variant = job.variant;
    rec.seed = job.seed;
    rec.sweep = p.sweep;
    records.push_back(rec);
  }
  return records;
}

}  // namespace

// The checkpoint a variant is evaluated with: the best validation checkpoint, as in the paper;
// the last one if validation never ran.
stdfs::path checkpoint_to_evaluate(const std::string& name, const stdfs::path& dir) {
  std::error_code ec;
  stdfs::path checkpoint = dir / train::kBestCheckpoint;
  if (!stdfs::exists(checkpoint, ec)) checkpoint = dir / train::kLastCheckpoint;
  TXL_CHECK(stdfs::exists(checkpoint, ec), "variant ", name, ": no checkpoint in ", dir.string(),
            " to evaluate; delete ", (dir / kDoneFile).string(), " to train it again");
  return checkpoint;
}

int job_threads(const AblationOptions& options, bool in_processes) {
  const int hardware = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int threads = options.threads > 0 ? options.threads : hardware;
  return in_processes ? std::max(1, threads / options.jobs) : threads;
}

fs::RunLock lock_job_folder(const Job& job) {
  const stdfs::path dir = train::run_dir(job.config);
  return fs::RunLock::acquire_waiting(
      dir,
      [&](const fs::LockHolder& holder) {
        log::info(kTag, "job {}: waiting for {}, which holds {}", job.label(), holder.describe(),
                  dir.string());
      },
      &util::stop_signal());
}

// Trains (unless finished earlier) and evaluates (what is not cached) one job, alone in its run
// folder; false when a signal interrupted it. Throws txl::Error when training or evaluation fails.
bool run_job(const Job& job, const AblationOptions& options,
             const std::vector<std::int64_t>& contexts, DatasetCache& datasets) {
  const config::ExperimentConfig& cfg = job.config;
  const stdfs::path dir = train::run_dir(cfg);
  const std::string fingerprint = training_fingerprint(cfg);
  // Another process's work on the job is waited for, then found finished (or resumed) below.
  fs::RunLock lock;
  if (!options.lock_held && !(lock = lock_job_folder(job)).held()) return false;
  std::optional<DoneMarker> done = current_progress(job.label(), cfg, fingerprint);
  if (done) {
    log::info(kTag, "job {}: training finished earlier ({} steps); not retrained", job.label(),
              done->steps);
  } else if (!(done = train_variant(job.label(), cfg, options, fingerprint))) {
    return false;
  }
  const auto plan = planned_evals(cfg, options, contexts);
  EvalCache cache = read_cache(dir, fingerprint);
  std::vector<std::string> keys;
  for (const auto& p : plan) keys.push_back(cache_key(p));
  bool missing = false;
  for (size_t i = 0; i < plan.size(); ++i) missing = missing || !cached(cache, plan[i], keys[i]);
  if (!missing) {
    log::info(kTag, "job {}: every evaluation cached in {}", job.label(),
              (dir / kEvalFile).string());
  } else if (!evaluate_missing(job, plan, keys, cache, *done, datasets)) {
    return false;
  }
  if (done->stage != "evaluated") {
    done->stage = "evaluated";
    write_done(dir, *done);
  }
  return true;
}

// A job's current results: its cached evaluations when its training still matches its settings.
VariantOutcome cached_outcome(const Job& job, const AblationOptions& options,
                              const std::vector<std::int64_t>& contexts) {
  VariantOutcome outcome;
  const std::string fingerprint = training_fingerprint(job.config);
  const stdfs::path dir = train::run_dir(job.config);
  auto done = read_done(dir);
  if (!done || done->fingerprint != fingerprint) return outcome;
  const EvalCache cache = read_cache(dir, fingerprint);
  outcome.records =
      cached_plan_records(job, planned_evals(job.config, options, contexts), cache, *done);
  outcome.curve = training_curve(job.label(), job.config, *done);
  return outcome;
}

// Whether a job's training and evaluations are all current (nothing for it to do).
bool job_finished(const Job& job, const AblationOptions& options,
                  const std::vector<std::int64_t>& contexts) {
  struct Probe {
    Probe() { t_probing = true; }
    ~Probe() { t_probing = false; }
  } probe;
  try {  // a file it cannot read: the job's own process meets it and reports it
    const std::string fingerprint = training_fingerprint(job.config);
    const stdfs::path dir = train::run_dir(job.config);
    auto done = read_done(dir);
    if (!done || done->fingerprint != fingerprint || done->stage != "evaluated") return false;
    const EvalCache cache = read_cache(dir, fingerprint);
    const auto plan = planned_evals(job.config, options, contexts);
    return std::all_of(plan.begin(), plan.end(),
                       [&](const PlannedEval& p) { return cached(cache, p, cache_key(p)); });
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace txl::experiment::detail
