#pragma once
// Ordered segment streams (docs/model.md section 2) and the evaluation iterations (section 7).
//
// A corpus of N token ids is cut into B contiguous streams; batch i holds the i-th segment of
// every stream, so segments A, B, C of one stream arrive in consecutive batches and the model's
// memory can carry context from one batch to the next. Batches are built with tensor gathers
// (no per-token loops), so a 100M-token corpus costs O(B * T) per batch.
//
// - TrainStream: the paper's training iterator (drops the N mod B remainder, like the paper
//   code), with optional ext_len context, variable segment lengths, per-epoch rolls and a
//   document mode; repeats epochs forever.
// - EvalStream: every one of the N - 1 targets scored exactly once, nothing dropped; optional
//   unscored warm-up of each stream's first memory from the text before it.
// - SlidingStream: vanilla evaluation with a sliding window of L tokens and stride s.
//
// Every stream can report its position as a StreamState and be restored from one, so a
// checkpointed run resumes with exactly the batches an uninterrupted run would have seen.
//
// Shapes: N tokens, B rows, Q segment length (tgt_len), E ext_len, T columns of one batch.
// T = the widest row's context plus segment: columns that would be padding in every row are not
// emitted, so the last batch of an epoch or pass may be narrower than Q. Rows with less context
// are padded on the left of the context, rows with a shorter segment on the right; the segment
// itself starts at the same column in every row.
// The error messages name the experiment key each option mirrors (train.batch_size, ...).

#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "txl/config/config.h"
#include "txl/data/batch.h"

namespace txl::data {

enum class StreamKind : std::int64_t { kTrain = 1, kEval = 2, kSliding = 3 };

// Where a stream stands: enough to rebuild the exact next batch. Epoch plans (variable lengths,
// rolls, document layout) are pure functions of (seed, epoch), so no generator state is stored.
struct StreamState {
  StreamKind kind = StreamKind::kTrain;
  std::uint64_t fingerprint = 0;  // the stream's geometry (N, B, Q, options, documents); a state
                                  // restores only into a stream with the same fingerprint
  std::uint64_t seed = 0;         // the seed of the epoch plans (0 for evaluation streams)
  std::int64_t epoch = 0;         // completed epochs (evaluation: completed passes)
  std::int64_t index = 0;         // the next batch's index within the epoch

  // "txl-stream-v1 kind=train fingerprint=<16 hex> seed=<n> epoch=<n> index=<n>"
  std::string to_string() const;
  static StreamState from_string(const std::string& text);
  // int64 [6]: version, kind, fingerprint, seed (both bit-cast), epoch, index
  torch::Tensor to_tensor() const;
  static StreamState from_tensor(const torch::Tensor& flat);

