#pragma once
// The language model: adaptive input -> n_layer decoder layers with segment-level recurrent
// memory -> adaptive softmax (docs/model.md sections 3-6). One class covers the ablation and the
// family: the position scheme of model.attn_type (modules/position_scheme.h: xl, shaw, vanilla,
// vanilla_learned, rope, alibi, t5; xl with mem_len 0 = rel_no_memory) and the memory
// mechanisms the settings ask for (models/memory_mechanism.h: Transformer-XL's memory of
// positions, which every model has, and the others of the registry), whose hooks the forward
// calls in turn.
//
// Memory is data, not module state: forward takes the caller's memory and returns the new one.
//
// Legend: B batch, T = Q query length (tokens of the segment), M memory length, K = M + Q keys,
// H heads, D head size, d model width, V vocabulary, L n_layer.

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "txl/config/config.h"
#include "txl/data/batch.h"
#include "txl/models/memory.h"
#include "txl/models/memory_mechanism.h"
#include "txl/modules/adaptive_embedding.h"
#include "txl/modules/adaptive_softmax.h"
#include "txl/modules/attention.h"
#include "txl/modules/decoder_layer.h"
#include "txl/modules/dropout.h"

namespace txl::models {

// How one forward pass looks back over what came before its segment: the memory it keeps and
// reads (length, zero start, cached keys and values, gradient through it) and
// the distances it encodes. Run-time settings; evaluation may use other values than training.
// (Not "context": in txl that word means the tokens a prediction sees.)
struct Lookback {
  int64_t mem_len = 0;       // positions kept in the returned memory (0 = none)
  int64_t clamp_len = -1;    // distances above it share one encoding; -1 = no clamp
  bool same_length = false;  // every query sees the last mem_len keys (needs mem_len > 0)
  int64_t ext_len = 0;       // the last ext_len positions of the segment are not memorised
  // Optional extra restriction, bool [Q, K] or [B, Q, K], true = allowed; ANDed with the causal,
  // padding and same_length masks (custom windows, tests).
  torch::Tensor extra_mask;
  // Evaluation: carry each layer's keys and values of the memory to the next segment (in
  // Memory::kv) instead of projecting the memory again. The same numbers; the key/value
  // projections then cover Q rows instead of K = M + Q (at long memory they are most of a
  // layer's work). Only without gradients, with weights that do not change between the
  // segments, and not with learned absolute positions (vanilla_learned), which change the
  // memory's keys every segment.
  bool cache_kv = false;
  // The memory a row starts from (model.mem_init): false = none (the paper code), true = mem_len
  // zero vectors in every layer that the first segment attends to (Hugging Face's TransfoXL).
  // With it, an empty memory and every reset row start from those zeros.
  bool zero_memory = false;
  // Back-propagation through segments (train.bptt_segments): the returned memory keeps its
  // graph, and a given memory may carry one, so that a later segment's loss reaches the
  // segments before it. The caller detaches the memory where the gradient is to stop. False =
  // the paper's stop-gradient (section 3.2).
  bool memory_grad = false;

  static Lookback from_config(const config::ModelConfig& config);
};

// What one forward pass reads besides the memory: a segment of B rows of T tokens.
struct Inputs {
  torch::Tensor tokens;      // int64 [B, T]
  torch::Tensor targets;     // int64 [B, T], or undefined: no loss (nll undefined)
  torch::Tensor input_mask;  // bool [B, T], true = a real token; undefined = all real
  torch::Tensor reset;       // bool [B], rows whose memory is cleared first (a new stream or
                             // document); undefined = none

  // tokens, targets, input_mask and reset of a batch (its target_mask is the caller's: the loss
  // is masked where it is summed).
  static Inputs of(const data::Batch& batch);
};

struct LMOutput {
  torch::Tensor nll;     // float [B, T]: -log p(target) per position (undefined without targets);
                         // the caller applies its target mask
  torch::Tensor logits;  // [B, T, V] log-probabilities, only when asked
  torch::Tensor hidden;  // [B, T, d] the final hidden states (before the output layer)
  Memory memory;         // the new memory, detached
  // A memory mechanism's own training loss (MechanismPart::write; compressive memory's
  // attention-reconstruction loss, whose gradient reaches only its compressors), a scalar.
  // Undefined when there is none.
  torch::Tensor aux_loss;
};

// The model's weights prepared for decoding (generation::IncrementalDecoder): every layer's and the
// softmax's, copies shared by every decoder of the model; prepare again after the weights
// change.
struct LMStep {
  std::vector<modules::DecoderLayerStep> layers;
  modules::SoftmaxStep softmax;
};

// A segment decoded a few tokens at a time (generation::IncrementalDecoder's segment mode), as
// TransformerLMImpl::begin_segment starts it: the rows the layers read before the segment's
// tokens (the mechanisms' prefix, the memory, the rows they put before the segment) hold slots
// 0 .. lead - 1 of the buffers, the segment's token i slot lead + i, and which slots each query
// sees are the forward's own masks (segment_inputs).
struct SegmentSteps {
  int64_t lead = 0;       // slots before the segment's first token
  int64_t q_len = 0;      // Q: the segment's tokens; 0 = no segment begun
  torch::Tensor blocked;  // bool [B, Q, lead + Q]: true where query i may not see slot j
  // Per layer, what its attention reads besides its keys (MechanismPart::context); empty = none.
  std::vector<modules::ContextHook> contexts;
  // Per row and query (row-major [B, Q]): the first slot it sees when it sees every slot from
  // there to its own, else -1 (empty unless begin_segment was asked for them).
  std::vector<int64_t> first;
};

class TransformerLMImpl : public torch::nn::Module {
 public:
  // Builds and initialises the model for a vocabulary of n_token words. Throws txl::Error
  // naming the `model.` key for an invalid configuration.
  TransformerLMImpl(const config::ModelConfig& config, int64_t n_token);

