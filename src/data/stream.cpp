#include "txl/data/stream.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <utility>

#include "stream_parts.h"
#include "txl/util/error.h"
#include "txl/util/fs.h"
#include "txl/util/log.h"
#include "txl/util/random.h"

namespace txl::data {

namespace {

constexpr double kPi = 3.14159265358979323846;

// Salts that give var_len and roll independent random sequences from one seed.
constexpr std::uint64_t kVarLenSalt = 0x7661726c656e0001ull;
constexpr std::uint64_t kRollSalt = 0x726f6c6c00000002ull;

// SplitMix64, so an epoch plan is the same on every platform (the distributions of <random>
// are implementation-defined).
class Rng : public SplitMix64 {
 public:
  using SplitMix64::SplitMix64;
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
  std::int64_t below(std::int64_t n) {  // [0, n); the modulo bias is below 2^-40 for n < 2^24
    return static_cast<std::int64_t>(next() % static_cast<std::uint64_t>(n));
  }
  double normal(double mean, double stddev) {  // Box-Muller
    const double u1 = 1.0 - uniform();         // (0, 1], so the log is finite
    const double u2 = uniform();
    return mean + stddev * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * kPi * u2);
  }
};

// The generator of one epoch's plan: a pure function of (seed, epoch, purpose).
Rng epoch_rng(std::uint64_t seed, std::int64_t epoch, std::uint64_t salt) {
  Rng mix(seed ^ salt);
  const std::uint64_t a = mix.next();
  Rng mix2(a ^ (static_cast<std::uint64_t>(epoch) * 0xD1B54A32D192ED03ull));
  return Rng(mix2.next());
}

torch::Tensor checked_ids(const torch::Tensor& ids, const char* who) {
  TXL_CHECK(ids.defined(), who, ": token ids are missing (undefined tensor)");
  const auto type = ids.scalar_type();
  TXL_CHECK(
      ids.dim() == 1 && (type == torch::kInt64 || type == torch::kInt32 || type == torch::kInt16),
      who, ": token ids must be a 1-D int64, int32 or int16 tensor [N], got ", type, " of shape ",
      ids.sizes());
  // A cache's ids are a memory map: kept as they are (no copy), batches widen what they read.
  return ids.to(torch::kCPU).contiguous();
}

std::uint64_t geometry_fingerprint(const std::string& description) {
  return fs::fnv1a(description);
}

// How to read one batch out of the token ids. Column c of row b is the input at index
// first[b] + c; it is real in columns [lo[b], hi[b]) and its target (the next token) is scored in

}  // namespace

using detail::ceil_div;
using detail::cut_documents;
using detail::deal_documents;
using detail::document_batch;
using detail::gather;
using detail::kind_name;
using detail::Layout;
using detail::log_document_layout;
using detail::parse_documents;
using detail::segment_layout;
using detail::to_tensor;

namespace {

void check_restorable(const StreamState& state, StreamKind kind, std::uint64_t fingerprint,
                      std::int64_t n_batches) {
  TXL_CHECK(state.kind == kind, "cannot restore a ", kind_name(kind), " stream from a ",
            kind_name(state.kind), " stream's state");
  TXL_CHECK(state.fingerprint == fingerprint, "cannot restore a ", kind_name(kind),
            " stream: its state was saved over other data or options (fingerprint ",
            fs::hex64(state.fingerprint), ", this stream ", fs::hex64(fingerprint),
            "); resume with the same corpus, batch size, segment lengths and stream options");
  TXL_CHECK(state.epoch >= 0, "stream state: epoch = ", state.epoch, " must be >= 0");
  TXL_CHECK(state.index >= 0 && state.index <= n_batches, "stream state: index = ", state.index,
            " is outside the epoch's ", n_batches, " batches");
}

}  // namespace

// ------------------------------------------------------------------------------ TrainStream