  bool operator==(const StreamState& other) const;
  bool operator!=(const StreamState& other) const { return !(*this == other); }
};

// ------------------------------------------------------------------------------ training

struct TrainStreamOptions {
  std::int64_t batch_size = 16;  // B streams (train.batch_size)
  std::int64_t tgt_len = 128;    // Q scored tokens per segment (model.tgt_len)
  std::int64_t ext_len = 0;      // E preceding tokens given as unscored input (model.ext_len)
  bool var_len = false;          // paper recipe for segment lengths (train.var_len), see below
  bool roll = false;             // rotate every stream by a random offset each epoch (train.roll)
  std::uint64_t seed = 1234;     // seeds var_len and roll (run.seed)
  std::int64_t pad_id = 0;       // id written where a mask is false (masks are authoritative)
  // Rows [read_begin, read_end) are read out of the ids; the others hold pad_id under the masks
  // of the whole batch, so that a data-parallel rank reads only its own part of a mapped corpus
  // (read_end < 0: every row). The geometry, masks and state are those of the whole batch.
  std::int64_t read_begin = 0, read_end = -1;
};

// The paper's variable segment length (Dai et al. code, LMOrderedIterator.get_varlen_iter):
// per batch, bptt = Q with probability 0.95 else Q / 2; length = trunc(Normal(bptt, 5)) clamped
// to [min(5, Q), Q + 20]. The whole epoch's lengths are drawn at the epoch's start from (seed,
// epoch), with a generator of our own (splitmix64 + Box-Muller) so the schedule is the same with
// every compiler and standard library. Lengths may exceed Q; a trainer that follows the paper
// scales the learning rate by length / Q.
inline constexpr double kVarLenHalfProbability = 0.05;
inline constexpr double kVarLenStd = 5.0;
inline constexpr std::int64_t kVarLenMin = 5;
inline constexpr std::int64_t kVarLenMaxExtra = 20;

namespace detail {
// Documents with at least one target (2 or more tokens), as [begin, end) token offsets.
struct Documents {
  std::vector<std::int64_t> begin, end;
  std::int64_t given = 0;    // entries of doc_starts
  std::int64_t targets = 0;  // sum over kept documents of (length - 1)
};
// Documents dealt to streams (see TrainStream), kept per document (memory does not grow with
// the number of batches): each stream's documents in order, with the batch where each starts.
struct DocumentLayout {
  struct Stream {
    std::vector<std::int64_t> begin, targets, first_batch;  // per document of the stream
  };
  // One row of each batch: the global index of the segment's first input, its real length (0
  // once the stream has run out), the ext context available inside the document, and whether
  // the segment starts its document.
  struct Rows {
    std::vector<std::int64_t> starts, lengths, context;  // [B]
    torch::Tensor resets;                                // bool [B]
  };
  Rows rows(std::int64_t i) const;  // batch i's rows
  std::vector<Stream> streams;      // [B]
  std::int64_t n_batches = 0, q = 0, e = 0;
};
}  // namespace detail

class TrainStream {
 public:
  // ids: int64 [N] token ids. doc_starts (document mode): int64 [n_docs], strictly increasing
  // token offsets where documents start, the first one 0; undefined tensor = plain text.
  //
  // Plain text: stream b is ids[b L, (b + 1) L) with L = N / B (the remainder is dropped);
  // batch i covers inputs [p_i, p_i + q_i) of every stream with targets one token later, plus up
  // to E preceding tokens of the same stream as unscored context; each stream gives L - 1
  // targets per epoch. With roll, every epoch rotates stream b by an offset drawn from (seed,
  // epoch): the paper's roll. The one target that would cross the seam (the stream's last token
  // followed by its first) is not scored; memory and ext context still flow across it.
  //
  // Document mode: documents are modelled on their own. A document of n tokens gives n - 1
  // targets (its first token has no context inside the document and is never a target; no
  // target crosses into the next document), cut into ceil((n - 1) / Q) segments. Documents are
  // dealt in corpus order to whichever stream is shortest so far (ties: lowest stream), so every
  // stream reads whole documents in order and every document starts at a segment boundary:
  // reset[b] is true on the batch where row b starts a document. ext_len context never reaches
  // into the previous document. With fewer documents than streams, the longest documents are
  // cut into contiguous halves until every stream has one (each part a document of its own,
  // logged as a warning; the cuts are part of the fingerprint); documents too short to cut
  // (under 4 tokens) leave the error asking for a smaller train.batch_size. With roll, each epoch
  // starts the document sequence at a random document (drawn from (seed, epoch)). Documents of
  // fewer than 2 tokens are skipped. Padding overhead (logged at construction): the tail of each
  // document's last segment, Q / 2 tokens per document on average, plus the rows of streams that
  // finish before the longest one (at most one document's length each, thanks to the shortest-first
  // dealing). With short documents (n << Q) most of a batch is padding: pick Q near the typical
  // length. A row whose stream has run out is all padding (input_mask false everywhere), which the
  // model must take without NaN (docs/model.md section 1).
  // var_len is not supported in document mode (the layout needs fixed segment lengths).
  TrainStream(torch::Tensor ids, TrainStreamOptions options, torch::Tensor doc_starts = {});

  // The next batch; after the last batch of an epoch the next call starts a new epoch.
  // Every row of an epoch's first batch has reset = true.
  Batch next();

  std::int64_t epoch() const { return epoch_; }
  std::int64_t index() const { return index_; }  // the next batch's index in the epoch
  std::int64_t batches_in_epoch() const;         // of the current epoch (varies with var_len)
  std::int64_t stream_length() const { return length_; }  // L tokens per stream (plain text)
  bool document_mode() const { return !docs_.begin.empty(); }
  const TrainStreamOptions& options() const { return options_; }

  StreamState state() const;
  // Continues from `state` (taken from a stream over the same data and options, possibly with
  // another seed, which is adopted). Throws txl::Error on a foreign or out-of-range state.
  void restore(const StreamState& state);

 private:
  struct Plan {
    // Plain text: segment start p_i and length q_i per batch, rotation per stream.
    std::vector<std::int64_t> pos, len;
    torch::Tensor shift;            // int64 [B]
    detail::DocumentLayout layout;  // document mode
    std::int64_t n_batches = 0;
  };
  Plan make_plan(std::int64_t epoch) const;
  Batch build(std::int64_t i) const;

  torch::Tensor ids_;  // int64 [N], contiguous, CPU
  TrainStreamOptions options_;
  std::int64_t length_ = 0;  // L (plain text)
  detail::Documents docs_;   // document mode
  std::uint64_t fingerprint_ = 0;
  std::int64_t epoch_ = 0;
  std::int64_t index_ = 0;
  Plan plan_;
};

// ---------------------------------------------------------------------------- evaluation

struct EvalStreamOptions {
  std::int64_t batch_size = 16;  // B streams (eval.batch_size)
  std::int64_t tgt_len = 128;    // Q (eval.tgt_len, resolved)
  std::int64_t ext_len = 0;      // E preceding tokens as unscored input (model.ext_len)
  std::int64_t warmup = 0;       // W tokens before each stream to prime its memory (eval.warmup)
  std::int64_t pad_id = 0;
};

class EvalStream {
 public:
  // The N - 1 targets (inputs ids[0, N - 1), targets ids[1, N)) are split into B contiguous
  // streams whose lengths differ by at most one (the first (N - 1) mod B streams take one more:
  // unlike "the last stream shorter", no stream is ever left nearly empty). Scored batch i holds
  // segment i of every stream; the tails are padded and masked (in the last batch a row may be
  // all padding). Sum of n_scored over a pass is exactly N - 1.
  // Warm-up: stream b's first memory is primed from the min(W, start_b) tokens right before its
  // start, in extra leading batches (unscored; the text is right-aligned so that it runs straight
  // into the first scored segment, the first warm-up batch is the narrow one, rows with less
  // text are left-padded). ext_len context may reach into the text before a stream's start
  // (it is real preceding text).
  //
  // Document mode (doc_starts as for TrainStream): documents are dealt to streams and laid out
  // exactly as TrainStream lays them out (shortest stream first, each document from a segment
  // boundary, reset where a row starts a document, no roll); every target inside a document is
  // scored once, so a pass scores N - (number of documents) targets. No warm-up (the text
  // before a document belongs to another one). With fewer documents than rows, the rows without
  // one are padding throughout: no document is cut, so no figure changes.
  EvalStream(torch::Tensor ids, EvalStreamOptions options, torch::Tensor doc_starts = {});

