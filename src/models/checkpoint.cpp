#include "txl/models/checkpoint.h"

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <set>

#include "txl/config/load.h"
#include "txl/util/error.h"
#include "txl/util/fs.h"
#include "txl/util/json.h"
#include "txl/util/safetensors.h"
#include "txl/util/sha256.h"

namespace txl::models {

namespace {

using Json = nlohmann::json;
namespace stdfs = std::filesystem;

constexpr const char* kFormat = "txl-checkpoint";
constexpr const char* kModelPrefix = "model/";
constexpr const char* kTokenizerTensor = "tokenizer";

}  // namespace

// The checksum stored in the file: the record, then each tensor's name, dtype, shape and bytes
// in file order, each part length-prefixed so that no two different contents hash alike.
std::string detail::checkpoint_checksum(const std::string& record, const NamedTensors& tensors) {
  Sha256 hash;
  auto part = [&](std::string_view bytes) {
    hash.update(std::to_string(bytes.size()) + ":");
    hash.update(bytes);
  };
  part(std::string(kFormat) + " " + std::to_string(kCheckpointVersion));
  part(record);
  for (const auto& [name, tensor] : tensors) {
    const torch::Tensor t = tensor.cpu().contiguous();
    part(name);
    part(c10::toString(t.scalar_type()));
    std::string shape;
    for (auto s : t.sizes()) shape += std::to_string(s) + ",";
    part(shape);
    part(std::string_view(static_cast<const char*>(t.data_ptr()), t.numel() * t.element_size()));
  }
  return hash.hex_digest();
}

namespace {

std::string make_record(const Checkpoint& c) {
  Json record = {
      {"config", config::dump_experiment(c.config)},
      {"vocab_size", c.vocab_size},
      {"tokenizer", {{"kind", c.tokenizer_kind}, {"fingerprint", c.tokenizer_fingerprint}}},
      {"corpus_fingerprint", c.corpus_fingerprint},
      {"train_state", c.train_state.empty() ? Json(nullptr) : Json::parse(c.train_state)},
  };
  return record.dump();
}

// Reads the record's fields into `c`; a missing or mistyped field is an error naming origin.
void read_record(const std::string& text, const std::string& origin, Checkpoint& c) {
  TXL_CHECK(!json::nested_deeper_than(text), origin, ": the checkpoint's record nests deeper than ",
            json::kMaxDepth, " levels");
  Json record = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  TXL_CHECK(record.is_object(), origin, ": the checkpoint's record is not a JSON object");
  auto field = [&](const char* key, Json::value_t type) -> const Json& {
    TXL_CHECK(record.contains(key) && record[key].type() == type, origin,
              ": the checkpoint's record has no valid '", key, "'");
    return record[key];
  };
  c.vocab_size = field("vocab_size", Json::value_t::number_unsigned).get<std::int64_t>();
  const Json& tok = field("tokenizer", Json::value_t::object);
  TXL_CHECK(tok.contains("kind") && tok["kind"].is_string() && tok.contains("fingerprint") &&
                tok["fingerprint"].is_string(),
            origin, ": the checkpoint's record names no tokenizer kind and fingerprint");
  c.tokenizer_kind = tok["kind"].get<std::string>();
  c.tokenizer_fingerprint = tok["fingerprint"].get<std::string>();
  c.corpus_fingerprint = field("corpus_fingerprint", Json::value_t::string).get<std::string>();
  TXL_CHECK(record.contains("train_state") &&
                (record["train_state"].is_null() || record["train_state"].is_object()),
            origin, ": the checkpoint's record has no valid 'train_state'");
  c.train_state = record["train_state"].is_null() ? "" : record["train_state"].dump();
  c.config = config::parse_experiment_string(
      field("config", Json::value_t::string).get<std::string>(), origin + " (stored experiment)");
}

std::string metadata_value(const safetensors::Metadata& metadata, const char* key,
                           const std::string& origin) {
  auto it = metadata.find(key);
  TXL_CHECK(it != metadata.end(), origin, ": not a txl checkpoint (no '", key,
            "' in its metadata)");
  return it->second;
}

bool is_old_format(std::string_view bytes) {
  return bytes.substr(0, 4) == std::string_view("PK\x03\x04", 4);
}

}  // namespace

const torch::Tensor* Checkpoint::find(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return &t;
  return nullptr;
}

NamedTensors Checkpoint::with_prefix(const std::string& prefix) const {
  NamedTensors out;
  for (const auto& [n, t] : tensors)
    if (n.rfind(prefix, 0) == 0) out.emplace_back(n, t);
  return out;
}

std::shared_ptr<data::Tokenizer> Checkpoint::tokenizer(const std::string& origin) const {
  return data::deserialize_tokenizer(tokenizer_kind, tokenizer_bytes, tokenizer_fingerprint,
                                     origin + " (stored tokenizer)");
}

Checkpoint model_checkpoint(const config::ExperimentConfig& config, const TransformerLM& model,
                            const data::Tokenizer& tokenizer,
                            const std::string& corpus_fingerprint) {
  Checkpoint c;
  c.config = config;
  c.vocab_size = model->n_token();
  c.tokenizer_kind = tokenizer.kind();
  c.tokenizer_fingerprint = tokenizer.fingerprint();
  c.tokenizer_bytes = tokenizer.serialize();
  c.corpus_fingerprint = corpus_fingerprint;
  torch::NoGradGuard no_grad;
  for (const auto& item : model->named_parameters())
    c.tensors.emplace_back(kModelPrefix + item.key(), item.value().detach().cpu());
  for (const auto& item : model->named_buffers())
    c.tensors.emplace_back(kModelPrefix + item.key(), item.value().detach().cpu());
  return c;
}

std::string serialize_checkpoint(const Checkpoint& c) {
  NamedTensors tensors = c.tensors;
  TXL_CHECK(c.find(kTokenizerTensor) == nullptr, "a checkpoint tensor may not be called '",
            kTokenizerTensor, "'");
  auto bytes = torch::empty({static_cast<std::int64_t>(c.tokenizer_bytes.size())}, torch::kUInt8);
  std::memcpy(bytes.data_ptr(), c.tokenizer_bytes.data(), c.tokenizer_bytes.size());
  tensors.emplace_back(kTokenizerTensor, bytes);  // uint8 [n]
  const std::string record = make_record(c);
  safetensors::Metadata metadata = {{"format", kFormat},
                                    {"version", std::to_string(kCheckpointVersion)},
                                    {"record", record},
                                    {"sha256", detail::checkpoint_checksum(record, tensors)}};
  return safetensors::serialize(tensors, metadata);
}

Checkpoint parse_checkpoint(std::string_view bytes, const std::string& origin) {
  TXL_CHECK(!is_old_format(bytes), origin,
            " is a checkpoint of txl's first format (a TorchScript archive). Loading such a file "
            "can run code stored in it, so txl no longer reads it. If you trust whoever made it, "
            "convert it once: txl-convert --trust-old-format ",
            origin, " NEW.safetensors");
  safetensors::File file = safetensors::parse(bytes, origin);
  TXL_CHECK(metadata_value(file.metadata, "format", origin) == kFormat, origin,
            ": not a txl checkpoint (format '", file.metadata["format"].substr(0, 40), "')");
  const std::string version = metadata_value(file.metadata, "version", origin);
  TXL_CHECK(version == std::to_string(kCheckpointVersion), origin,
            " has checkpoint format version ", version.substr(0, 20), "; this txl reads version ",
            kCheckpointVersion);
  const std::string record = metadata_value(file.metadata, "record", origin);
  TXL_CHECK(detail::checkpoint_checksum(record, file.tensors) ==
                metadata_value(file.metadata, "sha256", origin),
            origin,
            " is damaged: its SHA-256 does not match its contents (a changed or corrupted "
            "file); it was not used");
  Checkpoint c;
  read_record(record, origin, c);
  for (auto& [name, t] : file.tensors) {
    if (name != kTokenizerTensor) {
      c.tensors.emplace_back(std::move(name), std::move(t));
      continue;
    }
    TXL_CHECK(t.scalar_type() == torch::kUInt8 && t.dim() == 1, origin,
              ": the tokenizer tensor must be uint8 [n]");
    c.tokenizer_bytes.assign(static_cast<const char*>(t.data_ptr()), t.numel());
  }
  return c;
}

void write_checkpoint(const stdfs::path& path, const Checkpoint& checkpoint) {
  fs::write_atomic(path, serialize_checkpoint(checkpoint));
}

Checkpoint read_checkpoint(const stdfs::path& path) {
  std::error_code ec;
  TXL_CHECK(stdfs::exists(path, ec), "checkpoint not found: ", path.string());
  TXL_CHECK(!stdfs::is_directory(path, ec),
            "expected a checkpoint file, found a directory: ", path.string());
  const fs::MappedFile file(path);  // parsed in place: the tensors are copied out once
  return parse_checkpoint(file.bytes(), path.string());
}

void load_model_tensors(TransformerLM& model, const Checkpoint& checkpoint,
                        const std::string& origin) {
  std::vector<std::pair<std::string, torch::Tensor>> targets;  // the model's own tensors
  for (const auto& item : model->named_parameters()) targets.emplace_back(item.key(), item.value());
  for (const auto& item : model->named_buffers()) targets.emplace_back(item.key(), item.value());
  std::vector<std::string> problems;
  std::set<std::string> expected;
  for (const auto& [name, target] : targets) {
    expected.insert(kModelPrefix + name);
    const torch::Tensor* stored = checkpoint.find(kModelPrefix + name);
    if (stored == nullptr) {
      problems.push_back("missing " + name);
    } else if (stored->sizes() != target.sizes() || stored->scalar_type() != target.scalar_type()) {
      problems.push_back(txl::detail::concat(name, ": stored ", stored->scalar_type(), " ",
                                             stored->sizes(), ", the model has ",
                                             target.scalar_type(), " ", target.sizes()));
    }
  }
  for (const auto& [name, t] : checkpoint.with_prefix(kModelPrefix))
    if (expected.count(name) == 0) problems.push_back("unexpected " + name.substr(6));
  if (!problems.empty()) {
    std::string list;
    for (size_t i = 0; i < problems.size() && i < 12; ++i) list += "\n  " + problems[i];
    if (problems.size() > 12)
      list += "\n  ... and " + std::to_string(problems.size() - 12) + " more";
    TXL_FAIL(origin, ": its weights do not fit the model its stored experiment builds (",
             problems.size(), " differences):", list);
  }
  // txl's trainer never writes weights that are not finite; a file that holds them (edited, or
  // made elsewhere) would evaluate to NaN and generate token 0 forever.
  std::vector<std::string> not_finite;
  for (const auto& [name, target] : targets) {
    const torch::Tensor& stored = *checkpoint.find(kModelPrefix + name);
    if (stored.is_floating_point() && !torch::isfinite(stored).all().item<bool>())
      not_finite.push_back(name);
  }
  if (!not_finite.empty()) {
    std::string list;
    for (size_t i = 0; i < not_finite.size() && i < 4; ++i) list += (i ? ", " : "") + not_finite[i];
    if (not_finite.size() > 4) list += fmt::format(" and {} more", not_finite.size() - 4);
    TXL_FAIL(origin, ": weights that are not finite (NaN or infinite) in ", list,
             "; such a model computes nothing meaningful, so it is not loaded");
  }
  torch::NoGradGuard no_grad;
  for (auto& [name, target] : targets) target.copy_(*checkpoint.find(kModelPrefix + name));
}

LoadedModel rebuild_model(const Checkpoint& checkpoint, const std::string& origin,
                          const torch::Device& device) {
  LoadedModel loaded;
  loaded.config = checkpoint.config;
  loaded.vocab_size = checkpoint.vocab_size;
  loaded.tokenizer = checkpoint.tokenizer(origin);
  TXL_CHECK(loaded.tokenizer->vocab_size() == checkpoint.vocab_size, origin, ": its tokenizer has ",
            loaded.tokenizer->vocab_size(), " ids but its model ", checkpoint.vocab_size);
  loaded.corpus_fingerprint = checkpoint.corpus_fingerprint;
  loaded.model = TransformerLM(loaded.config.model, loaded.vocab_size);
  loaded.model->to(device);  // then each stored tensor is copied from the file straight there
  load_model_tensors(loaded.model, checkpoint, origin);
  return loaded;
}

LoadedModel load_model(const stdfs::path& path, const torch::Device& device) {
  return rebuild_model(read_checkpoint(path), path.string(), device);
}

}  // namespace txl::models