TrainStream::TrainStream(torch::Tensor ids, TrainStreamOptions options, torch::Tensor doc_starts)
    : ids_(checked_ids(ids, "TrainStream")), options_(options) {
  const std::int64_t n = ids_.size(0);
  const std::int64_t b = options_.batch_size, q = options_.tgt_len, e = options_.ext_len;
  TXL_CHECK(b >= 1, "train.batch_size = ", b, " must be at least 1");
  TXL_CHECK(q >= 1, "model.tgt_len = ", q, " must be at least 1");
  TXL_CHECK(e >= 0, "model.ext_len = ", e, " must be >= 0 (0 = no extended context)");
  const std::int64_t read_end = options_.read_end < 0 ? b : options_.read_end;
  TXL_CHECK(0 <= options_.read_begin && options_.read_begin <= read_end && read_end <= b,
            "TrainStream: rows to read [", options_.read_begin, ", ", read_end,
            ") outside the batch's ", b);

  std::ostringstream geometry;
  geometry << "train N=" << n << " B=" << b << " Q=" << q << " E=" << e
           << " var_len=" << options_.var_len << " roll=" << options_.roll;

  if (!doc_starts.defined()) {
    TXL_CHECK(n >= q + 1, "model.tgt_len = ", q, " needs at least ", q + 1,
              " tokens (one segment and its last target); the training data has N = ", n);
    length_ = n / b;
    TXL_CHECK(length_ >= q + 1, "train.batch_size = ", b,
              " is larger than the data allows (N = ", n, " tokens): each stream needs at least",
              " model.tgt_len + 1 = ", q + 1, " tokens, so at most ", n / (q + 1),
              " streams fit; lower train.batch_size or model.tgt_len");
  } else {
    TXL_CHECK(!options_.var_len,
              "train.var_len = true is not supported with data.document_mode = true (documents "
              "are laid out in fixed segments of model.tgt_len); set one of them to false");
    docs_ = parse_documents(doc_starts, n, "TrainStream");
    const auto documents = static_cast<std::int64_t>(docs_.begin.size());
    const std::int64_t cuts = cut_documents(docs_, b);
    const auto kept = static_cast<std::int64_t>(docs_.begin.size());
    TXL_CHECK(kept >= b, "train.batch_size = ", b,
              " is larger than the data allows in document mode (N = ", n, " tokens, ", documents,
              " documents of at least 2 tokens, too short to cut into ", b,
              " parts of 2 tokens): every stream needs a document; use train.batch_size <= ", kept);
    if (cuts > 0) {
      log::warn("data",
                "train document mode: {} documents for {} streams: the longest were cut into "
                "contiguous parts ({} cuts), each a document of its own: memory resets at every "
                "part's start and {} fewer targets are scored",
                documents, b, cuts, cuts);
      geometry << " cuts=" << cuts;
    }
    geometry << " docs=" << docs_.given << " kept=" << kept
             << " first_doc_ends=" << docs_.end.front()
             << " last_doc_begins=" << docs_.begin.back();
    fingerprint_ = geometry_fingerprint(geometry.str());
    plan_ = make_plan(0);
    log_document_layout(docs_, plan_.layout, b, q, "train");
    return;
  }
  fingerprint_ = geometry_fingerprint(geometry.str());
  plan_ = make_plan(0);
}

TrainStream::Plan TrainStream::make_plan(std::int64_t epoch) const {
  const std::int64_t b = options_.batch_size, q = options_.tgt_len;
  Plan plan;
  if (docs_.begin.empty()) {
    const std::int64_t targets = length_ - 1;  // per stream
    if (options_.var_len) {
      Rng rng = epoch_rng(options_.seed, epoch, kVarLenSalt);
      const std::int64_t lo = std::min(kVarLenMin, q), hi = q + kVarLenMaxExtra;
      for (std::int64_t p = 0; p < targets;) {
        const double bptt = rng.uniform() < kVarLenHalfProbability ? q / 2.0 : double(q);
        const auto drawn =
            static_cast<std::int64_t>(rng.normal(bptt, kVarLenStd));  // trunc, as int()
        const std::int64_t len = std::min(std::clamp(drawn, lo, hi), targets - p);
        plan.pos.push_back(p);
        plan.len.push_back(len);
        p += len;
      }
    } else {
      for (std::int64_t p = 0; p < targets; p += q) {
        plan.pos.push_back(p);
        plan.len.push_back(std::min(q, targets - p));
      }
    }
    plan.n_batches = static_cast<std::int64_t>(plan.pos.size());
    std::vector<std::int64_t> shift(static_cast<size_t>(b), 0);
    if (options_.roll) {
      Rng rng = epoch_rng(options_.seed, epoch, kRollSalt);
      for (auto& s : shift) s = rng.below(length_);
    }
    plan.shift = to_tensor(shift);
    return plan;
  }

  // Document mode. The order of documents this epoch: rotated to a random first one with roll.
  const auto n_docs = static_cast<std::int64_t>(docs_.begin.size());
  std::int64_t first_doc = 0;
  if (options_.roll) first_doc = epoch_rng(options_.seed, epoch, kRollSalt).below(n_docs);
  plan.layout = deal_documents(docs_, b, q, options_.ext_len, first_doc);
  plan.n_batches = plan.layout.n_batches;
  return plan;
}

