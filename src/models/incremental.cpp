#include "txl/models/incremental.h"

#include <algorithm>
#include <cmath>

#include "txl/ops/cached_attention.h"
#include "txl/ops/layer_norm.h"
#include "txl/ops/masks.h"
#include "txl/ops/matvec.h"
#include "txl/ops/rel_shift.h"
#include "txl/ops/row_reductions.h"
#include "txl/ops/sinusoid.h"
#include "txl/ops/vector_loops.h"
#include "txl/util/blas_threads.h"
#include "txl/util/error.h"
#include "txl/util/huge_pages.h"

namespace txl::models {

namespace {

// Products of at most this many rows go through the packed weights (a generated token's B
// rows); more rows (a prompt's segments of B x tgt_len) through LibTorch's, which reuses each
// block of the weight across many rows.
constexpr int64_t kPackedRows = 64;

// x [..., in] times w [out, in]^T (+ bias [out]) -> [..., out]. A single row goes through a
// matrix-vector product: for one row OpenBLAS's sgemm is 2-3x slower than its sgemv. Where the
// BLAS has no threads of its own (MKL; OpenBLAS on one thread) it is txl's (ops::matvec), on
// LibTorch's threads: MKL's is slow on AMD CPUs, OpenBLAS's on one thread slower than on two.
torch::Tensor times(const torch::Tensor& x, const torch::Tensor& w,
                    const torch::Tensor& bias = {}) {
  auto sizes = x.sizes().vec();
  sizes.back() = w.size(0);
  // Rows as a matrix: LibTorch's linear takes a 3-d input without bias through matmul's
  // reshapes (17 us a call at 16 rows).
  if (x.numel() != x.size(-1)) {
    return torch::linear(x.reshape({-1, x.size(-1)}), w, bias).view(sizes);  // [..., out]
  }
  auto row = x.reshape({-1}).contiguous();  // [in]
  torch::Tensor y;                          // [out]
  if (ops::vector_loops_take(w) && w.is_contiguous() && !util::blas_has_own_threads()) {
    y = ops::matvec(w, row, bias.defined() ? bias.contiguous() : bias);
  } else {
    y = bias.defined() ? torch::addmv(bias, w, row) : torch::mv(w, row);
  }
  return y.view(sizes);  // [..., out]
}

// norm(x + y) for x, y [B, q, d]: in one pass of txl's loops on the CPU (ops::add_layer_norm),
// else LibTorch's add and layer norm.
torch::Tensor add_norm(torch::nn::LayerNorm norm, const torch::Tensor& x,
                       const torch::Tensor& y) {
  if (!ops::vector_loops_take(x) || !x.is_contiguous() || !y.is_contiguous()) return norm(x + y);
  return ops::add_layer_norm(x, y, norm->weight, norm->bias, norm->options.eps());  // [B, q, d]
}

// Per layer, the relative encodings of every distance C-1 .. 0 (xl: projected by r_net; shaw:
// the relative keys), [H, D, C], and the xl query biases scaled by 1/sqrt(D), [H, 1, 1, D].
void relative_tables(const TransformerLM& model, DecoderWeights& w) {
  const auto& c = model->config();
  const auto opts = model->crit->table(0).options();
  const int64_t n_head = c.n_head, d_head = c.d_head, capacity = w.capacity;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d_head));
  // Distances C-1 .. 0: the last K columns are those of K keys (query last).
  const auto dist = ops::relative_distances(capacity, w.options.clamp_len, opts.device());  // [C]
  for (auto layer : model->layer_list()) {
    auto attn = layer->attn;
    if (c.attn_type == config::AttnType::kXl) {
      auto rel = ops::sinusoid_encoding(dist.to(opts.dtype().toScalarType()), c.d_model);  // [C, d]
      w.table.push_back(attn->r_net(rel)  // [C, H D]
                            .view({capacity, n_head, d_head})
                            .permute({1, 2, 0})
                            .contiguous());  // [H, D, C]
      const auto& u = attn->u_bias.defined() ? attn->u_bias : model->u_bias;  // [H, D]
      const auto& v = attn->v_bias.defined() ? attn->v_bias : model->v_bias;  // [H, D]
      w.u.push_back((u * scale).view({n_head, 1, 1, d_head}));                 // [H, 1, 1, D]
      w.v.push_back((v * scale).view({n_head, 1, 1, d_head}));                 // [H, 1, 1, D]
    } else if (c.attn_type == config::AttnType::kShaw) {
      w.table.push_back(attn->rel_key(dist.clamp_max(c.max_rel_dist))  // [C, H, D]
                            .permute({1, 2, 0})
                            .contiguous());  // [H, D, C]
    }
    if (!w.table.empty()) {
      w.by_distance.push_back(w.table.back().flip(2).transpose(1, 2).contiguous());  // [H, C, D]
    }
  }
}

