#include "txl/experiment/ablation.h"

#include <fmt/core.h>

#include <algorithm>
#include <map>
#include <optional>
#include <sstream>

#include "txl/config/load.h"
#include "txl/data/dataset.h"
#include "txl/data/synthetic.h"
#include "txl/eval/evaluator.h"
#include "txl/models/checkpoint.h"
#include "txl/train/trainer.h"
#include "txl/util/error.h"
#include "txl/util/fs.h"
#include "txl/util/json.h"
#include "txl/util/log.h"

namespace txl::experiment {

namespace stdfs = std::filesystem;
using Json = json::OrderedJson;

std::string training_fingerprint(const config::ExperimentConfig& variant) {
  config::ExperimentConfig trained = variant;
  trained.eval = config::EvalConfig{};
  return config::fingerprint(trained);
}

namespace {

constexpr const char* kTag = "ablate";
constexpr const char* kDoneFile = "done.json";
constexpr const char* kEvalFile = "eval_results.json";
// Bumped whenever what a cached evaluation means changes, so older caches are recomputed.
constexpr int kEvalCacheVersion = 2;

// ---------------------------------------------------------------------------- done.json

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

std::optional<DoneMarker> read_done(const stdfs::path& dir) {
  const stdfs::path path = dir / kDoneFile;
  std::error_code ec;
  if (!stdfs::exists(path, ec)) return std::nullopt;
  Json j = Json::parse(fs::read_file(path), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("fingerprint") || !j.contains("stage")) {
    log::warn(kTag, "{} is not a txl progress marker; the variant is treated as unfinished",
              path.string());
    return std::nullopt;
  }
  DoneMarker d;
  try {
    d.stage = j.value("stage", "");
    d.fingerprint = j.value("fingerprint", "");
    d.steps = j.value("steps", std::int64_t{0});
    d.tokens = j.value("tokens", std::int64_t{0});
    d.train_seconds = json::get_number(j, "train_seconds", 0.0);
    d.train_tokens_per_s = json::get_number(j, "train_tokens_per_s", 0.0);
    d.params = j.value("params", std::int64_t{0});
    d.stop_reason = j.value("stop_reason", "");
    d.final_train_loss = json::get_number(j, "final_train_loss", std::nan(""));
    d.best_valid_loss = json::get_number(j, "best_valid_loss", std::nan(""));
  } catch (const nlohmann::json::exception& e) {
    log::warn(kTag, "{} holds a field of the wrong type ({}); the variant is treated as unfinished",
              path.string(), e.what());
    return std::nullopt;
  }
  return d;
}

void write_done(const stdfs::path& dir, const DoneMarker& d) {
  Json j;
  j["stage"] = d.stage;
  j["fingerprint"] = d.fingerprint;
  j["steps"] = d.steps;
  j["tokens"] = d.tokens;
  json::put_number(j, "train_seconds", d.train_seconds);
  json::put_number(j, "train_tokens_per_s", d.train_tokens_per_s);
  j["params"] = d.params;
  j["stop_reason"] = d.stop_reason;
  json::put_number(j, "final_train_loss", d.final_train_loss);
  json::put_number(j, "best_valid_loss", d.best_valid_loss);
  fs::write_atomic(dir / kDoneFile, j.dump(2) + "\n");
}

// ----------------------------------------------------------------------- eval_results.json

// Finished evaluations of one trained model, keyed by everything that changes their result.
struct EvalCache {
  std::string fingerprint;                      // training fingerprint they were computed under
  std::vector<std::string> keys;                // in the order they were computed
  std::map<std::string, ResultRecord> records;  // key -> record
};

EvalCache read_cache(const stdfs::path& dir, const std::string& fingerprint) {
  EvalCache cache;
  cache.fingerprint = fingerprint;
  const stdfs::path path = dir / kEvalFile;
  std::error_code ec;
  if (!stdfs::exists(path, ec)) return cache;
  Json j = Json::parse(fs::read_file(path), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("keys") || !j.contains("records")) {
    log::warn(kTag, "{} is unreadable; its evaluations will be recomputed", path.string());
    return cache;
  }
  if (j.value("fingerprint", "") != fingerprint) return cache;   // another training: stale
  if (j.value("version", 0) != kEvalCacheVersion) return cache;  // another meaning: stale
  std::vector<ResultRecord> records;
  try {
    records = records_from_json(j["records"].dump(), path.string());
  } catch (const Error& e) {
    log::warn(kTag, "{}; its evaluations will be recomputed", e.what());
    return cache;
  }
  const auto& keys = j["keys"];
  if (!keys.is_array() || keys.size() != records.size()) {
    log::warn(kTag, "{}: keys and records disagree; its evaluations will be recomputed",
              path.string());
    return cache;
  }
  for (size_t i = 0; i < records.size(); ++i) {
    if (!keys[i].is_string()) continue;
    const std::string key = keys[i].get<std::string>();
    if (cache.records.emplace(key, records[i]).second) cache.keys.push_back(key);
  }
  return cache;
}

void write_cache(const stdfs::path& dir, const EvalCache& cache) {
  std::vector<ResultRecord> records;
  for (const auto& key : cache.keys) records.push_back(cache.records.at(key));
  Json j;
  j["version"] = kEvalCacheVersion;
  j["fingerprint"] = cache.fingerprint;
  j["keys"] = cache.keys;
  j["records"] = Json::parse(to_json(records));
  fs::write_atomic(dir / kEvalFile, j.dump(2) + "\n");
}

// ------------------------------------------------------------------------------- helpers

// Targets scored per split: --eval-max-tokens when given, else the experiment's eval.max_tokens.
std::int64_t eval_limit(const config::ExperimentConfig& cfg, const AblationOptions& options) {
  return options.eval_max_tokens > 0 ? options.eval_max_tokens : cfg.eval.max_tokens;
}

// The variant's evaluations, each scoring the same prefix of its split (eval_limit).
std::vector<PlannedEval> planned_evals(const config::ExperimentConfig& cfg,
                                       const AblationOptions& options) {
  config::ExperimentConfig limited = cfg;
  limited.eval.max_tokens = eval_limit(cfg, options);
  return evaluation_plan(limited, options.memory_multiples);
}

// Every setting that changes an evaluation's result, so a cached one is reused only when equal.
// ext_len, document mode and bf16 were not honoured by older versions: they appear only when on,
// so the keys of evaluations without them are unchanged.
std::string cache_key(const PlannedEval& p) {
  const eval::Settings& s = p.settings;
  std::string key = fmt::format("{}|clamp{}|same{}|warmup{}|B{}|max{}", p.key(), s.clamp_len,
                                s.same_length ? 1 : 0, s.mode == eval::Mode::kMemory ? s.warmup : 0,
                                s.batch_size, s.max_tokens);
  if (s.ext_len > 0 && s.mode != eval::Mode::kSliding) key += fmt::format("|ext{}", s.ext_len);
  if (s.documents) key += "|documents";
  if (s.bf16) key += "|bf16";
  return key;
}

// The settings that differ between the run directory's config.yaml and `cfg`, training ones only.
std::string describe_changes(const stdfs::path& dir, const config::ExperimentConfig& cfg) {
  const stdfs::path path = dir / "config.yaml";
  std::error_code ec;
  if (!stdfs::exists(path, ec)) return "its config.yaml is missing";
  try {
    auto before = config::parse_experiment_string(fs::read_file(path), path.string());
    std::vector<std::string> lines;
    for (const auto& line : config::diff_experiments(before, cfg)) {
      if (line.rfind("eval.", 0) != 0) lines.push_back(line);
    }
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
  for (const char* name :
       {kDoneFile, kEvalFile, train::kLastCheckpoint, train::kBestCheckpoint, train::kMetricsFile}) {
    std::error_code ec;
    stdfs::remove(dir / name, ec);
    TXL_CHECK(!ec, "cannot remove ", (dir / name).string(), ": ", ec.message());
  }
}

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
// On the synthetic corpus the recalled values are also scored on their own (plain text only).
ResultRecord evaluate_planned(const std::string& name, const config::ExperimentConfig& cfg,
                              models::TransformerLM& model, const data::Dataset& dataset,
                              const PlannedEval& p) {
  const data::EncodedSplit& split = dataset.split(p.split);
  eval::Extras extras;
  extras.by_position = p.settings.mode != eval::Mode::kSliding && p.settings.ext_len == 0;
  if (cfg.data.corpus == "synthetic" && !p.settings.documents)
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

// What happened to one variant.
struct VariantOutcome {
  bool interrupted = false;
  std::vector<ResultRecord> records;
  TrainingCurve curve;
};

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
  if (!done && stdfs::exists(dir / train::kLastCheckpoint, ec) && !same_training(dir, fingerprint)) {
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
std::optional<DoneMarker> train_variant(const std::string& name, const config::ExperimentConfig& cfg,
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
  write_done(dir, d);
  return d;
}

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

// Runs every evaluation of `plan` that `cache` lacks (keys[i] is plan[i]'s), writing the cache
// after each; false when a signal interrupted them.
bool evaluate_missing(const std::string& name, const config::ExperimentConfig& cfg,
                      const std::vector<PlannedEval>& plan, const std::vector<std::string>& keys,
                      EvalCache& cache, DoneMarker& done, DatasetCache& datasets) {
  const stdfs::path dir = train::run_dir(cfg);
  const stdfs::path checkpoint = checkpoint_to_evaluate(name, dir);
  models::LoadedModel loaded = models::load_model(checkpoint);
  std::int64_t params = 0;
  for (const auto& t : loaded.model->parameters()) params += t.numel();
  if (done.params != params) {
    done.params = params;
    write_done(dir, done);
  }
  loaded.model->to(plan.front().settings.device);  // run.device, the same for every evaluation
  const data::Dataset& dataset = datasets.get(cfg.data, loaded.tokenizer);
  log::info(kTag, "variant {}: evaluating {}", name, checkpoint.string());
  for (size_t i = 0; i < plan.size(); ++i) {
    if (cache.records.count(keys[i]) != 0) continue;
    if (train::stop_signal().load() != 0) return false;
    cache.records[keys[i]] = evaluate_planned(name, cfg, loaded.model, dataset, plan[i]);
    cache.keys.push_back(keys[i]);
    write_cache(dir, cache);
  }
  return true;
}

// The records of every planned evaluation found in `cache`, with the training figures.
std::vector<ResultRecord> cached_plan_records(const std::string& name,
                                              const config::ExperimentConfig& cfg,
                                              const std::vector<PlannedEval>& plan,
                                              const EvalCache& cache, const DoneMarker& done) {
  std::vector<ResultRecord> records;
  for (const auto& p : plan) {
    auto it = cache.records.find(cache_key(p));
    if (it == cache.records.end()) continue;
    ResultRecord rec = it->second;
    fill_training(rec, cfg, done);
    rec.variant = name;
    records.push_back(rec);
  }
  return records;
}

// Trains (unless finished earlier) and evaluates (what is not cached) one variant.
VariantOutcome run_variant(const std::string& name, const config::ExperimentConfig& cfg,
                           const AblationOptions& options, DatasetCache& datasets) {
  VariantOutcome outcome;
  const stdfs::path dir = train::run_dir(cfg);
  const std::string fingerprint = training_fingerprint(cfg);
  std::optional<DoneMarker> done = current_progress(name, cfg, fingerprint);
  if (done) {
    log::info(kTag, "variant {}: training finished earlier ({} steps); not retrained", name,
              done->steps);
  } else if (!(done = train_variant(name, cfg, options, fingerprint))) {
    outcome.interrupted = true;
    return outcome;
  }
  const auto plan = planned_evals(cfg, options);
  EvalCache cache = read_cache(dir, fingerprint);
  std::vector<std::string> keys;
  for (const auto& p : plan) keys.push_back(cache_key(p));
  const bool missing = std::any_of(keys.begin(), keys.end(),
                                   [&](const auto& k) { return cache.records.count(k) == 0; });
  if (!missing) {
    log::info(kTag, "variant {}: every evaluation cached in {}", name, (dir / kEvalFile).string());
  } else if (!evaluate_missing(name, cfg, plan, keys, cache, *done, datasets)) {
    outcome.interrupted = true;
    return outcome;
  }
  if (done->stage != "evaluated") {
    done->stage = "evaluated";
    write_done(dir, *done);
  }
  outcome.records = cached_plan_records(name, cfg, plan, cache, *done);
  outcome.curve = training_curve(name, cfg, *done);
  return outcome;
}

// Cached results of a variant left out by `only`, when they still match its settings.
VariantOutcome cached_outcome(const std::string& name, const config::ExperimentConfig& cfg,
                              const AblationOptions& options) {
  VariantOutcome outcome;
  const std::string fingerprint = training_fingerprint(cfg);
  auto done = read_done(train::run_dir(cfg));
  if (!done || done->fingerprint != fingerprint) return outcome;
  const EvalCache cache = read_cache(train::run_dir(cfg), fingerprint);
  outcome.records = cached_plan_records(name, cfg, planned_evals(cfg, options), cache, *done);
  outcome.curve = training_curve(name, cfg, *done);
  return outcome;
}

// What a variant changes relative to the ablation's base (its name and folder always differ).
std::vector<std::string> changes_from_base(const config::AblationConfig& ablation,
                                           const config::ExperimentConfig& cfg) {
  std::vector<std::string> out;
  for (const auto& line : config::diff_experiments(ablation.base, cfg)) {
    if (line.rfind("run.name:", 0) == 0 || line.rfind("run.output_dir:", 0) == 0) continue;
    out.push_back(line);
  }
  return out;
}

// An ablation compares like with like: warns about variants that change the data, the seed or
// the training budget, since their differences are then not the named change alone.
void warn_unfair_variants(const config::AblationConfig& ablation) {
  for (const auto& [name, cfg] : ablation.variants) {
    for (const auto& line : changes_from_base(ablation, cfg)) {
      const bool unfair = line.rfind("data.", 0) == 0 || line.rfind("run.seed:", 0) == 0 ||
                          line.rfind("train.max_steps:", 0) == 0 ||
                          line.rfind("train.max_tokens:", 0) == 0 ||
                          line.rfind("train.max_minutes:", 0) == 0;
      if (unfair) {
        log::warn(kTag, "variant {} changes {}; its results are not comparable like for like", name,
                  line);
      }
    }
  }
}

}  // namespace

AblationResult run_ablation(const config::AblationConfig& ablation,
                            const AblationOptions& options) {
  TXL_CHECK(!ablation.variants.empty(), "ablation ", ablation.name,
            " has no variants; list them under `variants:`");
  std::vector<std::string> names;
  for (const auto& [name, cfg] : ablation.variants) names.push_back(name);
  for (const auto& wanted : options.only) {
    TXL_CHECK(std::find(names.begin(), names.end(), wanted) != names.end(), "--only: ablation ",
              ablation.name, " has no variant '", wanted, "'; its variants are: ", [&] {
                std::string list;
                for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
                return list;
              }());
  }
  auto selected = [&](const std::string& name) {
    return options.only.empty() ||
           std::find(options.only.begin(), options.only.end(), name) != options.only.end();
  };

  AblationResult result;
  result.dir = ablation_dir(ablation);
  fs::ensure_dir(result.dir);
  log::info(kTag, "ablation {}: {} variant(s), report in {}", ablation.name, names.size(),
            result.dir.string());

  warn_unfair_variants(ablation);
  ReportOptions report_options = options.report;
  for (const auto& [name, cfg] : ablation.variants) {
    std::string changes;
    for (const auto& line : changes_from_base(ablation, cfg)) {
      changes += (changes.empty() ? "" : "; ") + line;
    }
    report_options.variant_changes.emplace_back(name, changes);
  }

  DatasetCache datasets;
  std::vector<TrainingCurve> curves;
  for (const auto& [name, cfg] : ablation.variants) {
    VariantOutcome outcome;
    if (selected(name)) {
      if (int sig = train::stop_signal().load(); sig != 0) {
        result.status = AblationStatus::kInterrupted;
        result.signal = sig;
        result.stopped_variant = name;
        return result;
      }
      outcome = run_variant(name, cfg, options, datasets);
      if (outcome.interrupted) {
        result.status = AblationStatus::kInterrupted;
        result.signal = train::stop_signal().load();
        result.stopped_variant = name;
        log::info(kTag, "stopped during variant {}; run the same command again to resume", name);
        return result;
      }
    } else {
      outcome = cached_outcome(name, cfg, options);
      if (outcome.records.empty()) {
        log::info(kTag, "variant {}: not selected and no current results; left out of the report",
                  name);
      }
    }
    if (outcome.records.empty()) continue;
    curves.push_back(outcome.curve);
    result.records.insert(result.records.end(), outcome.records.begin(), outcome.records.end());
  }
  result.report = write_report(result.dir, ablation.name, result.records, curves, report_options);
  return result;
}

}  // namespace txl::experiment