std::int64_t TrainStream::batches_in_epoch() const { return plan_.n_batches; }

Batch TrainStream::build(std::int64_t i) const {
  const std::int64_t b = options_.batch_size;
  const bool epoch_start = i == 0;
  if (docs_.begin.empty()) {
    const std::int64_t p = plan_.pos[static_cast<size_t>(i)], q = plan_.len[static_cast<size_t>(i)];
    const std::int64_t e = std::min(options_.ext_len, p);  // context inside the stream
    Layout layout;
    layout.first = plan_.shift + (p - e);                     // [B]
    layout.base = torch::arange(b, torch::kInt64) * length_;  // [B]
    layout.lo = torch::zeros({b}, torch::kInt64);
    layout.hi = torch::full({b}, e + q, torch::kInt64);
    layout.score_lo = torch::full({b}, e, torch::kInt64);
    layout.score_hi = layout.hi;
    layout.reset = torch::full({b}, epoch_start, torch::kBool);
    layout.width = e + q;
    layout.period = length_;
    layout.read_begin = options_.read_begin;
    layout.read_end = options_.read_end;
    return gather(ids_, layout, options_.pad_id, i);
  }
  return document_batch(ids_, plan_.layout, i, options_.pad_id, options_.read_begin,
                        options_.read_end);
}

Batch TrainStream::next() {
  if (index_ >= plan_.n_batches) {
    ++epoch_;
    index_ = 0;
    plan_ = make_plan(epoch_);
  }
  return build(index_++);
}

StreamState TrainStream::state() const {
  return {StreamKind::kTrain, fingerprint_, options_.seed, epoch_, index_};
}

void TrainStream::restore(const StreamState& state) {
  // Kind, fingerprint and epoch first (the batch count of the epoch needs its plan).
  check_restorable(state, StreamKind::kTrain, fingerprint_,
                   std::numeric_limits<std::int64_t>::max());
  TrainStreamOptions adopted = options_;
  adopted.seed = state.seed;
  std::swap(options_, adopted);
  Plan plan;
  try {
    plan = make_plan(state.epoch);
    check_restorable(state, StreamKind::kTrain, fingerprint_, plan.n_batches);
  } catch (...) {
    std::swap(options_, adopted);  // leave the stream as it was
    throw;
  }
  plan_ = std::move(plan);
  epoch_ = state.epoch;
  index_ = state.index;
}

// ------------------------------------------------------------------------------- EvalStream