// The layers' and the vocabulary's weights packed for ops::linear_packed, where the CPU has
// its AVX-512 kernel.
void pack_weights(const TransformerLM& model, DecoderWeights& w) {
  if (!ops::packed_kernel_vectorised() || !ops::packed_takes(w.qkv.front())) return;
  const auto layers = model->layer_list();
  for (size_t l = 0; l < layers.size(); ++l) {
    const auto& attn = layers[l]->attn;
    const auto& ff = layers[l]->ff;
    PackedLayer p;
    p.qkv = ops::pack_weight(w.qkv[l]);                        // [3 H D, d]
    p.out = ops::pack_weight(attn->out->weight);               // [d, H D]
    p.fc1 = ops::pack_weight(ff->fc1->weight, ff->fc1->bias);  // [d_inner, d]
    p.fc2 = ops::pack_weight(ff->fc2->weight, ff->fc2->bias);  // [d, d_inner]
    w.packed.push_back(std::move(p));
  }
  if (w.out_weight.defined()) w.packed_vocab = ops::pack_weight(w.out_weight);  // [V, d]
  // One block of 2 MB pages for every panel a generated token streams (util/huge_pages.h).
  std::vector<torch::Tensor*> panels;
  for (auto& p : w.packed) {
    for (auto* weight : {&p.qkv, &p.out, &p.fc1, &p.fc2}) panels.push_back(&weight->panels);
  }
  if (w.packed_vocab.defined()) panels.push_back(&w.packed_vocab.panels);
  util::share_huge_block(panels);
}

// Per layer the key and value of a zero vector of memory, [2, H, 1, 1, D]: what the layer
// projects from model.mem_init's zeros (after its layer norm when pre_norm, as the model
// normalises its memory).
void zero_memory_keys(const TransformerLM& model, DecoderWeights& w) {
  const auto& c = model->config();
  const auto layers = model->layer_list();
  for (size_t l = 0; l < layers.size(); ++l) {
    auto zero = torch::zeros({1, c.d_model}, w.qkv[l].options());  // [1, d]
    auto norm = layers[l]->attn_norm;                              // a handle
    auto h = c.pre_norm ? norm(zero) : zero;                       // [1, d]
    w.zero_kv.push_back(torch::linear(h, w.qkv[l])                 // [1, 3 H D]
                            .view({3, c.n_head, 1, 1, c.d_head})
                            .narrow(0, 1, 2)
                            .contiguous());  // [2, H, 1, 1, D]
  }
}

}  // namespace

DecoderWeights prepare_decoder(TransformerLM model, const DecodeOptions& options) {
  TXL_CHECK(options.tgt_len >= 1, "decoding: tgt_len = ", options.tgt_len, " must be >= 1");
  TXL_CHECK(options.mem_len >= 0, "decoding: mem_len = ", options.mem_len, " must be >= 0");
  TXL_CHECK(options.clamp_len >= -1, "decoding: clamp_len = ", options.clamp_len,
            " must be -1 (no clamp) or >= 0");
  TXL_CHECK(!model->is_training(), "decoding: the model must be in evaluation mode (eval())");
  torch::NoGradGuard no_grad;
  DecoderWeights w;
  w.model = model;
  w.options = options;
  const auto& c = model->config();
  w.sliding = config::uses_absolute_positions(c.attn_type) || options.mem_len == 0;
  w.capacity = w.sliding ? options.tgt_len : options.mem_len + 2 * options.tgt_len;
  const auto& crit = model->crit;
  const auto opts = crit->table(0).options();
  if (crit->layout().n_clusters() == 1 && !crit->projection(0).defined()) {
    // A plain softmax: its product done by the decoder.
    w.out_weight = crit->cluster_words(0);     // [V, d]
    w.out_bias = crit->cluster_words_bias(0);  // [V]
  }
  w.slots = torch::arange(w.capacity, torch::dtype(torch::kLong).device(opts.device()));  // [C]
  w.cached = !w.sliding && ops::vector_loops_take(crit->table(0));
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.d_head));
  for (auto layer : model->layer_list()) {
    auto qkv = layer->attn->qkv->weight.detach().clone();  // [3 H D, d]
    qkv.narrow(0, 0, c.n_head * c.d_head).mul_(scale);     // queries come out scaled
    w.qkv.push_back(qkv);
  }
  relative_tables(model, w);
  w.zero_memory = options.zero_memory && !w.sliding;
  if (w.zero_memory) zero_memory_keys(model, w);
  pack_weights(model, w);
  return w;
}

