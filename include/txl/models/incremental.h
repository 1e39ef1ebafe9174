#pragma once
// Incremental decoding (generation): a TransformerLM reads its rows' tokens a few at a time and
// gives the distribution of each row's next token, without reading its context again. Two
// ways, chosen by the model and the lengths:
//
//   memory   (xl or shaw with mem_len > 0) Tokens are read in segments of tgt_len counted from
//            each row's first token, and the query at position i of a segment sees the mem_len
//            positions before its segment and its segment up to itself (paper 3.2, Appendix E):
//            exactly what evaluation in memory mode computes, one token at a time. Each layer
//            keeps the keys and values of the positions a later query may still see (at most
//            mem_len + tgt_len - 1) in a buffer of fixed capacity mem_len + 2 tgt_len, written in
//            place and compacted when full, and the relative encodings projected once for every
//            distance: a new token costs the projections of one row and attention over its
//            M + i keys, linear in the context. With zero_memory each row starts from mem_len
//            zero vectors (their keys and values sit in the slots before its first token), as
//            evaluation starts a stream with model.mem_init: zeros.
//   sliding  (vanilla, vanilla_learned, or mem_len 0) Every read takes the last tgt_len tokens
//            as one segment without memory, positions counted from its start: the geometry the
//            model was trained in (evaluation's sliding mode), at a constant cost per token.
//
// Products of at most 64 rows (a generated token's B rows, short segments) go through the
// layers' weights packed once (ops::linear_packed: each weight streamed once, 16 rows' sums in
// registers) where the CPU has AVX-512; longer segments of a prompt, and other CPUs, through
// LibTorch's. The packed panels share one block of 2 MB pages (util::share_huge_block), and so
// do a decoder's keys and values of every layer (util::empty_huge): a 16-row step streams about
// 51 MB of them from memory.
//
// Rows may start with padding (left-padded prompts of different lengths, the `real` mask of the
// first read): padding is never attended to, and each row's segments start at its own first
// token, so a row gives what it gives alone. A finished row can be dropped (keep_rows): it then
// costs nothing. A decoder can be copied (clone) and decoders stacked into one (stack): a long
// context is read once, and then each prompt after it. No dropout (the model as in
// evaluation); no gradients.
//
// Legend: B rows, T tokens of a read, q tokens of one chunk, C capacity of the key/value buffer,
// K keys in use, H heads, D head size, d model width, V vocabulary, L layers.

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "txl/models/transformer_lm.h"
#include "txl/ops/packed_linear.h"

namespace txl::models {

struct DecodeOptions {
  int64_t tgt_len = 128;     // segment length Q (memory) or window (sliding), e.g. model.tgt_len
  int64_t mem_len = 128;     // memory length M; 0 = sliding window of tgt_len
  int64_t clamp_len = -1;    // distances above it share one encoding; -1 = no clamp
  bool same_length = false;  // memory: every query sees at most mem_len keys, itself included
  // Memory mode: each row starts from mem_len zero vectors in every layer that its first
  // segments attend to (model.mem_init: zeros, Hugging Face's TransfoXL), not from nothing.
  bool zero_memory = false;
};

// A layer's weights of a generated token's products, packed once (ops::pack_weight) where the
// CPU has the AVX-512 kernel; undefined elsewhere.
struct PackedLayer {
  ops::PackedWeight qkv, out, fc1, fc2;
};

// What a decoder derives from its model and lengths whatever its rows: the query weights
// scaled by 1/sqrt(D), the relative encodings of every distance, the packed weights. Decoders
// made from one share its tensors (eval::generate prepares it once for all its batches). The
// scaled and packed weights and the encodings are copies, while the decoder reads the other
// parameters from the model: prepare again after the parameters change.
struct DecoderWeights {
  TransformerLM model{nullptr};
  DecodeOptions options;
  bool sliding = false;  // sliding window (absolute positions, or mem_len 0)
  int64_t capacity = 0;  // C: key rows each layer's buffer holds
  bool cached = false;   // one query per row goes through ops::attend_cached
  std::vector<torch::Tensor> qkv;          // per layer [3 H D, d]: W_q rows scaled by 1/sqrt(D)
  std::vector<torch::Tensor> table;        // per layer [H, D, C], distances C-1 .. 0 (relative)
  std::vector<torch::Tensor> by_distance;  // per layer [H, C, D], distances 0 .. C-1 (relative)
  std::vector<torch::Tensor> u, v;         // per layer [H, 1, 1, D] scaled biases (xl)
  bool zero_memory = false;                // rows start from zero vectors (memory mode only)
  std::vector<torch::Tensor> zero_kv;      // per layer [2, H, 1, 1, D]: a zero vector's key, value
  torch::Tensor slots;                     // int64 [C]: 0 .. C-1
  torch::Tensor out_weight, out_bias;      // plain softmax: [V, d], [V]; else undefined
  std::vector<PackedLayer> packed;         // per layer, or empty
  ops::PackedWeight packed_vocab;          // plain softmax's [V, d], or undefined
};

// Throws txl::Error for lengths out of range (tgt_len < 1, mem_len < 0, clamp_len < -1) or a
// model in training mode.
DecoderWeights prepare_decoder(TransformerLM model, const DecodeOptions& options);

class IncrementalDecoder {
 public:
  // A decoder of `rows` rows for `model` (its dtype and device). Throws txl::Error for lengths
  // out of range (tgt_len < 1, mem_len < 0, clamp_len < -1) or rows < 1.
  IncrementalDecoder(TransformerLM model, const DecodeOptions& options, int64_t rows);
  // The same from weights prepared once (prepare_decoder), shared with other decoders.
  IncrementalDecoder(const DecoderWeights& weights, int64_t rows);

