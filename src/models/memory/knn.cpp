// A kNN memory (Memorizing Transformers, Wu et al. 2022; docs/model.md), model.knn_layer = l > 0:
// layer l attends, besides its own keys, to the model.knn_topk keys of a store nearest to each
// query (largest scaled inner product, per head): the store holds the layer's inputs at the
// model.knn_size most recent positions that left the memory of positions (every position of
// the segment when there is none), and a reset row forgets its store. Each attention has its own
// softmax, and a learned gate per head mixes their outputs, before W_o:
//   out_h = g_h knn_h + (1 - g_h) local_h,   g_h = sigmoid(knn_gate_h)
// A row with nothing stored yet reads its local attention alone. The search is exact.
// The store takes no gradient, and its keys and values are projected with the layer's weights
// as they are when read (without gradient to them): never stale, where the paper keeps the keys
// and values the weights of their time made. Nothing positional enters the retrieved keys.
// Its part: "knn", one tensor [B, S, d] for the model, detached, with a mask [B, S].
//
// Legend: B batch, Q queries, S stored rows, k retrieved per query, H heads, D head size.
#include <algorithm>

#include "txl/models/memory_mechanism.h"
#include "txl/models/transformer_lm.h"
#include "txl/util/error.h"

namespace txl::models::memory {

const MemoryMechanism& knn();

namespace {

constexpr const char* kStore = "knn";

// The gated mix of a layer's attention with its top-k over a store: queries q [H, B, Q, D]
// (scaled), the layer's own context [H, B, Q, D]; the store's keys and values [2, H, B, S, D],
// which rows are visible, bool [B, S]; the gate's logits [H].
torch::Tensor mix_nearest(const torch::Tensor& q, const torch::Tensor& local,
                          const torch::Tensor& store, const torch::Tensor& visible,
                          const torch::Tensor& gate, int64_t topk) {
  const auto keys = store[0].to(q.scalar_type()), values = store[1].to(q.scalar_type());
  const auto hidden = visible.logical_not().unsqueeze(0).unsqueeze(2);  // [1, B, 1, S]
  // Hidden rows score far below any real one but finite: fewer than k visible rows leave the
  // rest weighing nothing, and a row with none averages (its gate closes below) without NaN.
  auto scores = torch::matmul(q, keys.transpose(-1, -2)).masked_fill(hidden, -1e30);  // [H,B,Q,S]
  const int64_t k = std::min<int64_t>(topk, scores.size(-1));
  auto [top, index] = scores.topk(k, -1);  // [H, B, Q, k]
  auto weights = torch::softmax(top, -1);  // [H, B, Q, k]
  const int64_t heads = q.size(0), batch = q.size(1), queries = q.size(2), d = q.size(3);
  const auto picked = values.unsqueeze(2)
                          .expand({heads, batch, queries, values.size(2), d})
                          .gather(3, index.unsqueeze(-1).expand({heads, batch, queries, k, d}));
  const auto retrieved = (weights.unsqueeze(-1) * picked).sum(3);  // [H, B, Q, D]
  const auto any = visible.any(1).to(q.scalar_type()).view({1, batch, 1, 1});
  const auto g = torch::sigmoid(gate).to(q.scalar_type()).view({heads, 1, 1, 1}) * any;
  return g * retrieved + (1 - g) * local;  // [H, B, Q, D]
}

class Knn final : public MechanismPart {
 public:
  Knn(TransformerLMImpl& model, const config::ModelConfig& config)
      : layer_(static_cast<size_t>(config.knn_layer - 1)),
        topk_(config.knn_topk),
        size_(config.knn_size),
        d_(config.d_model) {
    gate_ = model.register_parameter("knn_gate", torch::zeros({config.n_head}));
  }

  void check(const Memory& memory, int64_t batch, const Lookback& /*ctx*/,
             const torch::Device& device) const override {
    if (!memory.has(kStore)) return;
    check_part(memory.part(kStore), knn().layout(), {1, batch, -1, size_, d_, false}, device);
  }

  modules::ContextHook context(const Segment& s, size_t l) const override {
    if (l != layer_ || store_length(s) == 0) return {};
    const auto& part = s.given->part(kStore);
    const auto visible = visible_rows(s);                                 // [B, S]
    const auto store = (*s.layers)[l]->keys_values(part.layers.front());  // [2, H, B, S, D]
    return [store, visible, gate = gate_, topk = topk_](const torch::Tensor& q,
                                                        const torch::Tensor& local) {
      return mix_nearest(q, local, store, visible, gate, topk);
    };
  }