  std::int64_t size() const { return warmup_batches_ + scored_batches_; }  // batches per pass
  std::int64_t warmup_batches() const { return warmup_batches_; }
  std::int64_t n_targets() const;  // scored per pass: N - 1 (document mode: within documents)
  bool document_mode() const { return !docs_.begin.empty(); }
  std::int64_t stream_start(std::int64_t b) const { return begin_[static_cast<size_t>(b)]; }
  std::int64_t stream_end(std::int64_t b) const { return end_[static_cast<size_t>(b)]; }

  Batch batch(std::int64_t i) const;  // batch i of a pass, 0 <= i < size()
  // Document mode: where batch i's scored targets lie in the text, so that per-token losses can
  // be put back in text order: row b scores the targets at offsets first + 1 .. first + count
  // (in the index of EvalResult::token_losses, t = first .. first + count - 1), in column order.
  // int64 [B] each; count 0 on a row without text. Throws txl::Error outside document mode.
  struct RowTargets {
    torch::Tensor first, count;
  };
  RowTargets row_targets(std::int64_t i) const;
  // The next batch of the current pass; nullopt when the pass is over (the call after that
  // starts the next pass).
  std::optional<Batch> next();
  void rewind() { index_ = 0; }

  StreamState state() const;
  void restore(const StreamState& state);

 private:
  torch::Tensor ids_;
  EvalStreamOptions options_;
  std::vector<std::int64_t> begin_, end_;  // stream b's inputs are ids[begin_b, end_b)
  detail::Documents docs_;                 // document mode
  detail::DocumentLayout layout_;          // document mode
  std::int64_t warmup_max_ = 0;            // max over streams of the warm-up tokens available
  std::int64_t warmup_batches_ = 0, scored_batches_ = 0;
  std::uint64_t fingerprint_ = 0;
  std::int64_t epoch_ = 0, index_ = 0;
};

struct SlidingStreamOptions {
  std::int64_t batch_size = 16;  // windows per batch (eval.batch_size)
  std::int64_t window = 128;     // L context tokens (eval.window, resolved)
  std::int64_t stride = 1;       // s targets scored per window (eval.stride)
  std::int64_t pad_id = 0;
};

class SlidingStream {
 public:
  // Vanilla evaluation (docs/model.md section 7, Al-Rfou et al.). Window k covers the inputs
  // [end_k - L, end_k) with end_k = min(L + k s, N - 1); the first window scores all its
  // positions, window k > 0 the positions after end_{k-1} (the last s, fewer in the final
  // window). So every target is scored exactly once, the last target of a window sees exactly
  // L tokens and the others L - s + 1 or more (s = 1: every token sees the L tokens before it,
  // fewer at the start of the text). If N - 1 < L there is one window of N - 1 tokens.
  // Batch i holds windows [i B, (i + 1) B) (the last batch has fewer rows); every row has
  // reset = true (no memory between windows).
  SlidingStream(torch::Tensor ids, SlidingStreamOptions options);

  std::int64_t size() const { return (n_windows_ + options_.batch_size - 1) / options_.batch_size; }
  std::int64_t n_windows() const { return n_windows_; }
  std::int64_t n_targets() const { return ids_.size(0) - 1; }

  Batch batch(std::int64_t i) const;
  std::optional<Batch> next();
  void rewind() { index_ = 0; }

  StreamState state() const;
  void restore(const StreamState& state);

 private:
  torch::Tensor ids_;
  SlidingStreamOptions options_;
  std::int64_t width_ = 0;  // columns of every window: min(L, N - 1)
  std::int64_t n_windows_ = 0;
  std::uint64_t fingerprint_ = 0;
  std::int64_t epoch_ = 0, index_ = 0;
};

// ------------------------------------------------------------------------ from the config

// The training stream's options from an experiment, with the tokenizer's pad id. (The
// evaluation streams' come from eval::Settings: eval::eval_stream_options.)
TrainStreamOptions train_stream_options(const config::ExperimentConfig& experiment,
                                        std::int64_t pad_id);

}  // namespace txl::data
