// The ablation's files read back: each variant's progress marker (done.json), its cached
// evaluations (eval_results.json) and their per-token losses (token_losses.safetensors), each
// checked (a checksum, the losses' hash) before a number in it is used; and the fingerprints
// that say when they are stale.
#include <fmt/core.h>

#include <cmath>
#include <map>
#include <optional>

#include "jobs.h"
#include "txl/config/load.h"
#include "txl/dist/group.h"
#include "txl/eval/evaluator.h"
#include "txl/util/error.h"
#include "txl/util/fs.h"
#include "txl/util/json.h"
#include "txl/util/log.h"
#include "txl/util/record.h"
#include "txl/util/safetensors.h"
#include "txl/util/sha256.h"

namespace txl::experiment {

namespace stdfs = std::filesystem;
using Json = json::OrderedJson;

std::string training_fingerprint(const config::ExperimentConfig& variant) {
  // The settings that cannot change what a run computes (the resume check's table says which:
  // threads, device, log_interval, checkpoint_interval, folders, eval.*) are left out, so a job
  // run by --jobs (run.threads split among them), by a Slurm task or from a moved folder counts
  // as the same training. The periodic validation is part of it, as the evaluation it is (the
  // eval.* keys it reads: mode, lengths, batch size, max_tokens): it chooses checkpoint_best and
  // when early stopping stops.
  const PlannedEval validation{"valid", eval::validation_settings(variant, nullptr), false};
  const std::string settings = config::fingerprint(config::without_result_neutral_keys(variant));
  return fs::hex64(fs::fnv1a(settings + "|validation " + detail::cache_key(validation)));
}

namespace detail {

thread_local bool t_probing = false;

namespace {

// Bumped whenever what a cached evaluation means changes, so older caches are recomputed.
constexpr int kEvalCacheVersion = 5;  // 3: loss_by_document_position; 4: checksums; 5: words

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
  Json j = json::nested_deeper_than(text) ? Json(nlohmann::json::value_t::discarded)
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

// done.json's fields, in file order: stage and fingerprint make it a marker; the figures were
// added one by one, so an older marker may lack them (read as their defaults).
template <typename R, typename Visit>
void done_fields(R& d, Visit&& visit) {
  visit("stage", d.stage);
  visit("fingerprint", d.fingerprint);
  visit("steps", d.steps, record::kOptional);
  visit("tokens", d.tokens, record::kOptional);
  visit("train_seconds", d.train_seconds, record::kOptional);
  visit("train_tokens_per_s", d.train_tokens_per_s, record::kOptional);
  visit("params", d.params, record::kOptional);
  visit("stop_reason", d.stop_reason, record::kOptional);
  visit("final_train_loss", d.final_train_loss, record::kOptional);
  visit("best_valid_loss", d.best_valid_loss, record::kOptional);
}

}  // namespace

std::optional<DoneMarker> read_done(const stdfs::path& dir) {
  const stdfs::path path = dir / kDoneFile;
  std::optional<Json> checked =
      read_checked_json(path, "the variant's training figures are taken again from its checkpoint");
  if (!checked) return std::nullopt;
  DoneMarker d;
  try {  // a marker lacking its stage or fingerprint, or a mistyped field: unfinished
    done_fields(d, record::JsonReader<Json>(*checked, path.string(), "progress marker",
                                            "the variant is treated as unfinished"));
  } catch (const Error& e) {
    cache_warn("{}", e.what());
    return std::nullopt;
  }
  return d;
}

void write_done(const stdfs::path& dir, const DoneMarker& d) {
  Json j;
  done_fields(d, record::JsonWriter<Json>(j));
  write_checked_json(dir / kDoneFile, std::move(j));
}

namespace {

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

}  // namespace

EvalCache read_cache(const stdfs::path& dir, const std::string& fingerprint) {
  EvalCache cache;
  cache.fingerprint = fingerprint;
  const stdfs::path path = dir / kEvalFile;
  const std::optional<Json> j = read_checked_json(path, "its evaluations will be recomputed");
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

// Whether an evaluation keeps per-token losses: all but a data-parallel one in document mode,
// whose losses are put back in text order in one process only (eval::Extras).
bool keeps_losses(const PlannedEval& p) {
  const bool shared = p.settings.group != nullptr && p.settings.group->distributed();
  return !p.settings.documents || !shared;
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
  if (s.zero_memory) key += "|zeros";  // streams start from mem_len zero vectors
  if (s.bf16) key += "|bf16";
  if (p.sweep) key += "|sweep";
  return key;
}

}  // namespace detail

}  // namespace txl::experiment
