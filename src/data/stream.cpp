#include "txl/data/stream.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <queue>
#include <sstream>
#include <utility>

#include "txl/util/device_traffic.h"
#include "txl/util/error.h"
#include "txl/util/fs.h"
#include "txl/util/log.h"
#include "txl/util/random.h"

namespace txl::data {

namespace {

constexpr std::int64_t kStateVersion = 1;
constexpr const char* kStateMagic = "txl-stream-v1";
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

const char* kind_name(StreamKind kind) {
  switch (kind) {
    case StreamKind::kTrain:
      return "train";
    case StreamKind::kEval:
      return "eval";
    case StreamKind::kSliding:
      return "sliding";
  }
  return "?";
}

StreamKind kind_from_int(std::int64_t value) {
  TXL_CHECK(value >= 1 && value <= 3, "stream state: unknown stream kind ", value,
            " (1 train, 2 eval, 3 sliding); the state is corrupt or from another program");
  return static_cast<StreamKind>(value);
}

torch::Tensor checked_ids(const torch::Tensor& ids, const char* who) {
  TXL_CHECK(ids.defined(), who, ": token ids are missing (undefined tensor)");
  TXL_CHECK(ids.dim() == 1 && ids.scalar_type() == torch::kInt64, who,
            ": token ids must be a 1-D int64 tensor [N], got ", ids.scalar_type(), " of shape ",
            ids.sizes());
  return ids.to(torch::kCPU).contiguous();
}

torch::Tensor to_tensor(const std::vector<std::int64_t>& values) {
  return torch::tensor(values, torch::kInt64);
}

std::uint64_t geometry_fingerprint(const std::string& description) {
  return fs::fnv1a(description);
}

// How to read one batch out of the token ids. Column c of row b is the input at index
// first[b] + c; it is real in columns [lo[b], hi[b]) and its target (the next token) is scored in
// columns [score_lo[b], score_hi[b]). With period > 0 the row is a rolled stream: column c reads
// base[b] + (first[b] + c) mod period, and the target after the stream's last token is unscored.
struct Layout {
  torch::Tensor first, base, lo, hi, score_lo, score_hi;  // int64 [B]
  torch::Tensor reset;                                    // bool [B]
  std::int64_t width = 0;                                 // T
  std::int64_t period = 0;
};

Batch gather(const torch::Tensor& ids, const Layout& layout, std::int64_t pad_id,
             std::int64_t index) {
  auto col = torch::arange(layout.width, torch::kInt64).unsqueeze(0);  // [1, T]
  auto input_mask =
      col.ge(layout.lo.unsqueeze(1)).logical_and(col.lt(layout.hi.unsqueeze(1)));  // [B, T]
  auto target_mask = col.ge(layout.score_lo.unsqueeze(1))
                         .logical_and(col.lt(layout.score_hi.unsqueeze(1)))
                         .logical_and(input_mask);  // [B, T]
  auto pos = layout.first.unsqueeze(1) + col;       // [B, T]
  torch::Tensor input_index, target_index;
  if (layout.period > 0) {
    auto local = pos.remainder(layout.period);                                       // [B, T]
    input_index = layout.base.unsqueeze(1) + local;                                  // [B, T]
    target_index = layout.base.unsqueeze(1) + (local + 1).remainder(layout.period);  // [B, T]
    // The rolled stream's seam: its last token is followed by its first, not by real text.
    target_mask = target_mask.logical_and(local.ne(layout.period - 1));
  } else {
    input_index = pos;
    target_index = pos + 1;
  }
  auto take = [&](const torch::Tensor& index_bt, const torch::Tensor& mask) {
    auto hidden = mask.logical_not();
    auto safe = index_bt.masked_fill(hidden, 0);  // [B, T]
    return ids.index_select(0, safe.reshape(-1)).view(index_bt.sizes()).masked_fill(hidden, pad_id);
  };
  Batch batch;
  batch.tokens = take(input_index, input_mask);     // [B, T]
  batch.targets = take(target_index, target_mask);  // [B, T]
  batch.input_mask = input_mask;
  batch.target_mask = target_mask;
  batch.reset = layout.reset;
  {
    TXL_HOST_ONLY_SCOPE();  // a stream's ids are on the CPU (checked_ids)
    batch.n_scored = target_mask.sum().item<std::int64_t>();
  }
  batch.index = index;
  return batch;
}

// Rows whose first input is at starts[b], with n[b] real inputs (all scored) preceded by up to
// context[b] unscored ones: columns [E - context[b], E) are the context, [E, E + n[b]) the
// segment, where E = max context; shorter rows are padded on both sides.
Layout segment_layout(const std::vector<std::int64_t>& starts, const std::vector<std::int64_t>& n,
                      const std::vector<std::int64_t>& context, torch::Tensor reset) {
  const std::int64_t e = *std::max_element(context.begin(), context.end());
  const std::int64_t q = *std::max_element(n.begin(), n.end());
  Layout layout;
  auto start_t = to_tensor(starts), n_t = to_tensor(n), ctx_t = to_tensor(context);  // [B]
  layout.first = start_t - e;
  layout.lo = e - ctx_t;
  layout.hi = n_t + e;
  layout.score_lo = torch::full_like(n_t, e);
  layout.score_hi = layout.hi;
  layout.reset = std::move(reset);
  layout.width = e + q;
  return layout;
}

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// Checks doc_starts and keeps the documents that have a target.
detail::Documents parse_documents(const torch::Tensor& doc_starts, std::int64_t n,
                                  const char* who) {
  TXL_CHECK(doc_starts.dim() == 1 && doc_starts.scalar_type() == torch::kInt64, who,
            ": doc_starts must be a 1-D int64 tensor, got ", doc_starts.scalar_type(), " of shape ",
            doc_starts.sizes());
  auto starts = doc_starts.to(torch::kCPU).contiguous();
  const auto* s = starts.data_ptr<std::int64_t>();
  detail::Documents docs;
  docs.given = starts.size(0);
  TXL_CHECK(docs.given >= 1 && s[0] == 0, who,
            ": doc_starts must begin with 0 (the first document starts the corpus)");
  for (std::int64_t d = 0; d < docs.given; ++d) {
    const std::int64_t begin = s[d], end = d + 1 < docs.given ? s[d + 1] : n;
    TXL_CHECK(end > begin && end <= n, who,
              ": doc_starts must be strictly increasing offsets below N = ", n, "; entry ", d,
              " = ", begin, " is followed by ", end);
    if (end - begin < 2) continue;  // no target inside the document
    docs.begin.push_back(begin);
    docs.end.push_back(end);
    docs.targets += end - begin - 1;
  }
  return docs;
}

// Training in document mode with fewer documents than streams: the longest document (the first
// of equally long ones) is cut into two contiguous halves until every stream has one or no
// document has 4 tokens (2 per part); each part is then a document of its own (memory resets at
// its start, its first token is no target). Returns the number of cuts.
std::int64_t cut_documents(detail::Documents& docs, std::int64_t streams) {
  std::int64_t cuts = 0;
  while (static_cast<std::int64_t>(docs.begin.size()) < streams) {
    size_t longest = 0;
    for (size_t d = 1; d < docs.begin.size(); ++d) {
      if (docs.end[d] - docs.begin[d] > docs.end[longest] - docs.begin[longest]) longest = d;
    }
    const std::int64_t length = docs.end[longest] - docs.begin[longest];
    if (length < 4) break;
    const std::int64_t middle = docs.begin[longest] + length / 2;
    docs.end.insert(docs.end.begin() + static_cast<std::ptrdiff_t>(longest), middle);
    docs.begin.insert(docs.begin.begin() + static_cast<std::ptrdiff_t>(longest) + 1, middle);
    docs.targets -= 1;  // the second part's first token
    ++cuts;
  }
  return cuts;
}

// Deals the documents, starting from document `first_doc` and wrapping around, each to the
// stream that is shortest so far (ties: the lowest stream index), in segments of q targets with
// up to e tokens of context from inside the document.
detail::DocumentLayout deal_documents(const detail::Documents& docs, std::int64_t b, std::int64_t q,
                                      std::int64_t e, std::int64_t first_doc) {
  const auto n_docs = static_cast<std::int64_t>(docs.begin.size());
  using Slot = std::pair<std::int64_t, std::int64_t>;  // (segments so far, stream)
  std::priority_queue<Slot, std::vector<Slot>, std::greater<Slot>> shortest;
  for (std::int64_t r = 0; r < b; ++r) shortest.push({0, r});
  std::vector<std::int64_t> doc_stream(static_cast<size_t>(n_docs)),
      doc_slot(static_cast<size_t>(n_docs));
  detail::DocumentLayout layout;
  for (std::int64_t k = 0; k < n_docs; ++k) {
    const auto d = static_cast<size_t>((first_doc + k) % n_docs);
    const auto [at, row] = shortest.top();
    shortest.pop();
    doc_stream[d] = row;
    doc_slot[d] = at;
    const std::int64_t segments = ceil_div(docs.end[d] - docs.begin[d] - 1, q);
    shortest.push({at + segments, row});
    layout.n_batches = std::max(layout.n_batches, at + segments);
  }
  layout.starts = torch::zeros({layout.n_batches, b}, torch::kInt64);
  layout.lengths = torch::zeros({layout.n_batches, b}, torch::kInt64);
  layout.context = torch::zeros({layout.n_batches, b}, torch::kInt64);
  layout.resets = torch::zeros({layout.n_batches, b}, torch::kBool);
  auto* starts = layout.starts.data_ptr<std::int64_t>();
  auto* lengths = layout.lengths.data_ptr<std::int64_t>();
  auto* context = layout.context.data_ptr<std::int64_t>();
  auto* resets = layout.resets.data_ptr<bool>();
  // One pass over segments (about N / Q of them), not over tokens.
  for (size_t d = 0; d < static_cast<size_t>(n_docs); ++d) {
    const std::int64_t targets = docs.end[d] - docs.begin[d] - 1;
    for (std::int64_t k = 0; k * q < targets; ++k) {
      const std::int64_t cell = (doc_slot[d] + k) * b + doc_stream[d];
      starts[cell] = docs.begin[d] + k * q;
      lengths[cell] = std::min(q, targets - k * q);
      context[cell] = std::min(e, k * q);
      resets[cell] = k == 0;
    }
  }
  return layout;
}

void log_document_layout(const detail::Documents& docs, const detail::DocumentLayout& layout,
                         std::int64_t b, std::int64_t q, const char* what) {
  const std::int64_t slots = layout.n_batches * b * q;
  log::info("data",
            "{} document mode: {} documents in {} streams, {} batches of {} tokens; padding "
            "overhead {:.1f}% ({} of {} target slots)",
            what, docs.begin.size(), b, layout.n_batches, q, 100.0 * (slots - docs.targets) / slots,
            slots - docs.targets, slots);
}

// Batch i of a document layout; every row of batch 0 is reset.
Batch document_batch(const torch::Tensor& ids, const detail::DocumentLayout& layout, std::int64_t i,
                     std::int64_t pad_id) {
  const std::int64_t b = layout.starts.size(1);
  auto row = [&](const torch::Tensor& table) {
    auto r = table[i].contiguous();
    return std::vector<std::int64_t>(r.data_ptr<std::int64_t>(), r.data_ptr<std::int64_t>() + b);
  };
  auto reset = layout.resets[i].clone();  // [B]
  if (i == 0) reset.fill_(true);
  return gather(ids,
                segment_layout(row(layout.starts), row(layout.lengths), row(layout.context), reset),
                pad_id, i);
}

}  // namespace

// ------------------------------------------------------------------------------ StreamState

std::string StreamState::to_string() const {
  std::ostringstream out;
  out << kStateMagic << " kind=" << kind_name(kind) << " fingerprint=" << fs::hex64(fingerprint)
      << " seed=" << seed << " epoch=" << epoch << " index=" << index;
  return out.str();
}

StreamState StreamState::from_string(const std::string& text) {
  std::istringstream in(text);
  std::string magic;
  in >> magic;
  TXL_CHECK(magic == kStateMagic, "stream state \"", text, "\": expected it to start with ",
            kStateMagic, "; it is corrupt or was written by another version");
  StreamState state;
  bool seen[5] = {false, false, false, false, false};
  std::string field;
  while (in >> field) {
    const auto eq = field.find('=');
    TXL_CHECK(eq != std::string::npos, "stream state \"", text, "\": field \"", field,
              "\" is not key=value");
    const std::string key = field.substr(0, eq), value = field.substr(eq + 1);
    try {
      size_t used = 0;
      if (key == "kind") {
        if (value == "train")
          state.kind = StreamKind::kTrain;
        else if (value == "eval")
          state.kind = StreamKind::kEval;
        else if (value == "sliding")
          state.kind = StreamKind::kSliding;
        else
          TXL_FAIL("stream state: kind = ", value, " (allowed: train, eval, sliding)");
        used = value.size();
        seen[0] = true;
      } else if (key == "fingerprint") {
        state.fingerprint = std::stoull(value, &used, 16);
        seen[1] = true;
      } else if (key == "seed") {
        state.seed = std::stoull(value, &used, 10);
        seen[2] = true;
      } else if (key == "epoch") {
        state.epoch = std::stoll(value, &used, 10);
        seen[3] = true;
      } else if (key == "index") {
        state.index = std::stoll(value, &used, 10);
        seen[4] = true;
      } else {
        TXL_FAIL("stream state \"", text, "\": unknown field \"", key, "\"");
      }
      TXL_CHECK(used == value.size(), "stream state \"", text, "\": bad value in \"", field, "\"");
    } catch (const std::logic_error&) {  // stoull / stoll: not a number or out of range
      TXL_FAIL("stream state \"", text, "\": bad value in \"", field, "\"");
    }
  }
  const char* names[5] = {"kind", "fingerprint", "seed", "epoch", "index"};
  for (int k = 0; k < 5; ++k) {
    TXL_CHECK(seen[k], "stream state \"", text, "\": field \"", names[k], "\" is missing");
  }
  return state;
}

torch::Tensor StreamState::to_tensor() const {
  return torch::tensor(
      {kStateVersion, static_cast<std::int64_t>(kind), static_cast<std::int64_t>(fingerprint),
       static_cast<std::int64_t>(seed), epoch, index},
      torch::kInt64);
}

StreamState StreamState::from_tensor(const torch::Tensor& flat) {
  TXL_CHECK(
      flat.defined() && flat.dim() == 1 && flat.size(0) == 6 && flat.scalar_type() == torch::kInt64,
      "stream state tensor must be int64 [6], got ",
      flat.defined() ? c10::toString(flat.scalar_type()) : "undefined", " of shape ",
      flat.defined() ? flat.sizes() : at::IntArrayRef{});
  auto v = flat.to(torch::kCPU).contiguous();
  const auto* p = v.data_ptr<std::int64_t>();
  TXL_CHECK(p[0] == kStateVersion, "stream state tensor has version ", p[0], ", this build reads ",
            kStateVersion);
  StreamState state;
  state.kind = kind_from_int(p[1]);
  state.fingerprint = static_cast<std::uint64_t>(p[2]);
  state.seed = static_cast<std::uint64_t>(p[3]);
  state.epoch = p[4];
  state.index = p[5];
  return state;
}

bool StreamState::operator==(const StreamState& other) const {
  return kind == other.kind && fingerprint == other.fingerprint && seed == other.seed &&
         epoch == other.epoch && index == other.index;
}

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
              " parts of 2 tokens): every stream needs a document; use train.batch_size <= ",
              kept);
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
    return gather(ids_, layout, options_.pad_id, i);
  }
  return document_batch(ids_, plan_.layout, i, options_.pad_id);
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