EvalStream::EvalStream(torch::Tensor ids, EvalStreamOptions options, torch::Tensor doc_starts)
    : ids_(checked_ids(ids, "EvalStream")), options_(options) {
  const std::int64_t n = ids_.size(0);
  const std::int64_t b = options_.batch_size, q = options_.tgt_len;
  TXL_CHECK(b >= 1, "eval.batch_size = ", b, " must be at least 1");
  TXL_CHECK(q >= 1, "eval.tgt_len = ", q, " must be at least 1");
  TXL_CHECK(options_.ext_len >= 0, "model.ext_len = ", options_.ext_len, " must be >= 0");
  TXL_CHECK(options_.warmup >= 0, "eval.warmup = ", options_.warmup,
            " must be >= 0 (0 = no warm-up)");
  TXL_CHECK(n >= 2, "EvalStream: the split has N = ", n,
            " tokens; at least 2 are needed for one target");
  std::ostringstream geometry;
  geometry << "eval N=" << n << " B=" << b << " Q=" << q << " E=" << options_.ext_len
           << " W=" << options_.warmup;
  if (doc_starts.defined()) {
    TXL_CHECK(options_.warmup == 0, "eval.warmup = ", options_.warmup,
              " is not supported with data.document_mode = true (the text before a document "
              "belongs to another document); set eval.warmup = 0");
    docs_ = parse_documents(doc_starts, n, "EvalStream");
    const auto kept = static_cast<std::int64_t>(docs_.begin.size());
    // Fewer documents than rows: the rows without one stay padding (nothing is cut, so every
    // document is scored as it would be alone).
    TXL_CHECK(kept >= 1, "EvalStream: no document of at least 2 tokens (N = ", n, " tokens)");
    layout_ = deal_documents(docs_, b, q, options_.ext_len, 0);
    scored_batches_ = layout_.n_batches;
    geometry << " docs=" << docs_.given << " kept=" << kept
             << " first_doc_ends=" << docs_.end.front()
             << " last_doc_begins=" << docs_.begin.back();
    fingerprint_ = geometry_fingerprint(geometry.str());
    log_document_layout(docs_, layout_, b, q, "eval");
    return;
  }
  const std::int64_t targets = n - 1;
  TXL_CHECK(b <= targets, "eval.batch_size = ", b, " is larger than the data allows (N = ", n,
            " tokens, ", targets, " targets): use eval.batch_size <= ", targets);
  const std::int64_t base = targets / b, extra = targets % b;
  for (std::int64_t r = 0, at = 0; r < b; ++r) {
    const std::int64_t len = base + (r < extra ? 1 : 0);
    begin_.push_back(at);
    end_.push_back(at + len);
    at += len;
  }
  warmup_max_ = std::min(options_.warmup, begin_.back());
  warmup_batches_ = ceil_div(warmup_max_, q);
  scored_batches_ = ceil_div(end_[0] - begin_[0], q);
  fingerprint_ = geometry_fingerprint(geometry.str());
}

Batch EvalStream::batch(std::int64_t i) const {
  TXL_CHECK(i >= 0 && i < size(), "EvalStream: batch ", i, " is outside the pass's ", size(),
            " batches");
  if (document_mode()) return document_batch(ids_, layout_, i, options_.pad_id);
  const std::int64_t b = options_.batch_size, q = options_.tgt_len;
  if (i < warmup_batches_) {
    // Warm-up text [begin_b - w_b, begin_b) laid out right-aligned over the leading batches;
    // batch 0 is the narrow one so that all later ones have width Q.
    const std::int64_t first_width = warmup_max_ - (warmup_batches_ - 1) * q;
    const std::int64_t offset = i == 0 ? 0 : first_width + (i - 1) * q;
    Layout layout;
    layout.width = i == 0 ? first_width : q;
    auto begin = to_tensor(begin_);                     // [B]
    auto available = begin.clamp_max(options_.warmup);  // [B] w_b
    layout.first = begin - warmup_max_ + offset;        // [B]
    layout.lo = (begin - available - layout.first).clamp(0, layout.width);
    layout.hi = torch::full({b}, layout.width, torch::kInt64);
    layout.score_lo = torch::zeros({b}, torch::kInt64);
    layout.score_hi = layout.score_lo;
    layout.reset = torch::full({b}, i == 0, torch::kBool);
    return gather(ids_, layout, options_.pad_id, i);
  }
  const std::int64_t j = i - warmup_batches_;
  std::vector<std::int64_t> starts(b), n(b), context(b);
  auto reset = torch::empty({b}, torch::kBool);  // [B]
  auto* reset_data = reset.data_ptr<bool>();
  for (std::int64_t r = 0; r < b; ++r) {
    const std::int64_t s = begin_[r] + j * q;
    starts[r] = s;
    n[r] = std::clamp<std::int64_t>(end_[r] - s, 0, q);
    context[r] = n[r] > 0 ? std::min(options_.ext_len, s) : 0;
    // A row continues its warm-up memory; without warm-up text it starts fresh.
    reset_data[r] = j == 0 && (warmup_batches_ == 0 || std::min(options_.warmup, begin_[r]) == 0);
  }
  return gather(ids_, segment_layout(starts, n, context, reset), options_.pad_id, i);
}

EvalStream::RowTargets EvalStream::row_targets(std::int64_t i) const {
  TXL_CHECK(document_mode(), "EvalStream: row_targets is for document mode");
  TXL_CHECK(i >= 0 && i < size(), "EvalStream: batch ", i, " is outside the pass's ", size(),
            " batches");
  const auto rows = layout_.rows(i);
  return {torch::tensor(rows.starts, torch::kInt64), torch::tensor(rows.lengths, torch::kInt64)};
}

