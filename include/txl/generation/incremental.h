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
//   segments (memory tokens, model.mem_tokens > 0, or compressive memory with mem_len > 0)
//            Tokens are read in segments of tgt_len counted from each row's first token, as in
//            memory mode, and each segment starts over the memory the forwards of the row's
//            completed segments left: the model's begin_segment runs the forward's start (its
//            mechanisms' hooks, its masks), writes the keys and values of the rows its layers
//            read before the segment (compressed rows, memory, the memory tokens read) into the
//            buffer, and the segment's tokens then step over it as in memory mode, with the
//            forward's own masks. A completed segment's forward gives the next memory (the tokens
//            it writes, the rows it compresses): exactly what evaluation in memory mode computes.
//            Rows whose first tokens came at one time step share their segments and run as one
//            batch; rows of other starts run as other batches.
//
// The decoder is bookkeeping only: which rows it holds, where each row's first token is, which
// buffer slot holds which time step, what each query may see, compaction. The math is the
// model's own: each module's decoding step (TransformerLMImpl::step and the modules' `step`)
// runs the formula of its forward over weights prepared once (TransformerLMImpl::prepare_step),
// with the kernels ops chooses (ops::Projection). Each layer's keys and values sit in one block
// of 2 MB pages (ops::empty_streamed): a 16-row step streams about 51 MB of them from memory.
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

namespace txl::generation {

struct DecodeOptions {
  int64_t tgt_len = 128;     // segment length Q (memory) or window (sliding), e.g. model.tgt_len
  int64_t mem_len = 128;     // memory length M; 0 = sliding window of tgt_len
  int64_t clamp_len = -1;    // distances above it share one encoding; -1 = no clamp
  bool same_length = false;  // memory: every query sees at most mem_len keys, itself included
  // Memory mode: each row starts from mem_len zero vectors in every layer that its first
  // segments attend to (model.mem_init: zeros, Hugging Face's TransfoXL), not from nothing.
  bool zero_memory = false;
};

// What a decoder derives from its model and lengths whatever its rows: the model's prepared
// step weights (query weights scaled by 1/sqrt(D), the relative encodings of every distance,
// packed panels). Decoders made from one share its tensors (generation::generate prepares it once
// for all its batches). The prepared weights are copies, while the decoder reads the other
// parameters from the model: prepare again after the parameters change.
struct DecoderWeights {
  models::TransformerLM model{nullptr};
  DecodeOptions options;
  bool sliding = false;      // sliding window (absolute positions, or mem_len 0)
  int64_t capacity = 0;      // C: key rows each layer's buffer holds
  bool first_slots = false;  // one query per row reads its first visible slot, not a bias
  bool zero_memory = false;  // rows start from zero vectors (memory and segment modes)
  bool segments = false;     // the segment mode (memory tokens or compressive memory)
  torch::Tensor slots;       // int64 [C]: 0 .. C-1
  models::LMStep step;       // the modules' prepared weights
};

// The lookback of the segment mode's forwards (and of its buffers' capacity): the model's, with
// the decoder's lengths, no ext_len, and zero memory as `zero_memory` says.
models::Lookback segment_lookback(const models::TransformerLM& model, const DecodeOptions& options,
                                  bool zero_memory);

// Throws txl::Error for lengths out of range (tgt_len < 1, mem_len < 0, clamp_len < -1) or a
// model in training mode.
DecoderWeights prepare_decoder(models::TransformerLM model, const DecodeOptions& options);

class IncrementalDecoder {
 public:
  // A decoder of `rows` rows for `model` (its dtype and device). Throws txl::Error for lengths
  // out of range (tgt_len < 1, mem_len < 0, clamp_len < -1) or rows < 1.
  IncrementalDecoder(models::TransformerLM model, const DecodeOptions& options, int64_t rows);
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

  // The rows of `parts` (memory or segment decoders of one model and lengths that have read at
  // least one token each, any number of tokens), in order, as one decoder: each row then gives
  // what it gives in its part. Rows that have read fewer tokens are aligned at the end, as if
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
  // 0 .. used_-1 (times base_ ...): the model's step writes their keys and values after them
  // and returns the final hidden state of the last one, [B, d]. `positions` int64 [B, q]:
  // absolute positions (sliding with absolute positions), else undefined.
  torch::Tensor run_chunk(const torch::Tensor& tokens, const torch::Tensor& positions);
  // Per query of the chunk (row-major [B, q]), the first buffer slot it may see.
  std::vector<int64_t> first_slots(int64_t q) const;
  // Additive score bias [B, q, K] of the chunk's queries: 0 where visible, blocked elsewhere.
  torch::Tensor score_bias(int64_t q) const;
  // Zero memory: per row, how many of the chunk's q slots come before its first token.
  std::vector<int64_t> zero_slots(int64_t q) const;
  // The first time step a query of row b at time t may see.
  int64_t first_visible(size_t b, int64_t t) const;
  // Memory mode: moves the last keys a later query may see to the front when q more rows do
  // not fit.
  void make_room(int64_t q);
  torch::Tensor read_sliding(const torch::Tensor& tokens);
  // The segment mode (src/generation/segments.cpp). Rows whose first token came at one time
  // step: their segments start together.
  struct Group {
    std::vector<int64_t> rows;      // indices into the decoder's rows, increasing
    int64_t first = 0;              // the time step of their first token
    std::vector<torch::Tensor> kv;  // per layer [2, H, B_g, C, D]
    models::Memory memory;          // what the forwards of their completed segments left
    models::SegmentSteps segment;   // the segment being read (q_len 0: none begun)
    torch::Tensor tokens;           // int64 [B_g, i]: the segment's tokens read so far
    torch::Tensor last;             // [B_g, V]: log-probabilities after their last token
    modules::SoftmaxStep softmax;   // the softmax's step weights for B_g rows
  };
  // Tokens int64 [B, T] on the buffers' device.
  torch::Tensor read_segments(const torch::Tensor& tokens);
  // A group's tokens int64 [B_g, n] (from its first on).
  void read_group(Group& group, const torch::Tensor& tokens);
  // The groups of the rows' first tokens (start_rows).
  void make_groups();
  Group new_group(std::vector<int64_t> rows, int64_t first) const;
  // The segment mode's keep_rows: `kept` indices into the current rows, increasing.
  void keep_group_rows(const std::vector<int64_t>& kept);
  // Groups of one first time step made one (stack's parts after one context): their rows then
  // run as one batch.
  void merge_groups();
  void start_rows(const torch::Tensor& real, int64_t t_len);
  // Per layer an uninitialised [2, H, rows, C, D] buffer, views of one block of 2 MB pages.
  std::vector<torch::Tensor> key_value_buffers(int64_t rows) const;
  // A copy of `kv` (per layer [2, H, B, C, D]) in buffers of its own (key_value_buffers').
  std::vector<torch::Tensor> copied_buffers(const std::vector<torch::Tensor>& kv) const;

  DecoderWeights w_;               // the model, lengths and weights, shared with other decoders
  std::vector<torch::Tensor> kv_;  // per layer [2, H, B, C, D]
  modules::SoftmaxStep softmax_;   // the softmax's step weights for this decoder's rows
  torch::Tensor window_;           // sliding: int64 [B, <= tgt_len] the last tokens
  std::vector<int64_t> first_;     // per row: time of its first real token
  int64_t time_ = 0;               // time steps read
  int64_t base_ = 0;               // time of buffer slot 0
  int64_t used_ = 0;               // buffer slots holding keys
  std::vector<Group> groups_;      // the segment mode's rows
};

}  // namespace txl::generation