  // One segment: `in` (see Inputs), the memory as returned by the previous call (empty at the
  // start) and the run-time context. Throws txl::Error naming the value and the expectation on
  // bad input. `attention`, when given, receives every layer's attention weights, float
  // [B, H, Q', K], keys in the order the layer reads them (the mechanisms' prefix, memory, then
  // the segment with the rows they put around it; eval/attention_mass.h reads them).
  LMOutput forward(const Inputs& in, const Memory& memory, const Lookback& ctx,
                   bool want_logits = false, std::vector<torch::Tensor>* attention = nullptr);

  // The masks and position inputs of one segment, shared by every layer (public for tests).
  // key_mask bool [B, M + Q] over concat(memory, segment); prefix_keys bool [B, N] over keys
  // the mechanisms read before the memory (Segment::prefix_keys; undefined = none).
  // same_length's window and ctx.extra_mask apply to concat(memory, segment); the real prefix
  // keys are visible to every query. The rows the mechanisms put around the segment widen it
  // (MechanismPart::visibility): queries concat(before, segment, after), keys concat(prefix,
  // memory, before, segment, after).
  modules::AttentionInputs segment_inputs(int64_t q_len, int64_t m_len,
                                          const torch::Tensor& key_mask, const Lookback& ctx,
                                          torch::ScalarType dtype, torch::Device device,
                                          const torch::Tensor& prefix_keys = {});

  // Decoding with key/value buffers of `capacity` slots per layer, distances clamped at
  // clamp_len (-1 = none), and with zero_memory the key and value of the zero memory rows.
  // The packed weights of a step share one block of 2 MB pages where the OS gives them.
  LMStep prepare_step(int64_t capacity, int64_t clamp_len, bool zero_memory);
  // One decoding step of q new tokens per row, int64 [B, q]: the forward's embedding, position
  // and layers over kv (per layer [2, H, B, C, D], `used` slots filled; the step writes slots
  // used .. used + q - 1) as `mask` allows. `positions` int64 [B, q]: the tokens' absolute
  // positions (vanilla, vanilla_learned), else undefined. Returns the final hidden state of each
  // row's last token, [B, d]. Without gradients, in evaluation mode.
  // `contexts`: per layer what its attention reads besides its keys (SegmentSteps::contexts).
  torch::Tensor step(const LMStep& weights, const torch::Tensor& tokens,
                     const torch::Tensor& positions, const std::vector<torch::Tensor>& kv,
                     int64_t used, const modules::StepMask& mask,
                     const std::vector<modules::ContextHook>& contexts = {});
  // The slots of a decoding buffer that a segment of q_len tokens needs at most under ctx: the
  // mechanisms' prefix (MemoryMechanism::keys), the memory (ctx.mem_len and what an eviction
  // group keeps besides), the rows they put before the segment, and the segment.
  int64_t segment_capacity(const Lookback& ctx, int64_t q_len);
  // Begins decoding a segment of q_len tokens of B rows over `memory` (what the forwards of the
  // rows' earlier segments returned) under ctx: the hooks of the forward's start (start,
  // surround, the masks of segment_inputs), the keys and values of the rows the layers read
  // before the segment written into slots 0 .. lead - 1 of kv (per layer [2, H, B, C, D]), and
  // the rows the mechanisms put before the segment run through the layers. The segment's tokens
  // then go through `step` at slots lead + i; the forward of the whole segment gives the next
  // memory. With first_slots, SegmentSteps::first too (for the fused one-query kernel). Without
  // gradients, in evaluation mode. Throws txl::Error for a memory the forward would refuse, more
  // slots than the buffers hold, or a segment query that sees a later key (a step reads the
  // slots up to its own).
  SegmentSteps begin_segment(const LMStep& weights, const Memory& memory, const Lookback& ctx,
                             int64_t batch, int64_t q_len, const std::vector<torch::Tensor>& kv,
                             bool first_slots);
  // Log-probabilities [B, V] of the next token after final hidden states [B, d]; `softmax` is
  // LMStep::softmax made for the decoder's rows (AdaptiveLogSoftmaxImpl::for_rows).
  torch::Tensor step_log_prob(const modules::SoftmaxStep& softmax, const torch::Tensor& hidden);
  // Writes the zero memory's keys and values into slots 0 .. n-1 of every layer's buffer.
  void write_zero_memory(const LMStep& weights, const std::vector<torch::Tensor>& kv,
                         int64_t n) const;

