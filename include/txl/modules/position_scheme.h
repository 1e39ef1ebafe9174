#pragma once
// Position schemes: how attention knows where a token sits (docs/model.md, "Adding a member").
// A scheme is one file of src/modules/positions/ and one line of its registry
// (src/modules/positions/registry.cpp), the one list of names that model.attn_type takes.
//
// A scheme has a part at each level of the model, each optional but the attention's:
//   ModelPositions      the model's: positions added to the embedded tokens (vanilla's
//                       sinusoid), parameters shared by every layer (xl's u and v), what it adds
//                       to a segment's position inputs (xl's dropout on R)
//   LayerPositions      a layer's: positions added to the layer's input and memory
//                       (vanilla_learned's table per layer)
//   AttentionPositions  the attention's: its parameters (xl's W_R, Shaw's table), the scores of a
//                       segment's queries over its keys, and of a decoding step's over a buffer
// Parameters are registered on the module of their level under the names checkpoints carry
// (u_bias, layers.N.pos_emb.weight, layers.N.attn.r_net.weight), in the order the model has
// always drawn them, so that a seed gives the same weights.
//
// Positions over memory: key j of concat(memory, segment) sits at position j and query i at
// K - Q + i; a decoder's buffer slot j stands for position j the same way.
//
// Legend: B batch, Q queries, K keys, H heads, D head size, d model width, C decoding slots,
// q queries of a decoding step.

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "txl/modules/dropout.h"
#include "txl/modules/param_init.h"

namespace txl::modules {

// What the rest of txl may know of a scheme without knowing its name.
struct PositionTraits {
  // Positions added to the input and restarting at 0 in every segment, so a memory of earlier
  // segments would repeat them (paper 3.3): such a scheme carries no memory, and decoding
  // slides a window over the text.
  bool absolute = false;
  // model.clamp_len caps its distances (a scheme without distances refuses a clamp).
  bool clampable = true;
  // A memory's keys and values may be carried to the next segment (Lookback::cache_kv): false
  // when the layer adds positions to the memory anew every segment.
  bool caches_memory_kv = true;
  // Query products with a position encoding per key besides the content's (Transformer-XL's and
  // Shaw's terms): 0 or 1; models/flops.cpp counts 2 H D FLOPs per key for each.
  int position_products = 0;
  // The decoding step of one query per row may go through ops::attend_cached, which knows
  // content scores plus encodings by distance (PositionStep::by_distance) with biases u, v.
  bool fused_step = false;

  bool carries_memory() const { return !absolute; }
};

// The settings a scheme's parts read (model.* keys).
struct PositionOptions {
  std::string scheme = "xl";  // model.attn_type: a name of the registry
  bool own_biases = false;    // xl: every layer has its own u, v (model.untie_r)
  // The schemes' own settings by their model.* key (config::position_settings), e.g. Shaw's
  // max_rel_dist: each scheme reads its own.
  std::map<std::string, int64_t> settings;

