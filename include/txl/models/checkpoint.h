#pragma once
// Checkpoints are data only. A checkpoint is a safetensors file (readable by Python's
// `safetensors` package) whose tensors are the model's weights and, for resuming, the training
// state, and whose metadata holds one JSON record. Loading parses bytes and copies numbers;
// nothing in a file is ever executed (no TorchScript archive, no pickle).
//
// Format version 2:
//   tensors    model/<name>        every parameter and buffer of the model (named_parameters)
//              tokenizer           uint8 [n]: the tokenizer's own bytes
//              (data::Tokenizer::serialize) anything else       the trainer's named state
//              (optimizer/..., memory/..., rng/...)
//   metadata   format  "txl-checkpoint"
//              version "2"
//              record  JSON {"config": the resolved experiment as YAML, "vocab_size": N,
//                            "tokenizer": {"kind", "fingerprint"}, "corpus_fingerprint": hex,
//                            "train_state": an object, or null in a model-only checkpoint}
//              sha256  SHA-256 over the record and every tensor's name, dtype, shape and bytes,
//                      checked on load: a flipped byte anywhere is an error, never a number.
//
// Written atomically (temp file + rename). Files of txl's first format (TorchScript archives)
// are refused with the advice to convert them once with txl-convert --trust-old-format.

#include <torch/torch.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "txl/config/config.h"
#include "txl/data/tokenizer.h"
#include "txl/models/transformer_lm.h"

namespace txl::models {

inline constexpr int kCheckpointVersion = 2;

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

// Everything a checkpoint file holds.
struct Checkpoint {
  config::ExperimentConfig config;  // the resolved experiment the model was trained with
  std::int64_t vocab_size = 0;      // the model's vocabulary (= the tokenizer's)
  std::string tokenizer_kind;       // data::Tokenizer::kind()
  std::string tokenizer_fingerprint;
  std::string tokenizer_bytes;     // data::Tokenizer::serialize()
  std::string corpus_fingerprint;  // of the corpus the model was trained on ("" = unknown)
  std::string train_state;         // JSON object of the trainer's state; "" = model only
  NamedTensors tensors;            // model/..., and the trainer's named tensors (CPU)

  // The tensor called `name`, or nullptr.
  const torch::Tensor* find(const std::string& name) const;
  // Every tensor whose name starts with `prefix`, in file order.
  NamedTensors with_prefix(const std::string& prefix) const;
  // The tokenizer the model was trained with, rebuilt from its bytes (fingerprint checked).
  std::shared_ptr<data::Tokenizer> tokenizer(const std::string& origin) const;
};

// A model-only checkpoint of `model` (weights copied to the CPU) with its experiment and
// tokenizer. The trainer adds its state to it.
Checkpoint model_checkpoint(const config::ExperimentConfig& config, const TransformerLM& model,
                            const data::Tokenizer& tokenizer,
                            const std::string& corpus_fingerprint = "");

// The bytes of a checkpoint file, and back. parse_checkpoint throws txl::Error naming `origin`
// for anything that is not an intact txl checkpoint of this format version: bad layout, bad
// JSON, a checksum mismatch, an invalid stored experiment, an old TorchScript checkpoint.
std::string serialize_checkpoint(const Checkpoint& checkpoint);
Checkpoint parse_checkpoint(std::string_view bytes, const std::string& origin);

// Atomic write, and read (throws txl::Error naming the path when missing or bad).
void write_checkpoint(const std::filesystem::path& path, const Checkpoint& checkpoint);
Checkpoint read_checkpoint(const std::filesystem::path& path);

// Copies the checkpoint's model/... tensors into `model`, after checking that their names,
// shapes and dtypes are exactly the model's: every difference is listed in one txl::Error.
void load_model_tensors(TransformerLM& model, const Checkpoint& checkpoint,
                        const std::string& origin);

struct LoadedModel {
  config::ExperimentConfig config;  // the experiment the model was trained with
  std::int64_t vocab_size = 0;
  TransformerLM model{nullptr};
  std::shared_ptr<data::Tokenizer> tokenizer;  // the one the model was trained with
  std::string corpus_fingerprint;              // of its training corpus ("" = unknown)
};

// Rebuilds the model and its tokenizer from a checkpoint alone, on `device`.
LoadedModel rebuild_model(const Checkpoint& checkpoint, const std::string& origin,
                          const torch::Device& device = torch::kCPU);
LoadedModel load_model(const std::filesystem::path& path,
                       const torch::Device& device = torch::kCPU);

namespace detail {
// The SHA-256 a file with this record and these tensors (the tokenizer tensor included) must
// carry in its metadata. For the fuzz target, which reseals mutated files to reach the checks
// behind the checksum.
std::string checkpoint_checksum(const std::string& record, const NamedTensors& tensors);
}  // namespace detail

}  // namespace txl::models