IncrementalDecoder::IncrementalDecoder(TransformerLM model, const DecodeOptions& options,
                                       int64_t rows)
    : IncrementalDecoder(prepare_decoder(std::move(model), options), rows) {}

IncrementalDecoder::IncrementalDecoder(const DecoderWeights& weights, int64_t rows)
    : w_(weights) {
  TXL_CHECK(w_.model, "decoding: the weights are not prepared (prepare_decoder)");
  TXL_CHECK(rows >= 1, "decoding: rows = ", rows, " must be >= 1");
  TXL_CHECK(!w_.model->is_training(), "decoding: the model must be in evaluation mode (eval())");
  torch::NoGradGuard no_grad;
  first_.assign(static_cast<size_t>(rows), 0);
  kv_ = key_value_buffers(rows);
  for (auto& kv : kv_) kv.zero_();  // mmap's blocks come zeroed, torch::empty's do not
  if (w_.zero_memory) {
    // The mem_len slots before time 0 hold the zero memory of every row.
    const int64_t m = w_.options.mem_len;
    for (size_t l = 0; l < kv_.size(); ++l) kv_[l].narrow(3, 0, m).copy_(w_.zero_kv[l]);
    base_ = -m;
    used_ = m;
  }
  // The transposed table serves more rows than the packed one takes.
  if (w_.out_weight.defined() && rows > (w_.packed_vocab.defined() ? kPackedRows : 1)) {
    out_weight_t_ = w_.out_weight.t().contiguous();  // [d, V]; rows never grow
  }
}

std::vector<torch::Tensor> IncrementalDecoder::key_value_buffers(int64_t rows) const {
  const auto& c = w_.model->config();
  const auto layers = static_cast<int64_t>(w_.qkv.size());
  const auto opts = w_.model->crit->table(0).options();
  auto all = util::empty_huge({layers, 2, c.n_head, rows, w_.capacity, c.d_head},
                              opts);  // [L, 2, H, B, C, D]
  std::vector<torch::Tensor> buffers;
  for (int64_t l = 0; l < layers; ++l) buffers.push_back(all[l]);  // [2, H, B, C, D], contiguous
  return buffers;
}

const PackedLayer& IncrementalDecoder::packed(size_t l) const {
  static const PackedLayer none;
  return w_.packed.empty() ? none : w_.packed[l];
}

torch::Tensor IncrementalDecoder::product(const torch::Tensor& x, const ops::PackedWeight& packed,
                                          const torch::Tensor& w, const torch::Tensor& bias,
                                          bool relu) const {
  if (packed.defined() && x.numel() <= kPackedRows * x.size(-1)) {
    ops::LinearOptions o;
    o.relu = relu;
    return ops::linear_packed(x.contiguous(), packed, o);  // [..., out]
  }
  auto y = times(x, w, bias);  // [..., out]
  return relu ? y.relu_() : y;
}

void IncrementalDecoder::start_rows(const torch::Tensor& real, int64_t t_len) {
  if (!real.defined()) return;
  TXL_CHECK(real.dim() == 2 && real.size(0) == rows() && real.size(1) == t_len &&
                real.scalar_type() == torch::kBool,
            "decoding: real must be bool [B = ", rows(), ", T = ", t_len, "], got ", real.sizes(),
            " ", real.scalar_type());
  auto host = real.to(torch::kCPU).contiguous();
  const auto a = host.accessor<bool, 2>();
  for (int64_t b = 0; b < rows(); ++b) {
    int64_t lead = 0;
    while (lead < t_len && !a[b][lead]) ++lead;
    for (int64_t t = lead; t < t_len; ++t) {
      TXL_CHECK(a[b][t], "decoding: row ", b, " has padding at ", t, " after its first token at ",
                lead, "; padding goes before a row's first token");
    }
    TXL_CHECK(lead == 0 || time_ == 0, "decoding: row ", b,
              " has padding in a later read; padding goes in the first read only");
    if (time_ == 0) first_[static_cast<size_t>(b)] = lead;
  }
}

