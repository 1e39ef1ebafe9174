#include "txl/models/checkpoint.h"

#include <sstream>

#include "txl/config/load.h"
#include "txl/util/error.h"
#include "txl/util/fs.h"

namespace txl::models {

namespace {

using torch::serialize::InputArchive;
using torch::serialize::OutputArchive;

void write_int(OutputArchive& archive, const std::string& key, std::int64_t value) {
  archive.write(key, torch::tensor(value, torch::kInt64));
}
void write_double(OutputArchive& archive, const std::string& key, double value) {
  archive.write(key, torch::tensor(value, torch::kDouble));
}
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
  return value.toStringRef();
}

// Opens a checkpoint and checks that it is a txl checkpoint of this format version.
void open_checkpoint(InputArchive& archive, const std::filesystem::path& path,
                     const torch::Device& device = torch::kCPU) {
  TXL_CHECK(std::filesystem::exists(path), "checkpoint not found: ", path.string());
  try {
    archive.load_from(path.string(), device);
  } catch (const c10::Error& e) {
    TXL_FAIL("cannot read checkpoint ", path.string(),
             ": not a txl checkpoint or truncated (", std::string(e.what_without_backtrace()).substr(0, 200), ")");
  }
  c10::IValue magic;
  TXL_CHECK(archive.try_read("txl_magic", magic) && magic.isString() &&
                magic.toStringRef() == "txl-checkpoint",
            "not a txl checkpoint: ", path.string());
  const auto version = read_int(archive, "txl_version");
  TXL_CHECK(version == kCheckpointVersion, "checkpoint ", path.string(), " has format version ",
            version, "; this txl reads version ", kCheckpointVersion);
}

}  // namespace

void save_checkpoint(const std::filesystem::path& path, const config::ExperimentConfig& config,
                     std::int64_t vocab_size, TransformerLM& model,
                     torch::optim::Optimizer* optimizer, const TrainState* state) {
  OutputArchive archive;
  archive.write("txl_magic", c10::IValue(std::string("txl-checkpoint")));
  write_int(archive, "txl_version", kCheckpointVersion);
  archive.write("config", c10::IValue(config::dump_experiment(config)));
  write_int(archive, "vocab_size", vocab_size);
  OutputArchive model_archive;
  model->save(model_archive);
  archive.write("model", model_archive);
  if (optimizer) {
    OutputArchive optimizer_archive;
    optimizer->save(optimizer_archive);
    archive.write("optimizer", optimizer_archive);
  }
  if (state) {
    OutputArchive s;
    write_int(s, "step", state->step);
    write_int(s, "tokens", state->tokens);
    write_double(s, "lr_scale", state->lr_scale);
    write_double(s, "best_valid_loss", state->best_valid_loss);
    write_int(s, "evals_without_gain", state->evals_without_gain);
    write_int(s, "plateau_bad_evals", state->plateau_bad_evals);
    s.write("stream_state", c10::IValue(state->stream_state));
    write_int(s, "memory_size", static_cast<std::int64_t>(state->memory.size()));
    for (size_t i = 0; i < state->memory.size(); ++i)
      s.write("memory_" + std::to_string(i), state->memory[i]);
    if (state->rng_state.defined()) s.write("rng_state", state->rng_state);
    write_double(s, "elapsed_seconds", state->elapsed_seconds);
    write_int(s, "last_eval_step", state->last_eval_step);
    write_double(s, "interval_loss", state->interval_loss);
    write_int(s, "interval_tokens", state->interval_tokens);
    archive.write("state", s);
  }
  fs::write_atomic(path, [&](std::ostream& out) { archive.save_to(out); });
}

LoadedModel load_model(const std::filesystem::path& path) {
  InputArchive archive;
  open_checkpoint(archive, path);
  LoadedModel loaded;
  loaded.config = config::parse_experiment_string(read_string(archive, "config"),
                                                  path.string() + " (stored config)");
  loaded.vocab_size = read_int(archive, "vocab_size");
  loaded.model = TransformerLM(loaded.config.model, loaded.vocab_size);
  InputArchive model_archive;
  archive.read("model", model_archive);
  loaded.model->load(model_archive);
  return loaded;
}

TrainState load_train_state(const std::filesystem::path& path, TransformerLM& model,
                            torch::optim::Optimizer& optimizer, const torch::Device& device) {
  InputArchive archive;
  open_checkpoint(archive, path, device);  // every tensor straight onto the model's device
  InputArchive model_archive;
  archive.read("model", model_archive);
  model->load(model_archive);
  InputArchive optimizer_archive;
  TXL_CHECK(archive.try_read("optimizer", optimizer_archive),
            "checkpoint ", path.string(), " holds no optimizer state; it cannot be resumed");
  optimizer.load(optimizer_archive);
  InputArchive s;
  TXL_CHECK(archive.try_read("state", s), "checkpoint ", path.string(),
            " holds no training state; it cannot be resumed");
  TrainState state;
  state.step = read_int(s, "step");
  state.tokens = read_int(s, "tokens");
  state.lr_scale = read_double(s, "lr_scale");
  state.best_valid_loss = read_double(s, "best_valid_loss");
  state.evals_without_gain = read_int(s, "evals_without_gain");
  state.plateau_bad_evals = read_int(s, "plateau_bad_evals");
  state.stream_state = read_string(s, "stream_state");
  const auto n = read_int(s, "memory_size");
  for (std::int64_t i = 0; i < n; ++i) {
    torch::Tensor t;
    s.read("memory_" + std::to_string(i), t);
    state.memory.push_back(t);
  }
  torch::Tensor rng;
  if (s.try_read("rng_state", rng)) state.rng_state = rng.cpu();  // generators take CPU bytes
  state.elapsed_seconds = read_double(s, "elapsed_seconds");
  state.last_eval_step = read_int(s, "last_eval_step");
  state.interval_loss = read_double(s, "interval_loss");
  state.interval_tokens = read_int(s, "interval_tokens");
  return state;
}

}  // namespace txl::models
