#pragma once
// Memory mechanisms: what a model keeps of one segment for the next (docs/model.md, "Adding a
// member"). A mechanism is one file of src/models/memory/ and one line of its registry
// (src/models/memory/registry.cpp). Every model has the first, Transformer-XL's memory of
// positions (xl_cache.cpp); the others join a model when its settings ask for them
// (compressive.cpp, memory_tokens.cpp).
//
// A mechanism has, besides its name:
//   - its part of the Memory and how a checkpoint stores it (PartLayout);
//   - traits the rest of txl may know of it (MechanismTraits);
//   - a part in a model (MechanismPart): its parameters, registered on the model under the
//     names checkpoints carry, and its hooks in a segment's forward, called in registry order:
//       check         the part of the memory it is given
//       start         before the layers: the memory they read, which keys are real, keys put
//                     before the memory (visible to every query)
//       surround      rows put around the segment's rows (read before, written after)
//       visibility    which keys those rows see and are seen by
//       layer_memory  the rows a layer reads before the segment's
//       context       what a layer's attention reads besides its keys (a kNN memory's)
//       finish        after the layers: the segment's own rows back
//       write         its part of the next memory
//
// A layer reads its keys in this order:
//   prefix (N, start's) | memory (M) | before (surround's) | segment (Q) | after (surround's)
//
// Legend: B batch, Q segment length, M memory length, N prefix keys, d model width, L layers.

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "txl/config/config.h"
#include "txl/models/memory.h"
#include "txl/modules/decoder_layer.h"
#include "txl/modules/position_scheme.h"