int64_t IncrementalDecoder::first_visible(size_t b, int64_t t) const {
  const int64_t first = first_[b];
  if (w_.sliding) return std::max(first, base_);  // the window is all there is
  // Padding sees only itself: its output is never read, and one key keeps every query's
  // first slot inside the keys it is read against (ops::attend_cached checks it).
  if (t < first) return t;
  // With zero memory the mem_len slots before the row's first token are its memory.
  const int64_t earliest = w_.zero_memory ? first - w_.options.mem_len : first;
  if (w_.options.same_length) return std::max(earliest, t - w_.options.mem_len + 1);
  // Segments of tgt_len from the row's first token; the memory is the mem_len before its own.
  const int64_t segment_start = first + (t - first) / w_.options.tgt_len * w_.options.tgt_len;
  return std::max(earliest, segment_start - w_.options.mem_len);
}

std::vector<int64_t> IncrementalDecoder::first_slots(int64_t q) const {
  std::vector<int64_t> slots;
  slots.reserve(static_cast<size_t>(rows() * q));
  for (int64_t b = 0; b < rows(); ++b) {
    for (int64_t i = 0; i < q; ++i) {
      const int64_t first = first_visible(static_cast<size_t>(b), time_ + i);
      TXL_CHECK(first >= base_ || first >= time_ + i, "decoding: internal error: key at time ",
                first, " left the buffer (starts at ", base_, ")");
      slots.push_back(first - base_);
    }
  }
  return slots;
}

torch::Tensor IncrementalDecoder::score_bias(int64_t q) const {
  const int64_t batch = rows(), k_len = used_ + q;
  auto lowest = torch::tensor(first_slots(q), torch::kLong).view({batch, q});  // [B, q], host
  const auto device = w_.slots.device();
  auto slots = w_.slots.narrow(0, 0, k_len);                                      // [K]
  auto blocked = slots < lowest.to(device).unsqueeze(2);                        // [B, q, K]
  if (q > 1) {
    auto query_slot = slots.narrow(0, used_, q).view({1, q, 1});                // [1, q, 1]
    blocked = blocked.logical_or(slots.view({1, 1, k_len}) > query_slot);       // [B, q, K]
  }
  return ops::score_bias(blocked, kv_.front().scalar_type());  // [B, q, K]
}

void IncrementalDecoder::zero_padding(size_t l, int64_t q) {
  if (!w_.zero_memory) return;
  for (int64_t b = 0; b < rows(); ++b) {
    const int64_t end = std::min(first_[static_cast<size_t>(b)], time_ + q);  // padding ends
    if (end <= time_) continue;
    auto slots = kv_[l].select(2, b).narrow(2, used_, end - time_);  // [2, H, n, D]
    slots.copy_(w_.zero_kv[l].select(2, 0));                         // from [2, H, 1, D]
  }
}

void IncrementalDecoder::make_room(int64_t q) {
  if (used_ + q <= w_.capacity) return;
  // A later query sees at most mem_len + tgt_len - 1 earlier keys.
  const int64_t keep = std::min(used_, w_.options.mem_len + w_.options.tgt_len - 1);
  for (auto& kv : kv_) {
    auto recent = kv.narrow(3, used_ - keep, keep).clone();  // [2, H, B, keep, D]
    kv.narrow(3, 0, keep).copy_(recent);
  }
  base_ += used_ - keep;
  used_ = keep;
}

torch::Tensor IncrementalDecoder::attend_one(size_t l, const torch::Tensor& h,
                                             const std::vector<int64_t>& first) {
  const auto& c = w_.model->config();
  const int64_t batch = h.size(0);
  auto qkv = product(h, packed(l).qkv, w_.qkv[l])         // [B, 1, 3 H D]
                 .view({batch, 3, c.n_head, c.d_head});  // [B, 3, H, D]
  ops::CachedKeys keys;
  keys.buffer = kv_[l];
  if (!w_.by_distance.empty()) keys.by_distance = w_.by_distance[l];
  if (!w_.u.empty()) {
    keys.u = w_.u[l];
    keys.v = w_.v[l];
  }
  auto context = ops::attend_cached(qkv, keys, used_ + 1, first);  // [B, H D]
  zero_padding(l, 1);  // a padding query's own output is never used
  return product(context.unsqueeze(1), packed(l).out,
                 w_.model->layer_list()[l]->attn->out->weight);  // [B, 1, d]
}