std::int64_t EvalStream::n_targets() const {
  return document_mode() ? docs_.targets : ids_.size(0) - 1;
}

std::optional<Batch> EvalStream::next() {
  if (index_ >= size()) {
    ++epoch_;
    index_ = 0;
    return std::nullopt;
  }
  return batch(index_++);
}

StreamState EvalStream::state() const {
  return {StreamKind::kEval, fingerprint_, 0, epoch_, index_};
}

void EvalStream::restore(const StreamState& state) {
  check_restorable(state, StreamKind::kEval, fingerprint_, size());
  epoch_ = state.epoch;
  index_ = state.index;
}

// ---------------------------------------------------------------------------- SlidingStream

SlidingStream::SlidingStream(torch::Tensor ids, SlidingStreamOptions options)
    : ids_(checked_ids(ids, "SlidingStream")), options_(options) {
  const std::int64_t n = ids_.size(0);
  const std::int64_t l = options_.window, s = options_.stride;
  TXL_CHECK(options_.batch_size >= 1, "eval.batch_size = ", options_.batch_size,
            " must be at least 1");
  TXL_CHECK(l >= 1, "eval.window = ", l, " must be at least 1");
  TXL_CHECK(s >= 1, "eval.stride = ", s, " must be at least 1");
  TXL_CHECK(s <= l, "eval.stride = ", s, " is larger than eval.window = ", l,
            ": windows would skip targets; use eval.stride <= eval.window");
  TXL_CHECK(n >= 2, "SlidingStream: the split has N = ", n,
            " tokens; at least 2 are needed for one target");
  width_ = std::min(l, n - 1);
  n_windows_ = 1 + ceil_div(std::max<std::int64_t>(0, n - 1 - l), s);
  std::ostringstream geometry;
  geometry << "sliding N=" << n << " B=" << options_.batch_size << " L=" << l << " s=" << s;
  fingerprint_ = geometry_fingerprint(geometry.str());
}

Batch SlidingStream::batch(std::int64_t i) const {
  TXL_CHECK(i >= 0 && i < size(), "SlidingStream: batch ", i, " is outside the pass's ", size(),
            " batches");
  const std::int64_t n = ids_.size(0), l = options_.window, s = options_.stride;
  const std::int64_t k0 = i * options_.batch_size;
  const std::int64_t rows = std::min(options_.batch_size, n_windows_ - k0);
  auto k = torch::arange(k0, k0 + rows, torch::kInt64);                            // [B]
  auto end = (k * s + l).clamp_max(n - 1);                                         // [B]
  auto previous_end = ((k - 1) * s + l).clamp_max(n - 1).masked_fill(k.eq(0), 0);  // [B]
  Layout layout;
  layout.width = width_;
  layout.first = end - width_;
  layout.lo = torch::zeros({rows}, torch::kInt64);
  layout.hi = torch::full({rows}, width_, torch::kInt64);
  layout.score_lo = previous_end - layout.first;
  layout.score_hi = layout.hi;
  layout.reset = torch::ones({rows}, torch::kBool);
  return gather(ids_, layout, options_.pad_id, i);
}

std::optional<Batch> SlidingStream::next() {
  if (index_ >= size()) {
    ++epoch_;
    index_ = 0;
    return std::nullopt;
  }
  return batch(index_++);
}

StreamState SlidingStream::state() const {
  return {StreamKind::kSliding, fingerprint_, 0, epoch_, index_};
}

void SlidingStream::restore(const StreamState& state) {
  check_restorable(state, StreamKind::kSliding, fingerprint_, size());
  epoch_ = state.epoch;
  index_ = state.index;
}

// --------------------------------------------------------------------------- from the config

TrainStreamOptions train_stream_options(const config::ExperimentConfig& experiment,
                                        std::int64_t pad_id) {
  TrainStreamOptions options;
  options.batch_size = experiment.train.batch_size;
  options.tgt_len = experiment.model.tgt_len;
  options.ext_len = experiment.model.ext_len;
  options.var_len = experiment.train.var_len;
  options.roll = experiment.train.roll;
  options.seed = experiment.run.seed;
  options.pad_id = pad_id;
  return options;
}

}  // namespace txl::data