  const config::ModelConfig& config() const { return config_; }
  // Whether Lookback::cache_kv is allowed: not with a position scheme whose layers add positions
  // to the memory anew each segment (PositionTraits::caches_memory_kv), nor with a memory
  // mechanism whose keys the cache does not hold (MechanismTraits::caches_kv).
  bool can_cache_kv() const;
  // Whether generation::IncrementalDecoder's memory mode expresses every memory mechanism of
  // the model with a memory of mem_len positions (MechanismPart::steps); otherwise it decodes
  // segment by segment (begin_segment).
  bool decodes_by_step(int64_t mem_len) const;
  // The position scheme of model.attn_type.
  const modules::PositionScheme& position_scheme() const { return *scheme_; }
  // The memory mechanisms of the model, in registry order (Transformer-XL's memory first).
  const std::vector<const MemoryMechanism*>& memory_mechanisms() const { return mechanisms_; }
  int64_t n_token() const { return n_token_; }
  Lookback default_lookback() const { return Lookback::from_config(config_); }
  const std::vector<modules::DecoderLayer>& layer_list() const { return layer_list_; }

  modules::AdaptiveEmbedding word_emb{nullptr};
  torch::nn::ModuleList layers{nullptr};  // L DecoderLayer
  modules::AdaptiveLogSoftmax crit{nullptr};
  torch::nn::LayerNorm final_norm{nullptr};  // pre_norm with model.final_norm only
  modules::Dropout drop{nullptr};

 private:
  void check_inputs(const Inputs& in, const Memory& memory, const Lookback& ctx) const;
  // Lookback::cache_kv: allowed for this model, without gradients, memory.kv of every layer.
  void check_cache_kv(const Memory& memory) const;
  // A segment of B rows of q_len tokens over `given` under ctx, its mechanisms' start hooks run.
  Segment open_segment(const Memory& given, const Lookback& ctx, int64_t batch, int64_t q_len,
                       const torch::Tensor& reset, const torch::Tensor& input_mask,
                       torch::Device device);
  // Which keys of concat(prefix, memory, before, segment, after) the queries concat(before,
  // segment, after) see, bool [B or 1, Q', K'] (see segment_inputs).
  torch::Tensor segment_visibility(int64_t q_len, int64_t m_len, const torch::Tensor& key_mask,
                                   const Lookback& ctx, torch::Device device,
                                   const torch::Tensor& prefix_keys) const;
  // A decoding step's layers over x [B, q, d] (see step) -> [B, q, d].
  torch::Tensor step_layers(const LMStep& weights, torch::Tensor x,
                            const std::vector<torch::Tensor>& kv, int64_t used,
                            const modules::StepMask& mask, const torch::Tensor& positions,
                            const std::vector<modules::ContextHook>& contexts);
  // What layer l's attention reads besides its keys: its mechanisms' hooks, in turn.
  modules::ContextHook layer_context(const Segment& segment, size_t l) const;
  // Embedded tokens x [S..., d] with the positions the scheme adds to them (its
  // ModelPositions::embed): positions int64 of shape S or a shape that broadcasts to it.
  torch::Tensor with_positions(const torch::Tensor& x, const torch::Tensor& positions) const;
  // The layers over x [B, rows, d] (the segment's rows and those the mechanisms put around
  // them), each reading the rows its mechanisms put before; fills segment.hiddens (and kv).
  torch::Tensor run_layers(torch::Tensor x, Segment& segment,
                           const modules::AttentionInputs& inputs,
                           std::vector<torch::Tensor>* attention);

  config::ModelConfig config_;
  int64_t n_token_;
  const modules::PositionScheme* scheme_;
  modules::AttentionOptions attention_;                 // every layer's attention settings
  std::unique_ptr<modules::ModelPositions> positions_;  // the scheme's model part, or none
  std::vector<modules::DecoderLayer> layer_list_;
  std::vector<const MemoryMechanism*> mechanisms_;  // those of the registry the model has
  std::vector<std::unique_ptr<MechanismPart>> mechanism_parts_;  // theirs, in the same order
};
TORCH_MODULE(TransformerLM);

}  // namespace txl::models