torch::Tensor IncrementalDecoder::attend(size_t l, const torch::Tensor& h,
                                         const Visible& visible) {
  if (!visible.bias.defined()) return attend_one(l, h, visible.first);
  const auto& bias = visible.bias;
  const auto& c = w_.model->config();
  const int64_t batch = h.size(0), q = h.size(1), k_len = used_ + q;
  const int64_t n_head = c.n_head, d_head = c.d_head;
  auto heads = product(h, packed(l).qkv, w_.qkv[l])  // [B, q, 3 H D]
                   .view({batch, q, 3, n_head, d_head})
                   .permute({2, 3, 0, 1, 4});  // [3, H, B, q, D], a view
  auto& kv = kv_[l];
  kv.narrow(3, used_, q).copy_(heads.narrow(0, 1, 2));  // [2, H, B, q, D] into the buffer
  zero_padding(l, q);
  auto query = heads.select(0, 0);                      // [H, B, q, D], scaled
  auto keys = kv.select(0, 0).narrow(2, 0, k_len);      // [H, B, K, D]
  auto values = kv.select(0, 1).narrow(2, 0, k_len);    // [H, B, K, D]
  torch::Tensor scores;                                 // [H, B, q, K]
  if (w_.table.empty()) {
    scores = torch::matmul(query, keys.transpose(-1, -2));  // [H, B, q, K]
  } else {
    auto q_content = w_.u.empty() ? query : query + w_.u[l];   // [H, B, q, D]
    auto q_position = w_.v.empty() ? query : query + w_.v[l];  // [H, B, q, D]
    scores = torch::matmul(q_content, keys.transpose(-1, -2));  // [H, B, q, K]
    auto r = w_.table[l].narrow(2, w_.capacity - k_len, k_len);    // [H, D, K], distances K-1 .. 0
    auto by_distance = torch::matmul(q_position.reshape({n_head, batch * q, d_head}), r)
                           .view({n_head, batch, q, k_len});  // [H, B, q, K]
    // One query sits at the last key: its columns are already its distances.
    scores.add_(q == 1 ? by_distance : ops::rel_shift(by_distance));
  }
  scores.add_(bias);                                                     // [H, B, q, K]
  auto context = torch::matmul(torch::softmax(scores, -1), values);      // [H, B, q, D]
  auto attn = w_.model->layer_list()[l]->attn;
  return product(context.permute({1, 2, 0, 3}).reshape({batch, q, n_head * d_head}),
                 packed(l).out, attn->out->weight);  // [B, q, d]
}

torch::Tensor IncrementalDecoder::run_layer(size_t l, const torch::Tensor& x,
                                            const Visible& visible,
                                            const torch::Tensor& positions) {
  auto layer = w_.model->layer_list()[l];  // a handle: shares the module
  torch::Tensor h = x;  // [B, q, d]
  if (layer->pos_emb) {
    // vanilla_learned: the layer's own absolute positions, counted within the window.
    h = h + layer->pos_emb->weight.index_select(0, positions.reshape({-1})).view(x.sizes());
  }
  const auto& ff = layer->ff;
  const auto& p = packed(l);
  auto feed_forward = [&](const torch::Tensor& a) {  // [B, q, d] -> [B, q, d]
    auto inner = product(a, p.fc1, ff->fc1->weight, ff->fc1->bias, true);  // [B, q, d_inner]
    return product(inner, p.fc2, ff->fc2->weight, ff->fc2->bias);          // [B, q, d]
  };
  if (w_.model->config().pre_norm) {
    auto a = h + attend(l, layer->attn_norm(h), visible);  // [B, q, d]
    return a + feed_forward(layer->ff_norm(a));         // [B, q, d]
  }
  auto a = add_norm(layer->attn_norm, h, attend(l, h, visible));  // [B, q, d]
  return add_norm(layer->ff_norm, a, feed_forward(a));            // [B, q, d]
}

