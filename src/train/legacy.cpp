#include "txl/train/legacy.h"

#include "txl/config/load.h"
#include "txl/train/state.h"
#include "txl/train/trainer.h"
#include "txl/util/error.h"

namespace txl::train {

namespace {

using torch::serialize::InputArchive;

std::int64_t read_int(InputArchive& archive, const std::string& key) {
  torch::Tensor t;
  archive.read(key, t);
  return t.item<std::int64_t>();
}

double read_double(InputArchive& archive, const std::string& key) {
  torch::Tensor t;
  archive.read(key, t);
  return t.item<double>();
}

std::string read_string(InputArchive& archive, const std::string& key) {
  c10::IValue value;
  archive.read(key, value);
  TXL_CHECK(value.isString(), "'", key, "' is not a string");
  return value.toStringRef();
}

// Version 1 kept the memory as groups (the number of layers, the layers, the key mask), one per
// gradient-accumulation chunk or rank; in order they are the rows of the whole batch.
models::Memory read_memory(InputArchive& s) {
  std::vector<models::Memory> groups;
  const auto n = read_int(s, "memory_size");
  for (std::int64_t i = 0; i < n;) {
    torch::Tensor count;
    s.read("memory_" + std::to_string(i++), count);
    models::Memory group;
    for (std::int64_t l = 0; l < count.item<std::int64_t>(); ++l) {
      torch::Tensor layer;
      s.read("memory_" + std::to_string(i++), layer);
      group.layers.push_back(layer);
    }
    torch::Tensor mask;
    s.read("memory_" + std::to_string(i++), mask);
    if (!group.empty() && mask.numel() > 0) group.key_mask = mask;
    if (!group.empty()) groups.push_back(std::move(group));
  }
  return models::Memory::join_rows(groups);
}

TrainState read_state(InputArchive& s) {
  TrainState state;
  state.step = read_int(s, "step");
  state.tokens = read_int(s, "tokens");
  state.lr_scale = read_double(s, "lr_scale");
  state.best_valid_loss = read_double(s, "best_valid_loss");
  state.evals_without_gain = read_int(s, "evals_without_gain");
  state.plateau_bad_evals = read_int(s, "plateau_bad_evals");
  state.stream_state = read_string(s, "stream_state");
  state.elapsed_seconds = read_double(s, "elapsed_seconds");
  state.last_eval_step = read_int(s, "last_eval_step");
  state.interval_loss = read_double(s, "interval_loss");
  state.interval_tokens = read_int(s, "interval_tokens");
  return state;
}

models::Checkpoint convert(InputArchive& archive, const data::Tokenizer& tokenizer,
                           const std::string& origin) {
  c10::IValue magic;
  TXL_CHECK(archive.try_read("txl_magic", magic) && magic.isString() &&
                magic.toStringRef() == "txl-checkpoint",
            "not a txl checkpoint: ", origin);
  TXL_CHECK(read_int(archive, "txl_version") == 1, origin,
            " is not of checkpoint format version 1");
  const auto config = config::parse_experiment_string(read_string(archive, "config"),
                                                      origin + " (stored experiment)");
  const auto vocab = read_int(archive, "vocab_size");
  TXL_CHECK(tokenizer.vocab_size() == vocab, "the tokenizer has ", tokenizer.vocab_size(),
            " ids but the model in ", origin, " has ", vocab,
            ": not the tokenizer it was trained with");
  models::TransformerLM model(config.model, vocab);
  InputArchive model_archive;
  archive.read("model", model_archive);
  model->load(model_archive);
  auto converted = models::model_checkpoint(config, model, tokenizer);
  InputArchive optimizer_archive, state_archive;
  if (!archive.try_read("optimizer", optimizer_archive) ||
      !archive.try_read("state", state_archive))
    return converted;  // a model-only checkpoint
  auto optimizer = make_optimizer(config.train, model->parameters());
  optimizer->load(optimizer_archive);
  TrainState state = read_state(state_archive);
  torch::Tensor rng;
  if (state_archive.try_read("rng_state", rng)) rng = rng.dim() == 2 ? rng : rng.unsqueeze(0);
  add_training_state(converted, state, read_memory(state_archive), rng.defined() ? rng.cpu() : rng,
                     *optimizer, model);
  return converted;
}

// The cached tokenizer folders of `cache_dir` (each holding tokenizer.meta) with `vocab` ids.
std::vector<std::filesystem::path> fitting_tokenizers(const std::filesystem::path& cache_dir,
                                                      std::int64_t vocab) {
  std::vector<std::filesystem::path> out;
  std::error_code ec;
  if (!std::filesystem::is_directory(cache_dir, ec)) return out;
  for (const auto& entry : std::filesystem::directory_iterator(cache_dir, ec)) {
    if (!std::filesystem::exists(entry.path() / "tokenizer.meta", ec)) continue;
    try {
      if (data::load_tokenizer(entry.path())->vocab_size() == vocab) out.push_back(entry.path());
    } catch (const Error&) {
    }
  }
  return out;
}

}  // namespace

std::filesystem::path find_legacy_tokenizer(const std::filesystem::path& path,
                                            const config::CommandLine& line) {
  std::error_code ec;
  TXL_CHECK(std::filesystem::exists(path, ec), "checkpoint not found: ", path.string());
  std::int64_t vocab = 0;
  config::ExperimentConfig stored;
  try {
    InputArchive archive;
    archive.load_from(path.string());
    vocab = read_int(archive, "vocab_size");
    stored = config::parse_experiment_string(read_string(archive, "config"),
                                             path.string() + " (stored experiment)");
  } catch (const c10::Error& e) {
    TXL_FAIL("cannot read ", path.string(), " as a version 1 txl checkpoint: ",
             std::string(e.what_without_backtrace()).substr(0, 300));
  }
  const auto config = line.experiment_over(stored, path.string(), {"data.cache_dir"});
  const auto found = fitting_tokenizers(config.data.cache_dir, vocab);
  TXL_CHECK(found.size() == 1, found.empty() ? "no" : "more than one", " cached tokenizer with ",
            vocab, " ids in ", config.data.cache_dir,
            "; name the one the model was trained with (--tokenizer DIR) or where to look "
            "(--set data.cache_dir=DIR)");
  return found.front();
}

models::Checkpoint convert_legacy_checkpoint(const std::filesystem::path& path,
                                             const data::Tokenizer& tokenizer) {
  std::error_code ec;
  TXL_CHECK(std::filesystem::exists(path, ec), "checkpoint not found: ", path.string());
  InputArchive archive;
  try {
    archive.load_from(path.string());
    return convert(archive, tokenizer, path.string());
  } catch (const c10::Error& e) {
    TXL_FAIL("cannot read ", path.string(), " as a version 1 txl checkpoint: ",
             std::string(e.what_without_backtrace()).substr(0, 300));
  }
}

}  // namespace txl::train