  // The store after the segment: the given one (a reset row's forgotten) and the layer's inputs
  // at the positions that left the memory of positions, the last knn_size kept.
  void write(Segment& s, Memory& next, torch::Tensor* /*aux_loss*/) const override {
    const Lookback& ctx = *s.ctx;
    const int64_t m_len = s.memory.length();
    const int64_t left = ctx.mem_len == 0 ? s.q_len : s.evicted;
    std::vector<torch::Tensor> rows, masks;
    if (store_length(s) > 0) {
      rows.push_back(s.given->part(kStore).layers.front());
      masks.push_back(visible_rows(s));
    }
    if (left > 0) {
      const auto& hidden = s.hiddens[layer_];  // [B, Q, d]
      if (ctx.mem_len == 0) {
        rows.push_back(hidden.detach());
        masks.push_back(s.key_mask.narrow(1, m_len, s.q_len));
      } else {
        const auto all = m_len > 0 ? torch::cat({s.memory.layers[layer_], hidden}, 1) : hidden;
        rows.push_back(all.narrow(1, 0, left).detach().to(hidden.scalar_type()));
        masks.push_back(s.key_mask.narrow(1, 0, left));
      }
    }
    if (rows.empty()) return;
    auto store = torch::cat(rows, 1), mask = torch::cat(masks, 1);  // [B, S', d], [B, S']
    const int64_t keep = std::min<int64_t>(size_, store.size(1));
    MemoryPart out;
    out.layers = {store.narrow(1, store.size(1) - keep, keep)};
    out.mask = mask.narrow(1, mask.size(1) - keep, keep);
    next.parts[kStore] = std::move(out);
  }

  bool steps(int64_t /*mem_len*/) const override { return false; }

 private:
  static int64_t store_length(const Segment& s) { return s.given->part(kStore).length(); }
  // bool [B, S]: the stored rows a segment reads (a reset row's none).
  static torch::Tensor visible_rows(const Segment& s) {
    auto mask = on_device(s.given->part(kStore).mask, s.options.device());
    if (!s.reset.defined()) return mask;
    return mask.logical_and(on_device(s.reset, s.options.device()).logical_not().unsqueeze(1));
  }

  size_t layer_;
  int64_t topk_, size_, d_;
  torch::Tensor gate_;  // [H] the gate's logits
};

class KnnMechanism final : public MemoryMechanism {
 public:
  std::string_view name() const override { return "knn"; }
  const PartLayout& layout() const override {
    static const PartLayout kLayout{kStore, false,       "knn_mask", true,
                                    false,  "kNN store", "S",        "model.knn_layer"};
    return kLayout;
  }
  MechanismTraits traits() const override {
    return {/*caches_kv=*/false, /*keys_at_distance=*/false};
  }
  bool used_by(const config::ModelConfig& config) const override { return config.knn_layer != 0; }
  void check(const config::ModelConfig& config,
             const modules::PositionScheme& scheme) const override {
    TXL_CHECK(config.knn_layer >= 1 && config.knn_layer <= config.n_layer,
              "model.knn_layer = ", config.knn_layer,
              " must name a layer, 1 .. n_layer = ", config.n_layer, " (0 = no kNN memory)");
    TXL_CHECK(config.knn_topk >= 1, "model.knn_topk = ", config.knn_topk, " must be >= 1");
    TXL_CHECK(config.knn_size >= config.knn_topk, "model.knn_size = ", config.knn_size,
              " must be >= model.knn_topk = ", config.knn_topk);
    TXL_CHECK(!scheme.traits().absolute, "model.knn_layer = ", config.knn_layer,
              ": a kNN memory stores what leaves a memory of segments and needs relative "
              "positions (",
              modules::memory_scheme_names(), ")");
  }
  // Its layer's queries score every stored row and mix k values (2 H D FLOPs per row each), and
  // every stored row's keys and values are projected once a segment (4 d H D each, over Q
  // tokens); per token and layer.
  double flops_per_token(const config::ModelConfig& config, int64_t /*mem_len*/) const override {
    const double hd = static_cast<double>(config.n_head) * config.d_head;
    const double per_token = 2.0 * hd * (config.knn_size + config.knn_topk) +
                             4.0 * config.d_model * hd * config.knn_size / config.tgt_len;
    return per_token / config.n_layer;
  }
  int64_t state_rows(const config::ModelConfig& config, int64_t /*mem_len*/) const override {
    return config.knn_size;
  }
  std::unique_ptr<MechanismPart> for_model(TransformerLMImpl& model,
                                           const config::ModelConfig& config,
                                           const modules::InitOptions& /*init*/) const override {
    return std::make_unique<Knn>(model, config);
  }
  // In the second layer (the last of one) beside xl's memory: the 32 nearest of the 4 M latest
  // positions that left it.
  std::vector<Example> examples() const override {
    return {{"knn", "attn_type xl, knn_layer 2, knn_topk 32, knn_size 4 mem_len",
             [](config::ExperimentConfig& c) {
               c.model.attn_type = config::AttnType::kXl;
               c.model.knn_layer = std::min(2, c.model.n_layer);
               c.model.knn_size = std::max(32, 4 * c.model.mem_len);
               c.model.knn_topk = 32;
             }}};
  }
};

}  // namespace

const MemoryMechanism& knn() {
  static const KnnMechanism kMechanism;
  return kMechanism;
}

}  // namespace txl::models::memory