torch::Tensor IncrementalDecoder::run_chunk(const torch::Tensor& tokens,
                                            const torch::Tensor& positions) {
  const int64_t q = tokens.size(1);
  Visible visible;
  if (w_.cached && q == 1) {
    visible.first = first_slots(1);
  } else {
    visible.bias = score_bias(q);  // [B, q, K]
  }
  auto emb = w_.model->word_emb;  // a handle: shares the module
  auto x = emb->num_tables() == 1 && !emb->projection(0).defined()
               ? torch::embedding(emb->table(0), tokens).mul_(emb->scale())  // [B, q, d]
               : emb(tokens);                                                 // [B, q, d]
  if (w_.model->config().attn_type == config::AttnType::kVanilla) {
    const int64_t d = w_.model->config().d_model;
    x = x + ops::sinusoid_encoding(positions.reshape({-1}).to(x.scalar_type()), d)
                .view(x.sizes());  // [B, q, d]
  }
  for (size_t l = 0; l < kv_.size(); ++l) x = run_layer(l, x, visible, positions);  // [B, q, d]
  used_ += q;
  time_ += q;
  auto last = x.select(1, q - 1);  // [B, d]
  return w_.model->final_norm ? w_.model->final_norm(last) : last;
}

torch::Tensor IncrementalDecoder::read_sliding(const torch::Tensor& tokens) {
  const int64_t window = w_.options.tgt_len;
  window_ = window_.defined() ? torch::cat({window_, tokens}, 1) : tokens;  // [B, n + T]
  const int64_t n = std::min<int64_t>(window_.size(1), window);
  window_ = window_.narrow(1, window_.size(1) - n, n);  // [B, n]: the last tokens
  time_ += tokens.size(1) - n;                           // run_chunk reads the window's n
  base_ = time_;
  used_ = 0;
  torch::Tensor positions;  // int64 [B, n]: positions from the row's first token in the window
  if (config::uses_absolute_positions(w_.model->config().attn_type)) {
    positions = torch::empty({rows(), n}, torch::kLong);
    auto* p = positions.data_ptr<int64_t>();
    for (int64_t b = 0; b < rows(); ++b) {
      const int64_t start = std::max(first_[static_cast<size_t>(b)], base_);
      for (int64_t j = 0; j < n; ++j) p[b * n + j] = std::max<int64_t>(0, base_ + j - start);
    }
    positions = positions.to(w_.slots.device());
  }
  return log_probs(run_chunk(window_, positions));  // [B, V]
}

torch::Tensor IncrementalDecoder::read(const torch::Tensor& tokens, const torch::Tensor& real) {
  TXL_CHECK(tokens.defined() && tokens.dim() == 2 && tokens.scalar_type() == torch::kLong &&
                tokens.size(0) == rows() && tokens.size(1) >= 1,
            "decoding: tokens must be int64 [B = ", rows(), ", T >= 1], got ",
            tokens.defined() ? tokens.sizes() : torch::IntArrayRef{});
  torch::NoGradGuard no_grad;
  const int64_t t_len = tokens.size(1);
  start_rows(real, t_len);
  // A clear message for a bad id (the lookup itself would also refuse it).
  if (time_ == 0) modules::check_token_ids(tokens, w_.model->n_token(), "decoding");
  const auto on_device = tokens.to(w_.slots.device());
  if (w_.sliding) return read_sliding(on_device);
  torch::Tensor last;  // [B, d]
  for (int64_t begin = 0; begin < t_len; begin += w_.options.tgt_len) {
    const int64_t q = std::min(w_.options.tgt_len, t_len - begin);
    make_room(q);
    last = run_chunk(on_device.narrow(1, begin, q), {});
  }
  return log_probs(last);  // [B, V]
}

torch::Tensor IncrementalDecoder::log_probs(const torch::Tensor& hidden) {
  if (!w_.out_weight.defined()) return w_.model->crit->log_prob(hidden);  // [B, V]
  if (w_.packed_vocab.defined() && hidden.size(0) <= kPackedRows) {
    // The bias is added in the log-softmax's first pass.
    auto logits = ops::linear_packed(hidden.contiguous(), w_.packed_vocab);  // [B, V]
    return ops::log_softmax_rows_(logits, w_.out_bias);                       // [B, V]
  }
  if (hidden.size(0) == 1) {
    auto logits = times(hidden, w_.out_weight, w_.out_bias);  // [1, V]
    return ops::vector_loops_take(logits) ? ops::log_softmax_rows_(logits)
                                          : torch::log_softmax(logits, -1);  // [1, V]
  }
  if (ops::vector_loops_take(hidden)) {
    // The bias is added in the log-softmax's first pass, not copied into addmm's result.
    auto logits = torch::mm(hidden, out_weight_t_);  // [B, V]
    return ops::log_softmax_rows_(logits, w_.out_bias);  // [B, V]
  }
  auto logits = w_.out_bias.defined() ? torch::addmm(w_.out_bias, hidden, out_weight_t_)
                                    : torch::mm(hidden, out_weight_t_);  // [B, V]
  return torch::log_softmax(logits, -1);                               // [B, V]
}