  // settings[key], or `fallback` (the model's default) when it is not given.
  int64_t setting(const std::string& key, int64_t fallback) const {
    const auto it = settings.find(key);
    return it == settings.end() ? fallback : it->second;
  }
};

// The sizes of the attention the positions serve, with the scheme's settings.
struct PositionShape {
  int64_t d_model = 0, n_head = 0, d_head = 0;
  PositionOptions options;
  InitOptions init;
};

// The positions of Q queries over K keys, shared by every layer: of a segment (the forward) or
// of a decoder's C slots (Q = 1, K = C). What `table` holds is the scheme's own (R [K, d] for
// xl, clipped distances int64 [K] for shaw, turns [2, K, D] for rope, distances [Q, K] for
// alibi); u and v are xl's shared biases [H, D] (undefined where each layer has its own).
struct PositionInputs {
  torch::Tensor table;
  torch::Tensor u, v;
};

// A layer's positions prepared for decoding over C slots (copies, made without gradient).
struct PositionStep {
  torch::Tensor table;        // the scheme's own (xl, shaw: encodings [H, D, C] of distances
                              // C-1 .. 0; rope: turns [2, C, D] of slots 0 .. C-1; alibi: the
                              // heads' slopes [H, 1, 1, 1])
  torch::Tensor by_distance;  // for ops::attend_cached: encodings [H, C, D] of distances
                              // 0 .. C-1 (undefined: content scores alone)
  torch::Tensor u, v;         // for ops::attend_cached too: [H, 1, 1, D] scaled by 1/sqrt(D)
  int64_t clamp_len = -1;     // distances above it count as it (-1 = no clamp)
};

// The attention's part of a scheme.
class AttentionPositions {
 public:
  virtual ~AttentionPositions() = default;
  virtual void reset_parameters(const InitOptions& /*init*/) {}
  // Scores [H, B, Q, K] before masking, scaled by `scale`: queries q [H, B, Q, D] (unscaled)
  // over keys k [H, B, K, D], query i at position K - Q + i.
  virtual torch::Tensor scores(const torch::Tensor& q, const torch::Tensor& k,
                               const PositionInputs& in, double scale) = 0;
  // Decoding over C slots: the tables of `slots` (the scheme's inputs for Q = 1 over K = C).
  virtual PositionStep prepare_step(const PositionInputs& slots, int64_t clamp_len,
                                    double scale) = 0;
  // Scores [H, B, q, K] of a step's queries [H, B, q, D] (scaled) at slots used .. used + q - 1
  // over keys [H, B, K, D] (K = used + q), as the buffer holds them.
  virtual torch::Tensor step_scores(const PositionStep& w, const torch::Tensor& q,
                                    const torch::Tensor& k, int64_t used) const = 0;
};

// A layer's part: positions added to what the layer reads.
class LayerPositions {
 public:
  virtual ~LayerPositions() = default;
  virtual void reset_parameters(const InitOptions& /*init*/) {}
  // The forward: the layer's input x [B, Q, d] and memory [B, M, d] (undefined when M = 0),
  // positions counted over concat(memory, segment).
  virtual void add(torch::Tensor& x, torch::Tensor& memory) = 0;
  // A decoding step: x [B, q, d] at positions int64 [B, q].
  virtual torch::Tensor add_at(const torch::Tensor& x, const torch::Tensor& positions) = 0;
};

// The model's part.
class ModelPositions {
 public:
  virtual ~ModelPositions() = default;
  // Embedded tokens x [S..., d] at positions int64 of shape S (or broadcasting to it).
  virtual torch::Tensor embed(const torch::Tensor& x, const torch::Tensor& /*positions*/) const {
    return x;
  }
  // Completes the inputs of a segment or of decoding slots with the model's shared parameters,
  // and a segment's with the model's dropout (`drop`; nullptr for decoding slots).
  virtual void complete(PositionInputs& /*in*/, Dropout* /*drop*/) const {}
};

class PositionScheme {
 public:
  virtual ~PositionScheme() = default;
  virtual std::string_view name() const = 0;
  virtual PositionTraits traits() const = 0;
  // Throws txl::Error naming the model. key of a setting the scheme cannot take.
  virtual void check(const PositionShape& /*shape*/) const {}
  // The inputs of Q queries over K keys, distances clamped at clamp_len (-1 = none).
  virtual PositionInputs inputs(const PositionShape& /*shape*/, int64_t /*q_len*/,
                                int64_t /*k_len*/, int64_t /*clamp_len*/,
                                torch::ScalarType /*dtype*/, torch::Device /*device*/) const {
    return {};
  }
  // The parts, registering their parameters on the given module; nullptr = none at that level.
  virtual std::unique_ptr<ModelPositions> for_model(torch::nn::Module& /*model*/,
                                                    const PositionShape& /*shape*/) const {
    return nullptr;
  }
  virtual std::unique_ptr<LayerPositions> for_layer(torch::nn::Module& /*layer*/,
                                                    const PositionShape& /*shape*/) const {
    return nullptr;
  }
  virtual std::unique_ptr<AttentionPositions> for_attention(torch::nn::Module& attn,
                                                            const PositionShape& shape) const = 0;
};

// The scheme called `name`; throws txl::Error naming the registry's names otherwise.
const PositionScheme& position_scheme(std::string_view name);
// Every scheme, in the registry's order.
const std::vector<const PositionScheme*>& position_schemes();
// The registry's names joined for messages: "xl | shaw | ...".
std::string position_scheme_choices();
// The schemes that carry memory (PositionTraits::carries_memory), in the registry's order.
const std::vector<const PositionScheme*>& memory_schemes();
// Their names joined for messages: "xl, shaw, ...".
std::string memory_scheme_names();

// Scores of queries over keys with a position term by distance (Transformer-XL's appendix B,
// Shaw's): q_content . k_j + q_position . r_j', queries [H, B, Q, D] (scaled), keys [H, B, K, D],
// r [H, D, K] the encodings of distances K-1 .. 0 (the last query's), realigned for the earlier
// queries; r undefined: the content term alone. [H, B, Q, K].
torch::Tensor distance_scores(const torch::Tensor& q_content, const torch::Tensor& q_position,
                              const torch::Tensor& keys, const torch::Tensor& r);

}  // namespace txl::modules