  // Reads tokens int64 [B, T] (T >= 1) of every row, and returns the log-probabilities of each
  // row's next token after them, [B, V]. `real` bool [B, T] marks padding (false) in the first
  // read only, before each row's first token (undefined = all real). Throws txl::Error for bad
  // shapes, padding after a row's first token or in a later read.
  torch::Tensor read(const torch::Tensor& tokens, const torch::Tensor& real = {});

  // Keeps only the rows `rows` (int64 [B'], increasing indices into the current rows), e.g.
  // without the finished ones.
  void keep_rows(const torch::Tensor& rows);

  // A decoder in the same state with buffers of its own: it reads on without changing this
  // one (a long context read once, then one copy per prompt).
  IncrementalDecoder clone() const;

  // The rows of `parts` (memory decoders of one model and lengths that have read at least one
  // token each, any number of tokens), in order, as one decoder: each row then gives what it
  // gives in its part. Rows that have read fewer tokens are aligned at the end, as if
  // left-padded. Throws txl::Error for no part, a sliding decoder, a part that has read nothing,
  // or parts of other models or lengths.
  static IncrementalDecoder stack(const std::vector<IncrementalDecoder>& parts);

  int64_t rows() const { return static_cast<int64_t>(first_.size()); }
  int64_t steps() const { return time_; }  // time steps read (padding included)
  bool sliding() const { return w_.sliding; }
  int64_t capacity() const { return w_.capacity; }  // C: key rows each layer's buffer holds
  const DecoderWeights& weights() const { return w_; }

 private:
  // The tokens [B, q] at times time_ .. time_ + q - 1, with keys in the buffer at slots
  // 0 .. used_-1 (times base_ ...): writes their keys and values after them and returns the
  // final hidden state of the last one, [B, d]. `positions` int64 [B, q]: absolute positions
  // (sliding with absolute positions), else undefined.
  torch::Tensor run_chunk(const torch::Tensor& tokens, const torch::Tensor& positions);
  // What the chunk's queries see: a score bias [B, q, K], or for one query per row read by
  // ops::attend_cached (memory mode on the CPU), each row's first visible slot.
  struct Visible {
    torch::Tensor bias;          // [B, q, K]: 0 where visible, blocked elsewhere
    std::vector<int64_t> first;  // per row, when bias is undefined
  };
  // One layer over x [B, q, d] with what its queries see and the absolute positions.
  torch::Tensor run_layer(size_t l, const torch::Tensor& x, const Visible& visible,
                          const torch::Tensor& positions);
  // Attention of h [B, q, d] (normalised when pre_norm) over the buffer's K keys -> [B, q, d].
  torch::Tensor attend(size_t l, const torch::Tensor& h, const Visible& visible);
  // Attention of one query per row, h [B, 1, d], through ops::attend_cached -> [B, 1, d].
  torch::Tensor attend_one(size_t l, const torch::Tensor& h, const std::vector<int64_t>& first);
  // Zero memory: the chunk's padding slots of layer l (before a row's first token) get the keys
  // and values of a zero vector, what that row's memory starts from.
  void zero_padding(size_t l, int64_t q);
  // Per query of the chunk (row-major [B, q]), the first buffer slot it may see.
  std::vector<int64_t> first_slots(int64_t q) const;
  // Additive score bias [B, q, K] of the chunk's queries: 0 where visible, blocked elsewhere.
  torch::Tensor score_bias(int64_t q) const;
  // The first time step a query of row b at time t may see.
  int64_t first_visible(size_t b, int64_t t) const;
  // Memory mode: moves the last keys a later query may see to the front when q more rows do
  // not fit.
  void make_room(int64_t q);
  torch::Tensor read_sliding(const torch::Tensor& tokens);
  // Log-probabilities [B, V] of the next token after final hidden states [B, d].
  torch::Tensor log_probs(const torch::Tensor& hidden);
  void start_rows(const torch::Tensor& real, int64_t t_len);
  // x [..., in] times a layer's weight: through its packed panels when they exist and x has
  // few rows (a generated token), else LibTorch's product of w [out, in] (+ bias). relu after.
  torch::Tensor product(const torch::Tensor& x, const ops::PackedWeight& packed,
                        const torch::Tensor& w, const torch::Tensor& bias = {},
                        bool relu = false) const;
  const PackedLayer& packed(size_t l) const;  // layer l's, or undefined ones
  // Per layer an uninitialised [2, H, rows, C, D] buffer, views of one block of 2 MB pages.
  std::vector<torch::Tensor> key_value_buffers(int64_t rows) const;

  DecoderWeights w_;                  // the model, lengths and weights, shared with other decoders
  std::vector<torch::Tensor> kv_;     // per layer [2, H, B, C, D]
  torch::Tensor out_weight_t_;        // plain softmax, more rows than packed: [d, V]
  torch::Tensor window_;              // sliding: int64 [B, <= tgt_len] the last tokens
  std::vector<int64_t> first_;        // per row: time of its first real token
  int64_t time_ = 0;                  // time steps read
  int64_t base_ = 0;                  // time of buffer slot 0
  int64_t used_ = 0;                  // buffer slots holding keys
};

}  // namespace txl::models