void IncrementalDecoder::keep_rows(const torch::Tensor& rows) {
  TXL_CHECK(rows.defined() && rows.dim() == 1 && rows.scalar_type() == torch::kLong &&
                rows.size(0) >= 1,
            "decoding: keep_rows takes int64 [B'] with B' >= 1");
  auto host = rows.to(torch::kCPU).contiguous();
  const auto* p = host.data_ptr<int64_t>();
  std::vector<int64_t> first;
  for (int64_t i = 0; i < host.size(0); ++i) {
    TXL_CHECK(p[i] >= 0 && p[i] < this->rows() && (i == 0 || p[i] > p[i - 1]),
              "decoding: keep_rows: indices must increase within [0, ", this->rows(), ")");
    first.push_back(first_[static_cast<size_t>(p[i])]);
  }
  const auto index = host.to(w_.slots.device());
  auto kept = key_value_buffers(host.size(0));  // per layer [2, H, B', C, D]
  for (size_t l = 0; l < kv_.size(); ++l) torch::index_select_out(kept[l], kv_[l], 2, index);
  kv_ = std::move(kept);
  if (window_.defined()) window_ = window_.index_select(0, index);  // [B', n]
  first_ = std::move(first);
}

IncrementalDecoder IncrementalDecoder::clone() const {
  torch::NoGradGuard no_grad;
  IncrementalDecoder copy(*this);  // shares the tensors, which reads replace (window_)
  copy.kv_ = key_value_buffers(rows());
  for (size_t l = 0; l < kv_.size(); ++l) copy.kv_[l].copy_(kv_[l]);  // [2, H, B, C, D]
  return copy;
}

namespace {

void check_stack(const std::vector<IncrementalDecoder>& parts) {
  TXL_CHECK(!parts.empty(), "decoding: stack needs at least one decoder");
  const auto& first = parts.front().weights();
  for (const auto& p : parts) {
    const auto& w = p.weights();
    TXL_CHECK(w.model.ptr() == first.model.ptr() && w.capacity == first.capacity &&
                  w.options.tgt_len == first.options.tgt_len &&
                  w.options.mem_len == first.options.mem_len &&
                  w.options.clamp_len == first.options.clamp_len &&
                  w.options.same_length == first.options.same_length &&
                  w.zero_memory == first.zero_memory,
              "decoding: stack takes decoders of one model and one set of lengths");
    TXL_CHECK(!p.sliding(), "decoding: stack takes memory decoders (a sliding window reads its "
              "last tokens again instead)");
    TXL_CHECK(p.steps() > 0, "decoding: stack takes decoders that have read a token");
  }
}

}  // namespace

IncrementalDecoder IncrementalDecoder::stack(const std::vector<IncrementalDecoder>& parts) {
  check_stack(parts);
  torch::NoGradGuard no_grad;
  int64_t rows = 0, time = 0, used = 0;
  for (const auto& p : parts) {
    rows += p.rows();
    time = std::max(time, p.time_);
    used = std::max(used, p.used_);
  }
  IncrementalDecoder merged(parts.front().w_, rows);  // zeroed buffers
  merged.time_ = time;
  merged.used_ = used;
  merged.base_ = time - used;
  int64_t b = 0;
  for (const auto& p : parts) {
    // A part behind by `offset` steps: its slot s at the stack's slot s + used - p.used_ (the
    // same time), and its rows start `offset` later, as if left-padded.
    const int64_t offset = time - p.time_;
    for (size_t l = 0; l < merged.kv_.size(); ++l) {
      merged.kv_[l]
          .narrow(2, b, p.rows())
          .narrow(3, used - p.used_, p.used_)
          .copy_(p.kv_[l].narrow(3, 0, p.used_));  // [2, H, B_p, K_p, D]
    }
    for (int64_t j = 0; j < p.rows(); ++j) {
      merged.first_[static_cast<size_t>(b + j)] = p.first_[static_cast<size_t>(j)] + offset;
    }
    b += p.rows();
  }
  return merged;
}

}  // namespace txl::models