namespace txl::models {

struct Lookback;
class TransformerLMImpl;

// What the rest of txl may know of a mechanism without knowing its name.
struct MechanismTraits {
  // Lookback::cache_kv may carry the memory's keys and values to the next segment: false when
  // the mechanism's keys are not the memory's (compressed rows, memory tokens).
  bool caches_kv = true;
  // Every key a query reads sits at a distance from it (eval/attention_mass.h).
  bool keys_at_distance = true;
};

// One segment's forward as the mechanisms see it: what it was given, and what their hooks fill
// in, in order.
struct Segment {
  // Given.
  int64_t batch = 0, q_len = 0;
  const Lookback* ctx = nullptr;
  const Memory* given = nullptr;  // the memory as the caller gave it
  torch::Tensor reset;            // bool [B]: rows whose memory is forgotten; undefined = none
  torch::Tensor input_mask;       // bool [B, Q]; undefined = every token real
  torch::TensorOptions options;   // the weights' dtype on the tokens' device
  std::vector<modules::DecoderLayer>* layers = nullptr;  // the model's
  bool training = false;                                 // the model is in training mode
  // start's.
  Memory memory;              // the memory the layers read (xl_cache: zero memory made here)
  torch::Tensor key_mask;     // bool [B, M + Q]: real keys of concat(memory, segment)
  torch::Tensor prefix_keys;  // bool [B, N]: real keys before the memory; undefined = none
  // surround's: rows before and after the segment's in x.
  int64_t before = 0, after = 0;
  // The layers': each layer's input at the segment's rows [B, Q, d], and with cache_kv each
  // layer's keys and values [2, H, B, M + Q, D].
  std::vector<torch::Tensor> hiddens, kv;
  // Positions leave the memory of positions in whole groups of this many (the least common
  // multiple of the mechanisms' eviction_group).
  int64_t group = 1;
  // write's: positions [0, evicted) of concat(memory, segment) left the memory of positions.
  int64_t evicted = 0;
};

// A mechanism's part in one model.
class MechanismPart {
 public:
  virtual ~MechanismPart() = default;
  // Throws txl::Error when the part of `memory` it reads does not fit a batch of `batch` rows
  // on `device` under `ctx`.
  virtual void check(const Memory& /*memory*/, int64_t /*batch*/, const Lookback& /*ctx*/,
                     const torch::Device& /*device*/) const {}
  virtual void start(Segment& /*segment*/) const {}
  // x [B, rows, d] -> [B, before + rows + after, d]; adds its counts to segment.before, .after.
  virtual torch::Tensor surround(const torch::Tensor& x, Segment& /*segment*/) const { return x; }
  // The visibility `allowed` bool [B', rows, M + rows] of concat(memory, rows), rows the
  // queries so far, widened by the rows it surrounded them with. key_mask bool [B, M + Q]
  // (undefined = all real).
  virtual torch::Tensor visibility(const torch::Tensor& allowed, const torch::Tensor& /*key_mask*/,
                                   int64_t /*q_len*/, int64_t /*m_len*/,
                                   torch::Device /*device*/) const {
    return allowed;
  }
  // The rows layer `l` reads before the segment's, given those of the mechanisms before it
  // ([B, M', d], undefined = none yet).
  virtual torch::Tensor layer_memory(const Segment& /*segment*/, size_t /*l*/,
                                     const torch::Tensor& rows, torch::ScalarType /*dtype*/) const {
    return rows;
  }
  // What layer `l`'s attention reads besides its keys (modules::ContextHook), in the forward and
  // in decoding alike; empty = nothing.
  virtual modules::ContextHook context(const Segment& /*segment*/, size_t /*l*/) const {
    return {};
  }
  // The last layer's output x [B, before + Q + after, d] -> the rows it added taken away (what
  // it keeps of them goes to `next`).
  virtual torch::Tensor finish(const torch::Tensor& x, const Segment& /*segment*/,
                               Memory& /*next*/) const {
    return x;
  }
  // Writes its part of `next`; a training loss of its own goes to *aux_loss.
  virtual void write(Segment& /*segment*/, Memory& /*next*/, torch::Tensor* /*aux_loss*/) const {}
  // Positions leave the memory of positions in whole groups of this many under `ctx`.
  virtual int64_t eviction_group(const Lookback& /*ctx*/) const { return 1; }
  // Whether generation::IncrementalDecoder's memory mode (each layer's keys and values carried
  // in its buffer from segment to segment, a slot per time step) expresses it with a memory of
  // mem_len positions; otherwise the decoder begins every segment over the memory the forward
  // returned (its segment mode, TransformerLMImpl::begin_segment).
  virtual bool steps(int64_t /*mem_len*/) const { return true; }
};

class MemoryMechanism {
 public:
  virtual ~MemoryMechanism() = default;
  virtual std::string_view name() const = 0;
  virtual const PartLayout& layout() const = 0;
  virtual MechanismTraits traits() const = 0;
  // Whether a model of `config` has it.
  virtual bool used_by(const config::ModelConfig& config) const = 0;
  // Throws txl::Error naming the `model.` key of a setting it cannot work with.
  virtual void check(const config::ModelConfig& /*config*/,
                     const modules::PositionScheme& /*scheme*/) const {}
  // What it costs a model of `config` with a memory of mem_len positions (mem_len as the run
  // uses it, which may differ from config.mem_len): the keys it adds to every query's (besides
  // the memory's and the segment's), the FLOPs it adds per token and layer in a forward, and the
  // rows of d numbers it keeps per batch row between segments.
  virtual int64_t keys(const config::ModelConfig& /*config*/, int64_t /*mem_len*/) const {
    return 0;
  }
  virtual double flops_per_token(const config::ModelConfig& /*config*/, int64_t /*mem_len*/) const {
    return 0;
  }
  virtual int64_t state_rows(const config::ModelConfig& config, int64_t mem_len) const = 0;
  // Its part of `model` (of `config`), its parameters registered on the model and drawn with
  // `init`.
  virtual std::unique_ptr<MechanismPart> for_model(TransformerLMImpl& model,
                                                   const config::ModelConfig& config,
                                                   const modules::InitOptions& init) const = 0;

  // The members of the family it makes, as txl-bench --members times them: a name, the change
  // in words, and what it sets on an experiment with Transformer-XL's positions and a memory.
  struct Example {
    std::string name;
    std::string change;
    std::function<void(config::ExperimentConfig&)> apply;
  };
  virtual std::vector<Example> examples() const { return {}; }
};

// `t` on `device`: itself when it is there already (no call to count as a move, see
// util/device_traffic.h), else a copy. For the hooks' masks and resets.
inline torch::Tensor on_device(const torch::Tensor& t, const torch::Device& device) {
  return t.device() == device ? t : t.to(device);
}

// The registry, Transformer-XL's memory of positions first.
const std::vector<const MemoryMechanism*>& memory_mechanisms();
// The rows of d numbers a model of `config` keeps per batch row between segments with a memory
// of mem_len positions: the sum of its mechanisms' (MemoryMechanism::state_rows). 0 = the model
// carries nothing from one segment to the next.
int64_t memory_state_rows(const config::ModelConfig& config, int64_t mem_len);

}  // namespace txl::models
