#include "txl/experiment/ablation.h"

#include <fmt/core.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <mutex>
#include <sstream>
#include <thread>

#include "txl/config/load.h"
#include "txl/data/dataset.h"
#include "txl/data/synthetic.h"
#include "txl/eval/context_use.h"
#include "txl/eval/evaluator.h"
#include "txl/models/checkpoint.h"
#include "txl/train/trainer.h"
#include "txl/util/error.h"
#include "txl/util/fs.h"
#include "txl/util/process.h"
#include "txl/util/safetensors.h"
#include "txl/util/sha256.h"
#include "txl/util/json.h"
#include "txl/util/log.h"

namespace txl::experiment {

namespace stdfs = std::filesystem;
using Json = json::OrderedJson;

namespace {
std::string cache_key(const PlannedEval& p);
}  // namespace

std::string training_fingerprint(const config::ExperimentConfig& variant) {
  // The settings that cannot change what a run computes (the resume check's table says which:
  // threads, device, log_interval, checkpoint_interval, folders, eval.*) are left out, so a job
  // run by --jobs (run.threads split among them), by a Slurm task or from a moved folder counts
  // as the same training. The periodic validation is part of it, as the evaluation it is (the
  // eval.* keys it reads: mode, lengths, batch size, max_tokens): it chooses checkpoint_best and
  // when early stopping stops.
  const PlannedEval validation{"valid", eval::validation_settings(variant, nullptr), false};
  const std::string settings = config::fingerprint(config::without_result_neutral_keys(variant));
  return fs::hex64(fs::fnv1a(settings + "|validation " + cache_key(validation)));
}

namespace {

constexpr const char* kTag = "ablate";
constexpr const char* kDoneFile = "done.json";
constexpr const char* kEvalFile = "eval_results.json";
// Buckets of the loss by position in the document: 0, 1-2, 3-6, ..., 511-1022, 1023 and beyond.
constexpr int kDocumentBuckets = 11;
// Bumped whenever what a cached evaluation means changes, so older caches are recomputed.
constexpr int kEvalCacheVersion = 4;  // 3: loss_by_document_position; 4: checksums

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

// Set while job_finished only looks at a job's files (its own process, which reads them
// again, says what it finds): the readers' warnings are then left out.
thread_local bool t_probing = false;

// A warning about a file read back, unless the reading is a probe.
template <typename... Args>
void cache_warn(fmt::format_string<Args...> format, Args&&... args) {
  if (!t_probing) log::warn(kTag, format, std::forward<Args>(args)...);
}

// The files the runner reads back (done.json, eval_results.json) carry the SHA-256 of their
// own content under "sha256": a byte changed by damage or by hand is found when they are read.
constexpr const char* kChecksumKey = "sha256";

std::string content_sha256(const Json& j) {
  Sha256 sha;
  sha.update(j.dump());
  return sha.hex_digest();
}

void write_checked_json(const stdfs::path& path, Json j) {
  j[kChecksumKey] = content_sha256(j);
  fs::write_atomic(path, j.dump(2) + "\n");
}

// The object in `path` when it parses and its checksum holds; otherwise nullopt, after a
// warning that names the file, what is wrong and `consequence` (none for a missing file).
std::optional<Json> read_checked_json(const stdfs::path& path, const std::string& consequence) {
  std::error_code ec;
  if (!stdfs::exists(path, ec)) return std::nullopt;
  const std::string text = fs::read_file(path);
  Json j = json::nested_deeper_than(text)
               ? Json(nlohmann::json::value_t::discarded)
               : Json::parse(text, nullptr, /*allow_exceptions=*/false);
  std::string problem;
  if (j.is_discarded() || !j.is_object()) {
    problem = "is not a JSON object";
  } else if (!j.contains(kChecksumKey) || !j[kChecksumKey].is_string()) {
    problem = "has no checksum (written by an older txl, or not by txl)";
  } else {
    const std::string stored = j[kChecksumKey].get<std::string>();
    j.erase(kChecksumKey);
    if (content_sha256(j) != stored) problem = "fails its checksum (edited or damaged)";
  }
  if (problem.empty()) return j;
  cache_warn("{} {}; {}", path.string(), problem, consequence);
  return std::nullopt;
}

std::optional<DoneMarker> read_done(const stdfs::path& dir) {
  const stdfs::path path = dir / kDoneFile;
  std::optional<Json> checked = read_checked_json(
      path, "the variant's training figures are taken again from its checkpoint");
  if (!checked) return std::nullopt;
  const Json& j = *checked;
  if (!j.contains("fingerprint") || !j.contains("stage")) {
    cache_warn("{} is not a txl progress marker; the variant is treated as unfinished",
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
    cache_warn("{} holds a field of the wrong type ({}); the variant is treated as unfinished",
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
  write_checked_json(dir / kDoneFile, std::move(j));
}

// ----------------------------------------------------------------------- eval_results.json

// Finished evaluations of one trained model, keyed by everything that changes their result.
struct EvalCache {
  std::string fingerprint;                      // training fingerprint they were computed under
  std::vector<std::string> keys;                // in the order they were computed
  std::map<std::string, ResultRecord> records;  // key -> record
};

constexpr const char* kLossesFile = "token_losses.safetensors";

// SHA-256 of a float [N] tensor's bytes: eval_results.json keeps it for each record's per-token
// losses, so the losses are checked against the record they belong to.
std::string losses_sha256(const torch::Tensor& losses) {
  const torch::Tensor c = losses.to(torch::kFloat).contiguous();
  Sha256 sha;
  sha.update(std::string_view(static_cast<const char*>(c.data_ptr()), c.nbytes()));
  return sha.hex_digest();
}

// Why a record's per-token losses (float [tokens]) do not belong to it, or "" when they do:
// their count, finiteness and mean must be the record's tokens and loss.
std::string losses_disagree(const ResultRecord& r, const torch::Tensor& losses) {
  if (losses.dim() != 1 || losses.size(0) != r.tokens)
    return fmt::format("{} losses for {} scored tokens", losses.numel(), r.tokens);
  const torch::Tensor d = losses.to(torch::kDouble);
  if (!torch::isfinite(d).all().item<bool>()) return "a loss that is not finite";
  const double mean = r.tokens > 0 ? d.sum().item<double>() / static_cast<double>(r.tokens) : 0.0;
  if (std::abs(mean - r.loss) > 1e-5 * std::max(1.0, std::abs(r.loss)))
    return fmt::format("their mean {:.6f} is not the record's loss {:.6f}", mean, r.loss);
  return "";
}

// Why a record's figures contradict each other, or "": its ppl is exp(its loss).
std::string record_disagrees(const ResultRecord& r) {
  if (!std::isfinite(r.loss) || r.tokens <= 0) return "no finite loss over scored tokens";
  if (std::abs(r.ppl - std::exp(r.loss)) > 1e-9 * std::exp(r.loss))
    return fmt::format("ppl {:.6g} is not exp(loss {:.6f})", r.ppl, r.loss);
  return "";
}

// The per-token losses of the cached evaluations (float [tokens] each, named by cache key),
// attached to the records whose SHA-256 (`hashes`, key -> hex) and figures they match. A record
// whose losses are missing, another's or disagree with it is dropped with a warning naming the
// file (its evaluation is run again); a file that does not parse drops all of them.
void read_token_losses(const stdfs::path& dir, const std::map<std::string, std::string>& hashes,
                       EvalCache& cache) {
  const stdfs::path path = dir / kLossesFile;
  std::map<std::string, torch::Tensor> tensors;
  std::error_code ec;
  if (stdfs::exists(path, ec)) {
    try {
      safetensors::File file = safetensors::parse(fs::read_file(path), path.string());
      for (auto& [key, tensor] : file.tensors) tensors[key] = tensor;
    } catch (const Error& e) {
      cache_warn("{}; the evaluations it held will be run again", e.what());
    }
  }
  for (auto it = cache.records.begin(); it != cache.records.end();) {
    const auto hash = hashes.find(it->first);
    if (hash == hashes.end() || hash->second.empty()) {  // a record kept without losses
      ++it;
      continue;
    }
    const auto tensor = tensors.find(it->first);
    std::string problem;
    if (tensor == tensors.end()) {
      problem = "has no per-token losses for it";
    } else if (losses_sha256(tensor->second) != hash->second) {
      problem = "holds per-token losses that fail their checksum";
    } else if (const std::string why = losses_disagree(it->second, tensor->second); !why.empty()) {
      problem = "holds per-token losses that disagree with it: " + why;
    }
    if (problem.empty()) {
      it->second.token_losses = tensor->second;
      ++it;
      continue;
    }
    cache_warn("{} {} (evaluation {}); it is run again", path.string(), problem, it->first);
    cache.keys.erase(std::find(cache.keys.begin(), cache.keys.end(), it->first));
    it = cache.records.erase(it);
  }
}

void write_token_losses(const stdfs::path& dir, const EvalCache& cache) {
  safetensors::NamedTensors tensors;
  for (const auto& key : cache.keys) {
    const ResultRecord& r = cache.records.at(key);
    if (r.token_losses.defined()) tensors.emplace_back(key, r.token_losses.to(torch::kFloat));
  }
  fs::write_atomic(dir / kLossesFile,
                   safetensors::serialize(tensors, {{"fingerprint", cache.fingerprint}}));
}

// The records of a verified eval_results.json (`j`), each with its losses' hash, when they are
// of this training and version; empty (nothing reusable) otherwise.
std::vector<std::pair<ResultRecord, std::string>> cached_records(const Json& j,
                                                                 const std::string& fingerprint,
                                                                 const stdfs::path& path) {
  if (j.value("fingerprint", "") != fingerprint) return {};   // another training: stale
  if (j.value("version", 0) != kEvalCacheVersion) return {};  // another meaning: stale
  std::vector<ResultRecord> records;
  try {
    records = records_from_json(j.at("records").dump(), path.string());
  } catch (const std::exception& e) {  // txl::Error, or nlohmann's for a missing field
    cache_warn("{}; its evaluations will be recomputed", e.what());
    return {};
  }
  const auto& hashes = j.value("token_losses_sha256", Json::array());
  if (!hashes.is_array() || hashes.size() != records.size()) {
    cache_warn("{}: records and their checksums disagree; its evaluations will be recomputed",
              path.string());
    return {};
  }
  std::vector<std::pair<ResultRecord, std::string>> out;
  for (size_t i = 0; i < records.size(); ++i)
    out.emplace_back(records[i], hashes[i].is_string() ? hashes[i].get<std::string>() : "");
  return out;
}

// The evaluations cached in `dir` for the training `fingerprint`: only what verifies (the
// file's checksum, each record's figures, its per-token losses' checksum and mean); whatever
// does not is recomputed, with a warning naming the file.
EvalCache read_cache(const stdfs::path& dir, const std::string& fingerprint) {
  EvalCache cache;
  cache.fingerprint = fingerprint;
  const stdfs::path path = dir / kEvalFile;
  const std::optional<Json> j =
      read_checked_json(path, "its evaluations will be recomputed");
  if (!j || !j->contains("keys") || !(*j)["keys"].is_array()) return cache;
  const auto records = cached_records(*j, fingerprint, path);
  const auto& keys = (*j)["keys"];
  if (keys.size() != records.size()) {
    if (!records.empty())
      cache_warn("{}: keys and records disagree; its evaluations will be recomputed",
                path.string());
    return cache;
  }
  std::map<std::string, std::string> hashes;
  for (size_t i = 0; i < records.size(); ++i) {
    if (!keys[i].is_string()) continue;
    const std::string key = keys[i].get<std::string>();
    if (const std::string why = record_disagrees(records[i].first); !why.empty()) {
      cache_warn("{}: evaluation {}: {}; it is run again", path.string(), key, why);
      continue;
    }
    if (cache.records.emplace(key, records[i].first).second) {
      cache.keys.push_back(key);
      hashes[key] = records[i].second;
    }
  }
  read_token_losses(dir, hashes, cache);
  return cache;
}

void write_cache(const stdfs::path& dir, const EvalCache& cache) {
  std::vector<ResultRecord> records;
  Json hashes = Json::array();
  for (const auto& key : cache.keys) {
    const ResultRecord& r = cache.records.at(key);
    records.push_back(r);
    hashes.push_back(r.token_losses.defined() ? losses_sha256(r.token_losses) : std::string());
  }
  Json j;
  j["version"] = kEvalCacheVersion;
  j["fingerprint"] = cache.fingerprint;
  j["keys"] = cache.keys;
  j["records"] = Json::parse(to_json(records));
  j["token_losses_sha256"] = std::move(hashes);
  write_token_losses(dir, cache);  // first: a record is never cached without its losses
  write_checked_json(dir / kEvalFile, std::move(j));
}

// ------------------------------------------------------------------------------- helpers

// Targets scored per split: --eval-max-tokens when given, else the experiment's eval.max_tokens.
std::int64_t eval_limit(const config::ExperimentConfig& cfg, const AblationOptions& options) {
  return options.eval_max_tokens > 0 ? options.eval_max_tokens : cfg.eval.max_tokens;
}

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

// Whether an evaluation keeps per-token losses: all but document mode's, which scores each
// document on its own (eval::Extras).
bool keeps_losses(const PlannedEval& p) { return !p.settings.documents; }

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
  if (s.zero_memory) key += "|zeros";  // streams start from mem_len zero vectors
  if (s.bf16) key += "|bf16";
  if (p.sweep) key += "|sweep";
  return key;
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
  extras.token_losses = keeps_losses(p);
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
  record.sweep = p.sweep;
  if (r.token_losses.defined() && split.doc_starts.defined() && split.doc_starts.numel() > 1) {
    record.loss_by_document_position =
        eval::loss_by_document_position(r.token_losses, split.doc_starts, kDocumentBuckets);
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

// What happened to one variant.
struct VariantOutcome {
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
  d.params = summary.params;  // also when every evaluation is cached, and nothing loads the model
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

// Trains (unless finished earlier) and evaluates (what is not cached) one job; false when a
// signal interrupted it. Throws txl::Error when training or evaluation fails.
bool run_job(const Job& job, const AblationOptions& options,
             const std::vector<std::int64_t>& contexts, DatasetCache& datasets) {
  const config::ExperimentConfig& cfg = job.config;
  const stdfs::path dir = train::run_dir(cfg);
  const std::string fingerprint = training_fingerprint(cfg);
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
  outcome.records = cached_plan_records(job, planned_evals(job.config, options, contexts), cache,
                                        *done);
  outcome.curve = training_curve(job.label(), job.config, *done);
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

// The jobs to run: all, those of the `only` variants, or the one labelled `options.job`.
std::vector<Job> selected_jobs(const config::AblationConfig& ablation,
                               const AblationOptions& options) {
  const std::vector<Job> jobs = ablation_jobs(ablation);
  std::string names;
  for (const auto& [name, cfg] : ablation.variants) names += (names.empty() ? "" : ", ") + name;
  for (const auto& wanted : options.only) {
    const bool known = std::any_of(jobs.begin(), jobs.end(),
                                   [&](const Job& j) { return j.variant == wanted; });
    TXL_CHECK(known, "--only: ablation ", ablation.name, " has no variant '", wanted,
              "'; its variants are: ", names);
  }
  std::vector<Job> out;
  for (const Job& job : jobs) {
    const bool only = options.only.empty() || std::find(options.only.begin(), options.only.end(),
                                                        job.variant) != options.only.end();
    if (options.job.empty() ? only : job.label() == options.job) out.push_back(job);
  }
  TXL_CHECK(options.job.empty() || !out.empty(), "--job: ablation ", ablation.name,
            " has no job '", options.job, "'; its variants are: ", names,
            ablation.seeds.empty() ? "" : " (a job is VARIANT@SEED)");
  return out;
}

// What happened to the jobs that ran.
struct RunOutcome {
  int signal = 0;                   // a signal stopped them
  std::string stopped;              // the job in progress then
  std::vector<std::string> failed;  // "label: why"
};

// Runs `jobs` one after another in this process; a failed job is logged and the next one runs.
RunOutcome run_serially(const std::vector<Job>& jobs, const AblationOptions& options,
                        const std::vector<std::int64_t>& contexts) {
  RunOutcome out;
  DatasetCache datasets;
  for (const Job& job : jobs) {
    bool finished = false;
    if (util::stop_signal().load() == 0) {
      try {
        finished = run_job(job, options, contexts, datasets);
      } catch (const std::exception& e) {  // txl::Error, or LibTorch's c10::Error
        log::warn(kTag, "job {} failed: {}", job.label(), e.what());
        out.failed.push_back(job.label() + ": " + e.what());
        continue;
      }
    }
    if (!finished) {
      out.signal = util::stop_signal().load();
      out.stopped = job.label();
      log::info(kTag, "stopped during job {}; run the same command again to resume", job.label());
      return out;
    }
  }
  return out;
}

// Builds the tokenizer and encoded cache of each distinct data section once, before the jobs
// that share it start together (each would otherwise build the same files at the same time).
void prepare_data(const std::vector<Job>& jobs) {
  std::set<std::string> done;
  for (const Job& job : jobs) {
    config::ExperimentConfig probe;
    probe.data = job.config.data;
    if (!done.insert(config::fingerprint(probe)).second) continue;
    log::info(kTag, "preparing the data of {} for the jobs that share it", job.label());
    try {
      data::load_dataset(job.config.data);
    } catch (const Error& e) {  // the job meets it again, and fails with it, on its own
      log::warn(kTag, "preparing the data of {}: {}", job.label(), e.what());
    }
  }
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

// Whether a line a job wrote starts a warning ("[train] warning: ...") or continues one (an
// indented line right after it).
class WarningLines {
 public:
  bool operator()(const std::string& line) {
    const bool starts = line.find("] warning: ") != std::string::npos ||
                        line.rfind("warning: ", 0) == 0;
    in_warning_ = starts || (in_warning_ && line.rfind("  ", 0) == 0);
    return in_warning_;
  }

 private:
  bool in_warning_ = false;
};

// Opens a job's entry in its job.log, which keeps every run's output: a line naming the job,
// the time and the command, before the child's own lines.
void start_job_log(const stdfs::path& log, const Job& job, const std::vector<std::string>& argv) {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);  // the workers start jobs at once: not gmtime's shared buffer
  char when[32];
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &utc);
  std::ofstream out(log, std::ios::app | std::ios::binary);
  out << "==== txl-ablate job " << job.label() << ", " << when << ": "
      << process::shell_command(argv) << "\n";
  out.flush();
  TXL_CHECK(out.good(), "cannot write ", log.string(), ": ", std::strerror(errno));
}

// Runs one job as a child process (options.job_command --job LABEL) with `threads` threads,
// its output appended to <run dir>/job.log (*log_file) and its warnings shown on this
// process's stderr as they come; a Ctrl-C or SIGTERM of this process reaches it.
process::ProgramResult run_job_process(const Job& job, const AblationOptions& options,
                                       int threads, std::string* log_file) {
  const stdfs::path dir = train::run_dir(job.config);
  fs::ensure_dir(dir);
  std::vector<std::string> argv = options.job_command;
  for (const std::string& extra : {std::string("--job"), job.label(), std::string("--quiet"),
                                   std::string("--no-plots"), std::string("--set"),
                                   fmt::format("run.threads={}", threads)}) {
    argv.push_back(extra);
  }
  process::RunOptions run;
  run.output_file = (dir / "job.log").string();
  run.append_output = true;
  run.forward_signal = &util::stop_signal();
  run.on_output_line = [label = job.label(), warning = WarningLines()](const std::string& line) mutable {
    if (warning(line)) log::write(kTag, fmt::format("job {}: {}", label, line));
  };
  *log_file = run.output_file;
  start_job_log(run.output_file, job, argv);
  log::info(kTag, "job {}: started (log: {})", job.label(), run.output_file);
  return process::run_program(argv, run);
}

// Runs `jobs` options.jobs at a time, each as a child process (options.job_command) with its
// share of the threads and its output in <run dir>/job.log.
RunOutcome run_in_processes(const std::vector<Job>& all, const AblationOptions& options,
                            const std::vector<std::int64_t>& contexts) {
  std::vector<Job> jobs;  // those with work left: a finished one starts no process
  for (const Job& job : all) {
    if (job_finished(job, options, contexts)) {
      log::info(kTag, "job {}: trained and evaluated earlier; nothing to do", job.label());
    } else {
      jobs.push_back(job);
    }
  }
  if (jobs.empty()) return {};
  prepare_data(jobs);
  const int hardware = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int threads = options.threads > 0 ? options.threads : hardware;
  const int per_job = std::max(1, threads / options.jobs);
  log::info(kTag, "running {} job(s), {} at a time with {} thread(s) each", jobs.size(),
            options.jobs, per_job);
  RunOutcome out;
  std::mutex mutex;
  size_t next = 0;
  auto worker = [&] {
    for (;;) {
      size_t i;
      {
        std::lock_guard<std::mutex> lock(mutex);
        if (next >= jobs.size() || util::stop_signal().load() != 0) return;
        i = next++;
      }
      const Job& job = jobs[i];
      process::ProgramResult result;
      std::string log_file, error;
      try {  // a worker thread must not let an exception escape (std::terminate)
        result = run_job_process(job, options, per_job, &log_file);
      } catch (const std::exception& e) {
        error = e.what();
      }
      std::lock_guard<std::mutex> lock(mutex);
      if (error.empty() && result.ok()) {
        log::info(kTag, "job {}: finished", job.label());
      } else if (util::stop_signal().load() != 0) {  // Ctrl-C reached the children too
        out.signal = util::stop_signal().load();
        out.stopped = job.label();
      } else {
        out.failed.push_back(
            !error.empty() ? fmt::format("{}: {}", job.label(), error)
                           : fmt::format("{}: the job {}; the end of {}:\n{}", job.label(),
                                         result.status(), log_file, result.stderr_tail));
        log::warn(kTag, "{}", out.failed.back());
      }
    }
  };
  std::vector<std::thread> workers;
  for (int w = 0; w < std::min<int>(options.jobs, static_cast<int>(jobs.size())); ++w) {
    workers.emplace_back(worker);
  }
  for (auto& w : workers) w.join();
  if (out.signal == 0) out.signal = util::stop_signal().load();
  return out;
}

// The report's per-variant notes: what each variant changes relative to the base.
ReportOptions report_options(const config::AblationConfig& ablation,
                             const AblationOptions& options) {
  ReportOptions report = options.report;
  for (const auto& [name, cfg] : ablation.variants) {
    std::string changes;
    for (const auto& line : changes_from_base(ablation, cfg)) {
      changes += (changes.empty() ? "" : "; ") + line;
    }
    report.variant_changes.emplace_back(name, changes);
  }
  return report;
}

}  // namespace

AblationResult run_ablation(const config::AblationConfig& ablation,
                            const AblationOptions& options) {
  TXL_CHECK(!ablation.variants.empty(), "ablation ", ablation.name,
            " has no variants; list them under `variants:`");
  TXL_CHECK(options.jobs >= 1, "--jobs must be at least 1, got ", options.jobs);
  const std::vector<Job> jobs = selected_jobs(ablation, options);
  const std::vector<std::int64_t> contexts = sweep_contexts(ablation);
  AblationResult result;
  result.dir = ablation_dir(ablation);
  fs::ensure_dir(result.dir);
  if (options.job.empty()) {
    log::info(kTag, "ablation {}: {} variant(s), {} job(s) to run, report in {}", ablation.name,
              ablation.variants.size(), jobs.size(), result.dir.string());
    warn_unfair_variants(ablation);
  }
  const bool in_processes = options.jobs > 1 && options.job.empty() && jobs.size() > 1;
  TXL_CHECK(!in_processes || !options.job_command.empty(),
            "--jobs needs the command that runs one job (AblationOptions::job_command)");
  const RunOutcome ran = in_processes ? run_in_processes(jobs, options, contexts)
                                      : run_serially(jobs, options, contexts);
  result.failed = ran.failed;
  if (ran.signal != 0) {
    result.status = AblationStatus::kInterrupted;
    result.signal = ran.signal;
    result.stopped_variant = ran.stopped;
    return result;
  }
  if (!result.failed.empty()) result.status = AblationStatus::kFailed;
  if (!options.job.empty()) return result;  // one job of many: the parent writes the report
  std::vector<TrainingCurve> curves;
  for (const Job& job : ablation_jobs(ablation)) {
    VariantOutcome outcome = cached_outcome(job, options, contexts);
    if (outcome.records.empty()) {
      log::info(kTag, "job {}: no current results; left out of the report", job.label());
      continue;
    }
    curves.push_back(outcome.curve);
    result.records.insert(result.records.end(), outcome.records.begin(), outcome.records.end());
  }
  ReportOptions report = report_options(ablation, options);
  report.failed = result.failed;
  report.contexts = contexts;
  report.eval_max_tokens = eval_limit(ablation.base, options);
  result.report = write_report(result.dir, ablation.name, result.records, curves, report);
  return result;
}

namespace {

// A batch script: #SBATCH lines, then one command, every word quoted for the shell Slurm runs.
std::string batch_script(const std::vector<std::string>& directives, const std::string& prelude,
                         const std::string& command) {
  std::string text = "#!/bin/bash\n# Written by txl-ablate --slurm.\n";
  for (const auto& d : directives) text += "#SBATCH " + d + "\n";
  return text + prelude + "exec " + command + "\n";
}

// sbatch --parsable's answer: "<id>" or "<id>;<cluster>".
std::string submitted_id(const process::ProgramResult& r, const std::string& what) {
  TXL_CHECK(r.ok(), "sbatch (", what, ") ", r.status(), r.stderr_tail.empty() ? "" : ": ",
            r.stderr_tail);
  std::string id = r.out.substr(0, r.out.find_first_of(";\n"));
  TXL_CHECK(!id.empty() && id.find_first_not_of("0123456789_") == std::string::npos,
            "sbatch (", what, ") answered '", r.out, "', not a job id");
  return id;
}

}  // namespace

SlurmPlan submit_slurm(const config::AblationConfig& ablation, const AblationOptions& options,
                       const std::vector<std::string>& sbatch_options) {
  TXL_CHECK(!options.job_command.empty(), "--slurm needs the command that runs one job");
  const std::vector<std::int64_t> contexts = sweep_contexts(ablation);
  SlurmPlan plan;
  for (const Job& job : selected_jobs(ablation, options)) {
    if (!job_finished(job, options, contexts)) plan.labels.push_back(job.label());
  }
  const stdfs::path dir = ablation_dir(ablation) / "slurm";
  fs::ensure_dir(dir);
  std::vector<std::string> opts = ablation.sbatch;
  opts.insert(opts.end(), sbatch_options.begin(), sbatch_options.end());
  std::string labels;
  for (const auto& l : plan.labels) labels += " " + process::shell_command({l});
  std::vector<std::string> job_argv = options.job_command;
  for (const char* a : {"--quiet", "--no-plots"}) job_argv.push_back(a);
  const std::string abs_dir = stdfs::absolute(dir).string();
  std::string report_id;
  if (!plan.labels.empty()) {
    plan.script = dir / "jobs.sh";
    fs::write_atomic(plan.script, batch_script(
        {"--job-name=txl-" + ablation.name,
         fmt::format("--array=0-{}", plan.labels.size() - 1),
         "--output=" + abs_dir + "/job_%a.log"},
        "labels=(" + labels + ")\n",
        process::shell_command(job_argv) + " --job \"${labels[$SLURM_ARRAY_TASK_ID]}\""));
    plan.array_command = {"sbatch", "--parsable"};
    plan.array_command.insert(plan.array_command.end(), opts.begin(), opts.end());
    plan.array_command.push_back(plan.script.string());
    report_id = submitted_id(process::run_program(plan.array_command), "job array");
  }
  const stdfs::path report_script = dir / "report.sh";
  std::vector<std::string> report_argv = options.job_command;
  report_argv.push_back("--quiet");
  fs::write_atomic(report_script,
                   batch_script({"--job-name=txl-" + ablation.name + "-report",
                                 "--output=" + abs_dir + "/report.log"},
                                "", process::shell_command(report_argv)));
  plan.report_command = {"sbatch", "--parsable"};
  if (!report_id.empty()) plan.report_command.push_back("--dependency=afterany:" + report_id);
  plan.report_command.insert(plan.report_command.end(), opts.begin(), opts.end());
  plan.report_command.push_back(report_script.string());
  submitted_id(process::run_program(plan.report_command), "report");
  return plan;
}

}  // namespace txl::experiment
