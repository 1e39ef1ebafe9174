#include "txl/data/stream.h"

#include <set>

#include "support/test_support.h"

namespace {

using txl::data::Batch;
using txl::data::EvalStream;
using txl::data::EvalStreamOptions;
using txl::data::SlidingStream;
using txl::data::SlidingStreamOptions;
using txl::data::StreamState;
using txl::data::TrainStream;
using txl::data::TrainStreamOptions;
using txl::test::tensor_equal;

constexpr int P = -1;  // pad id; the corpora below are arange(N), so ids are >= 0

torch::Tensor corpus(std::int64_t n) { return torch::arange(n, torch::kInt64); }
torch::Tensor longs(std::vector<std::int64_t> values) {
  return torch::tensor(values, torch::kInt64);
}

TrainStreamOptions train_options(std::int64_t b, std::int64_t q, std::int64_t e = 0) {
  TrainStreamOptions o;
  o.batch_size = b;
  o.tgt_len = q;
  o.ext_len = e;
  o.pad_id = P;
  return o;
}

EvalStreamOptions eval_options(std::int64_t b, std::int64_t q, std::int64_t e = 0,
                               std::int64_t w = 0) {
  EvalStreamOptions o;
  o.batch_size = b;
  o.tgt_len = q;
  o.ext_len = e;
  o.warmup = w;
  o.pad_id = P;
  return o;
}

SlidingStreamOptions sliding_options(std::int64_t b, std::int64_t l, std::int64_t s) {
  SlidingStreamOptions o;
  o.batch_size = b;
  o.window = l;
  o.stride = s;
  o.pad_id = P;
  return o;
}

// Invariants every batch must satisfy, whatever the stream: shapes and dtypes, PAD exactly where
// masked, scored targets only on real inputs, n_scored the mask's count, and (arange corpora)
// every scored target is the token after its input.
void expect_well_formed(const Batch& batch) {
  const auto b = batch.tokens.size(0), t = batch.tokens.size(1);
  ASSERT_EQ(batch.tokens.scalar_type(), torch::kInt64);
  ASSERT_EQ(batch.targets.scalar_type(), torch::kInt64);
  ASSERT_EQ(batch.input_mask.scalar_type(), torch::kBool);
  ASSERT_EQ(batch.target_mask.scalar_type(), torch::kBool);
  ASSERT_EQ(batch.reset.scalar_type(), torch::kBool);
  ASSERT_EQ(batch.targets.sizes(), batch.tokens.sizes());
  ASSERT_EQ(batch.input_mask.sizes(), batch.tokens.sizes());
  ASSERT_EQ(batch.target_mask.sizes(), batch.tokens.sizes());
  ASSERT_EQ(batch.reset.sizes(), (std::vector<int64_t>{b}));
  EXPECT_GT(t, 0);
  EXPECT_TRUE(tensor_equal(batch.tokens.eq(P), batch.input_mask.logical_not()));
  EXPECT_TRUE(tensor_equal(batch.targets.eq(P), batch.target_mask.logical_not()));
  EXPECT_FALSE(batch.target_mask.logical_and(batch.input_mask.logical_not()).any().item<bool>());
  EXPECT_EQ(batch.n_scored, batch.target_mask.sum().item<int64_t>());
  auto shifted = (batch.tokens + 1).masked_select(batch.target_mask);
  EXPECT_TRUE(tensor_equal(batch.targets.masked_select(batch.target_mask), shifted));
}

void expect_same_batch(const Batch& a, const Batch& b) {
  EXPECT_TRUE(tensor_equal(a.tokens, b.tokens));
  EXPECT_TRUE(tensor_equal(a.targets, b.targets));
  EXPECT_TRUE(tensor_equal(a.input_mask, b.input_mask));
  EXPECT_TRUE(tensor_equal(a.target_mask, b.target_mask));
  EXPECT_TRUE(tensor_equal(a.reset, b.reset));
  EXPECT_EQ(a.n_scored, b.n_scored);
  EXPECT_EQ(a.index, b.index);
}

// How many times each token position of an arange corpus of n tokens is a scored target.
void count_scored(const Batch& batch, torch::Tensor& counts) {
  auto scored = batch.targets.masked_select(batch.target_mask);
  counts.index_add_(0, scored, torch::ones_like(scored));
}

// ---------------------------------------------------------------------------- TrainStream

TEST(TrainStream, ExactBatchesOfATinyCorpus) {
  // N = 11, B = 2: streams 0..4 and 5..9 (L = 5; token 10 is the dropped remainder); each
  // stream has 4 targets, so Q = 2 gives 2 batches per epoch.
  TrainStream stream(corpus(11), train_options(2, 2));
  EXPECT_EQ(stream.stream_length(), 5);
  EXPECT_EQ(stream.batches_in_epoch(), 2);
  auto b0 = stream.next();
  expect_well_formed(b0);
  EXPECT_TRUE(tensor_equal(b0.tokens, torch::tensor({{0, 1}, {5, 6}})));
  EXPECT_TRUE(tensor_equal(b0.targets, torch::tensor({{1, 2}, {6, 7}})));
  EXPECT_TRUE(b0.input_mask.all().item<bool>());
  EXPECT_TRUE(b0.target_mask.all().item<bool>());
  EXPECT_TRUE(tensor_equal(b0.reset, torch::tensor({1, 1})));
  EXPECT_EQ(b0.n_scored, 4);
  EXPECT_EQ(b0.index, 0);
  auto b1 = stream.next();
  EXPECT_TRUE(tensor_equal(b1.tokens, torch::tensor({{2, 3}, {7, 8}})));
  EXPECT_TRUE(tensor_equal(b1.targets, torch::tensor({{3, 4}, {8, 9}})));
  EXPECT_TRUE(tensor_equal(b1.reset, torch::tensor({0, 0})));
  EXPECT_EQ(b1.index, 1);
  EXPECT_EQ(stream.epoch(), 0);
  // The next call wraps into epoch 1 and starts over, with every row reset.
  auto again = stream.next();
  EXPECT_EQ(stream.epoch(), 1);
  expect_same_batch(again, b0);
}

TEST(TrainStream, LastSegmentOfAnEpochIsShorterNotPadded) {
  // L = 5 gives 4 targets per stream; Q = 3 gives segments of 3 and 1 (the paper's iterator).
  TrainStream stream(corpus(11), train_options(2, 3));
  auto b0 = stream.next();
  EXPECT_TRUE(tensor_equal(b0.tokens, torch::tensor({{0, 1, 2}, {5, 6, 7}})));
  auto b1 = stream.next();
  EXPECT_TRUE(tensor_equal(b1.tokens, torch::tensor({{3}, {8}})));
  EXPECT_TRUE(tensor_equal(b1.targets, torch::tensor({{4}, {9}})));
  EXPECT_EQ(b1.n_scored, 2);
}

TEST(TrainStream, ConsecutiveBatchesContinueEveryStream) {
  const int64_t n = 1003, b = 4, q = 7;
  TrainStream stream(corpus(n), train_options(b, q));
  const int64_t l = n / b;
  auto counts = torch::zeros({n}, torch::kInt64);
  Batch previous;
  int64_t scored = 0;
  for (int64_t i = 0; i < stream.batches_in_epoch(); ++i) {
    auto batch = stream.next();
    expect_well_formed(batch);
    count_scored(batch, counts);
    scored += batch.n_scored;
    if (i > 0) {
      // The first token of stream r in batch i follows the last one of batch i - 1.
      auto last = previous.tokens.select(1, previous.tokens.size(1) - 1);
      EXPECT_TRUE(tensor_equal(batch.tokens.select(1, 0), last + 1)) << "batch " << i;
      EXPECT_FALSE(batch.reset.any().item<bool>());
    }
    previous = batch;
  }
  EXPECT_EQ(scored, b * (l - 1));
  // Each stream's targets are positions r L + 1 .. r L + L - 1, each exactly once.
  for (int64_t r = 0; r < b; ++r) {
    EXPECT_EQ(counts[r * l].item<int64_t>(), 0);
    EXPECT_TRUE(counts.slice(0, r * l + 1, (r + 1) * l).eq(1).all().item<bool>()) << "stream " << r;
  }
  EXPECT_EQ(counts.slice(0, b * l).sum().item<int64_t>(), 0);  // the dropped remainder
}

TEST(TrainStream, ExtLenPrependsUnscoredContextFromTheSameStream) {
  // L = 10 per stream, Q = 3, E = 2: batch 0 has no context; later batches have 2 columns.
  TrainStream stream(corpus(21), train_options(2, 3, 2));
  auto b0 = stream.next();
  EXPECT_TRUE(tensor_equal(b0.tokens, torch::tensor({{0, 1, 2}, {10, 11, 12}})));
  auto b1 = stream.next();
  expect_well_formed(b1);
  EXPECT_TRUE(tensor_equal(b1.tokens, torch::tensor({{1, 2, 3, 4, 5}, {11, 12, 13, 14, 15}})));
  EXPECT_TRUE(tensor_equal(b1.targets, torch::tensor({{P, P, 4, 5, 6}, {P, P, 14, 15, 16}})));
  EXPECT_TRUE(b1.input_mask.all().item<bool>());
  EXPECT_TRUE(tensor_equal(b1.target_mask, torch::tensor({{0, 0, 1, 1, 1}, {0, 0, 1, 1, 1}})));
  EXPECT_EQ(b1.n_scored, 6);
  // The scored targets of the epoch are still each stream's targets exactly once.
  auto counts = torch::zeros({21}, torch::kInt64);
  count_scored(b0, counts);
  count_scored(b1, counts);
  for (int64_t i = 2; i < stream.batches_in_epoch(); ++i) count_scored(stream.next(), counts);
  EXPECT_TRUE(tensor_equal(
      counts, torch::tensor({0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0})));
}

// The segment lengths of the stream's next epoch (from its first batch to its last).
std::vector<int64_t> epoch_lengths(TrainStream& stream) {
  const int64_t b = stream.options().batch_size;
  auto first = stream.next();  // wraps into the next epoch if the current one is over
  EXPECT_EQ(first.index, 0);
  std::vector<int64_t> lengths = {first.n_scored / b};
  while (stream.index() < stream.batches_in_epoch()) lengths.push_back(stream.next().n_scored / b);
  return lengths;
}

TEST(TrainStream, VarLenIsDeterministicAndBounded) {
  const int64_t n = 20002, b = 2, q = 30;
  auto options = train_options(b, q);
  options.var_len = true;
  options.seed = 7;
  TrainStream first(corpus(n), options), second(corpus(n), options);
  auto lengths = epoch_lengths(first);
  EXPECT_EQ(lengths, epoch_lengths(second));
  int64_t total = 0, halves = 0, above = 0;
  for (size_t i = 0; i < lengths.size(); ++i) {
    total += lengths[i];
    if (i + 1 < lengths.size()) {  // the last one is cut to what is left
      EXPECT_GE(lengths[i], 5);
      EXPECT_LE(lengths[i], q + 20);
    }
    halves += lengths[i] <= q / 2 + 5;  // drawn around Q / 2 (5% of batches; 2% of the others)
    above += lengths[i] > q;
  }
  EXPECT_EQ(total, n / b - 1);  // every target of each stream, once
  const double mean = double(total) / lengths.size();
  EXPECT_GT(mean, 0.85 * q);
  EXPECT_LT(mean, 1.05 * q);
  EXPECT_GT(halves, 0);
  EXPECT_GT(above, 0);
  // Each batch continues its streams, whatever its length.
  TrainStream third(corpus(n), options);
  auto a = third.next(), c = third.next();
  EXPECT_TRUE(tensor_equal(c.tokens.select(1, 0), a.tokens.select(1, a.tokens.size(1) - 1) + 1));
  // Another epoch draws another schedule; another seed another one again.
  EXPECT_NE(epoch_lengths(first), lengths);
  options.seed = 8;
  TrainStream other(corpus(n), options);
  EXPECT_NE(epoch_lengths(other), lengths);
}

TEST(TrainStream, RollRotatesStreamsDeterministicallyPerEpoch) {
  const int64_t n = 403, b = 4, q = 9, l = n / b;
  auto options = train_options(b, q);
  options.roll = true;
  options.seed = 11;
  TrainStream stream(corpus(n), options), twin(corpus(n), options);
  std::vector<torch::Tensor> firsts;
  for (int epoch = 0; epoch < 3; ++epoch) {
    std::vector<torch::Tensor> inputs;  // per batch [B, T]
    auto counts = torch::zeros({n}, torch::kInt64);
    for (int64_t i = 0; i < stream.batches_in_epoch(); ++i) {
      auto batch = stream.next();
      expect_well_formed(batch);
      expect_same_batch(batch, twin.next());
      count_scored(batch, counts);
      inputs.push_back(batch.tokens);
    }
    auto seq = torch::cat(inputs, 1);  // [B, L - 1] each stream's inputs over the epoch
    ASSERT_EQ(seq.size(1), l - 1);
    firsts.push_back(seq.select(1, 0));
    for (int64_t r = 0; r < b; ++r) {
      auto row = seq[r] - r * l;  // stream-local positions
      EXPECT_TRUE(row.ge(0).logical_and(row.lt(l)).all().item<bool>());
      // A rotation: each next input is the next stream position, modulo L.
      auto steps = (row.slice(0, 1) - row.slice(0, 0, -1)).remainder(l);
      EXPECT_TRUE(steps.eq(1).all().item<bool>()) << "epoch " << epoch << " stream " << r;
      // Every target of the stream once, except the stream's first token, which after the
      // seam would follow the last one: that target is not scored.
      auto local_counts = counts.slice(0, r * l, (r + 1) * l);
      EXPECT_EQ(local_counts[0].item<int64_t>(), 0);
      EXPECT_TRUE(local_counts.slice(0, 1).le(1).all().item<bool>());
      const int64_t shift = row[0].item<int64_t>();
      EXPECT_EQ(local_counts.sum().item<int64_t>(), shift == 0 ? l - 1 : l - 2);
    }
  }
  EXPECT_FALSE(tensor_equal(firsts[0], firsts[1]));  // a new roll each epoch
  EXPECT_FALSE(tensor_equal(firsts[1], firsts[2]));
  options.seed = 12;
  TrainStream other(corpus(n), options);
  EXPECT_FALSE(tensor_equal(other.next().tokens.select(1, 0), firsts[0]));
}

// Documents of arange(30): [0, 5) [5, 7) [7, 8) [8, 20) [20, 30). The one-token document [7, 8)
// has no target and is skipped.
torch::Tensor doc_starts() { return longs({0, 5, 7, 8, 20}); }

TEST(TrainStream, DocumentModeStartsEveryDocumentAtASegmentBoundary) {
  // Q = 4: segments per document 1, 1, -, 3, 3. Dealt shortest-first: doc 0 -> stream 0,
  // doc 1 -> stream 1, doc 3 -> stream 0 (tie, lowest index), doc 4 -> stream 1.
  TrainStream stream(corpus(30), train_options(2, 4), doc_starts());
  ASSERT_TRUE(stream.document_mode());
  ASSERT_EQ(stream.batches_in_epoch(), 4);
  std::vector<Batch> batches;
  for (int i = 0; i < 4; ++i) {
    batches.push_back(stream.next());
    expect_well_formed(batches.back());
  }
  EXPECT_TRUE(tensor_equal(batches[0].tokens, torch::tensor({{0, 1, 2, 3}, {5, P, P, P}})));
  EXPECT_TRUE(tensor_equal(batches[0].targets, torch::tensor({{1, 2, 3, 4}, {6, P, P, P}})));
  EXPECT_TRUE(tensor_equal(batches[0].input_mask, torch::tensor({{1, 1, 1, 1}, {1, 0, 0, 0}})));
  EXPECT_TRUE(tensor_equal(batches[0].reset, torch::tensor({1, 1})));
  EXPECT_TRUE(tensor_equal(batches[1].tokens, torch::tensor({{8, 9, 10, 11}, {20, 21, 22, 23}})));
  EXPECT_TRUE(tensor_equal(batches[1].reset, torch::tensor({1, 1})));  // both start a document
  EXPECT_TRUE(tensor_equal(batches[2].tokens, torch::tensor({{12, 13, 14, 15}, {24, 25, 26, 27}})));
  EXPECT_TRUE(tensor_equal(batches[2].reset, torch::tensor({0, 0})));
  // The tails of the documents' last segments are padded and masked (and a column that would
  // be padding in every row is not emitted: T = 3 here).
  EXPECT_TRUE(tensor_equal(batches[3].tokens, torch::tensor({{16, 17, 18}, {28, P, P}})));
  EXPECT_TRUE(tensor_equal(batches[3].targets, torch::tensor({{17, 18, 19}, {29, P, P}})));
  EXPECT_TRUE(tensor_equal(batches[3].target_mask, torch::tensor({{1, 1, 1}, {1, 0, 0}})));
  EXPECT_TRUE(tensor_equal(batches[3].input_mask, torch::tensor({{1, 1, 1}, {1, 0, 0}})));
  EXPECT_TRUE(tensor_equal(batches[3].reset, torch::tensor({0, 0})));
  // Every target inside a document once; no document's first token is ever a target.
  auto counts = torch::zeros({30}, torch::kInt64);
  for (const auto& batch : batches) count_scored(batch, counts);
  auto expected = torch::ones({30}, torch::kInt64);
  for (int64_t start : {0, 5, 7, 8, 20}) expected[start] = 0;
  EXPECT_TRUE(tensor_equal(counts, expected));
  // A new epoch starts the same layout again, every row reset.
  expect_same_batch(stream.next(), batches[0]);
  EXPECT_EQ(stream.epoch(), 1);
}

// Fewer documents than streams in training: the longest documents are cut into contiguous
// halves until every stream has one, each part a document of its own (a reset at its start, its
// first token no target). Two documents [0, 25) and [25, 40) for 4 streams: [0, 25) is cut at
// 12, then [25, 40) at 32.
TEST(TrainStream, FewerDocumentsThanStreamsAreCutIntoContiguousParts) {
  TrainStream stream(corpus(40), train_options(4, 4), longs({0, 25}));
  auto counts = torch::zeros({40}, torch::kInt64);
  std::vector<int64_t> starts_seen;
  for (int64_t i = 0; i < stream.batches_in_epoch(); ++i) {
    auto batch = stream.next();
    expect_well_formed(batch);
    count_scored(batch, counts);
    for (int64_t r = 0; r < 4; ++r) {
      if (batch.reset[r].item<bool>() && batch.input_mask[r].any().item<bool>()) {
        starts_seen.push_back(batch.tokens[r][0].item<int64_t>());
      }
    }
  }
  std::sort(starts_seen.begin(), starts_seen.end());
  EXPECT_EQ(starts_seen, (std::vector<int64_t>{0, 12, 25, 32}));  // each stream starts a part
  auto expected = torch::ones({40}, torch::kInt64);
  for (int64_t start : {0, 12, 25, 32}) expected[start] = 0;
  EXPECT_TRUE(tensor_equal(counts, expected));  // every other target once
  // The cut is part of the stream's geometry: a state does not restore across it.
  TrainStream uncut(corpus(40), train_options(2, 4), longs({0, 25}));
  EXPECT_NE(stream.state().fingerprint, uncut.state().fingerprint);
}

int64_t document_of(int64_t token, const std::vector<int64_t>& starts) {
  return std::upper_bound(starts.begin(), starts.end(), token) - starts.begin() - 1;
}

TEST(TrainStream, DocumentModeContextAndRollStayInsideDocuments) {
  // Many documents of varied lengths; ext_len context and per-epoch rolls of the order.
  std::vector<int64_t> starts = {0};
  for (int64_t d = 1; d < 60; ++d) starts.push_back(starts.back() + 1 + (d * 37) % 23);
  const int64_t n = starts.back() + 9;
  auto options = train_options(5, 6, 4);
  options.roll = true;
  options.seed = 3;
  TrainStream stream(corpus(n), options, longs(starts)), twin(corpus(n), options, longs(starts));
  std::vector<torch::Tensor> first_batches;
  for (int epoch = 0; epoch < 2; ++epoch) {
    auto counts = torch::zeros({n}, torch::kInt64);
    for (int64_t i = 0; i < stream.batches_in_epoch(); ++i) {
      auto batch = stream.next();
      expect_well_formed(batch);
      expect_same_batch(batch, twin.next());
      if (i == 0) first_batches.push_back(batch.tokens);
      count_scored(batch, counts);
      for (int64_t r = 0; r < batch.tokens.size(0); ++r) {
        auto real = batch.tokens[r].masked_select(batch.input_mask[r]);
        if (real.numel() == 0) continue;
        // All real inputs of a row (context and segment) lie in one document.
        const int64_t doc = document_of(real[0].item<int64_t>(), starts);
        EXPECT_EQ(document_of(real[-1].item<int64_t>(), starts), doc);
        // reset exactly where the row's segment starts its document (or the epoch starts).
        auto scored = batch.tokens[r].masked_select(batch.target_mask[r]);
        const bool starts_doc = scored.numel() > 0 && scored[0].item<int64_t>() == starts[doc];
        EXPECT_EQ(batch.reset[r].item<bool>(), starts_doc || i == 0)
            << "batch " << i << " row " << r;
        // Context is the up to 4 tokens right before the segment.
        if (scored.numel() > 0) {
          const int64_t context = real.numel() - scored.numel();
          EXPECT_EQ(context, std::min<int64_t>(4, scored[0].item<int64_t>() - starts[doc]));
        }
      }
    }
    auto expected = torch::ones({n}, torch::kInt64);
    for (int64_t s : starts) expected[s] = 0;
    EXPECT_TRUE(tensor_equal(counts, expected)) << "epoch " << epoch;
  }
  EXPECT_FALSE(tensor_equal(first_batches[0], first_batches[1]));  // rolled order
}

TEST(TrainStream, ResumedMidEpochEqualsUninterrupted) {
  struct Case {
    bool var_len, roll, documents;
  };
  std::vector<int64_t> starts = {0};
  for (int64_t d = 1; d < 30; ++d) starts.push_back(starts.back() + 2 + (d * 13) % 17);
  for (const auto& c :
       {Case{false, false, false}, Case{true, true, false}, Case{false, true, true}}) {
    const int64_t n = c.documents ? starts.back() + 5 : 2003;
    auto options = train_options(3, 8, 2);
    options.var_len = c.var_len;
    options.roll = c.roll;
    options.seed = 99;
    auto docs = c.documents ? longs(starts) : torch::Tensor();
    TrainStream reference(corpus(n), options, docs);
    const int64_t total = reference.batches_in_epoch() * 2 + 3;  // crosses two epoch ends
    std::vector<Batch> expected;
    for (int64_t i = 0; i < total; ++i) expected.push_back(reference.next());
    for (int64_t cut : {int64_t{1}, total / 2, total - 2}) {
      TrainStream first(corpus(n), options, docs);
      for (int64_t i = 0; i < cut; ++i) first.next();
      // Through text and through a tensor, as a checkpoint would store it.
      const auto saved = first.state();
      EXPECT_EQ(StreamState::from_string(saved.to_string()), saved);
      EXPECT_EQ(StreamState::from_tensor(saved.to_tensor()), saved);
      auto other_seed = options;
      other_seed.seed = 5;  // the state's seed wins
      TrainStream resumed(corpus(n), other_seed, docs);
      resumed.restore(StreamState::from_string(saved.to_string()));
      EXPECT_EQ(resumed.state(), saved);
      for (int64_t i = cut; i < total; ++i) {
        SCOPED_TRACE("case var_len=" + std::to_string(c.var_len) +
                     " roll=" + std::to_string(c.roll) + " docs=" + std::to_string(c.documents) +
                     " cut=" + std::to_string(cut) + " batch=" + std::to_string(i));
        expect_same_batch(resumed.next(), expected[static_cast<size_t>(i)]);
      }
    }
  }
}

TEST(TrainStream, ErrorsNameTheKeyAndTheFix) {
  TXL_EXPECT_THROW_WITH(TrainStream(corpus(50), train_options(64, 4)),
                        "train.batch_size = 64 is larger than the data allows (N = 50 tokens)");
  TXL_EXPECT_THROW_WITH(TrainStream(corpus(50), train_options(64, 4)), "at most 10 streams");
  TXL_EXPECT_THROW_WITH(TrainStream(corpus(50), train_options(1, 128)),
                        "model.tgt_len = 128 needs at least 129 tokens");
  TXL_EXPECT_THROW_WITH(TrainStream(corpus(50), train_options(2, 0)), "model.tgt_len = 0");
  TXL_EXPECT_THROW_WITH(TrainStream(corpus(50), train_options(0, 4)), "train.batch_size = 0");
  TXL_EXPECT_THROW_WITH(TrainStream(corpus(50), train_options(2, 4, -1)), "model.ext_len = -1");
  TXL_EXPECT_THROW_WITH(TrainStream(corpus(50).to(torch::kInt32), train_options(2, 4)),
                        "1-D int64");
  auto var = train_options(2, 4);
  var.var_len = true;
  TXL_EXPECT_THROW_WITH(TrainStream(corpus(30), var, doc_starts()), "train.var_len");
  // Documents of 3 tokens cannot be cut into parts of 2: 2 streams at most.
  TXL_EXPECT_THROW_WITH(TrainStream(corpus(6), train_options(3, 4), longs({0, 3})),
                        "use train.batch_size <= 2");
  TXL_EXPECT_THROW_WITH(TrainStream(corpus(30), train_options(2, 4), longs({1, 5})),
                        "must begin with 0");
  TXL_EXPECT_THROW_WITH(TrainStream(corpus(30), train_options(2, 4), longs({0, 9, 5})),
                        "strictly increasing");
  TXL_EXPECT_THROW_WITH(TrainStream(corpus(30), train_options(2, 4), longs({0, 9, 30})),
                        "strictly increasing");
}

TEST(TrainStream, RestoreRefusesForeignStates) {
  TrainStream stream(corpus(200), train_options(2, 4));
  TrainStream wider(corpus(200), train_options(4, 4));
  TXL_EXPECT_THROW_WITH(stream.restore(wider.state()), "fingerprint");
  EvalStream eval(corpus(200), eval_options(2, 4));
  TXL_EXPECT_THROW_WITH(stream.restore(eval.state()), "from a eval stream's state");
  auto state = stream.state();
  state.index = 1000;
  TXL_EXPECT_THROW_WITH(stream.restore(state), "index = 1000");
  EXPECT_EQ(stream.index(), 0);  // unchanged by the failed restores
}

TEST(StreamState, TextAndTensorRoundTripAndBadInput) {
  StreamState state{txl::data::StreamKind::kSliding, 0xfedcba9876543210ull, 18446744073709551615ull,
                    7, 42};
  EXPECT_EQ(StreamState::from_string(state.to_string()), state);
  EXPECT_EQ(StreamState::from_tensor(state.to_tensor()), state);
  EXPECT_EQ(state.to_string(),
            "txl-stream-v1 kind=sliding fingerprint=fedcba9876543210 seed=18446744073709551615 "
            "epoch=7 index=42");
  TXL_EXPECT_THROW_WITH(StreamState::from_string("hello"), "txl-stream-v1");
  TXL_EXPECT_THROW_WITH(
      StreamState::from_string("txl-stream-v1 kind=train fingerprint=00 seed=1 epoch=x index=0"),
      "bad value in \"epoch=x\"");
  TXL_EXPECT_THROW_WITH(
      StreamState::from_string("txl-stream-v1 kind=train fingerprint=00 seed=1 epoch=0"),
      "\"index\" is missing");
  TXL_EXPECT_THROW_WITH(StreamState::from_tensor(torch::zeros({3}, torch::kInt64)), "int64 [6]");
}

// ----------------------------------------------------------------------------- EvalStream

TEST(EvalStream, ExactBatchesWithPaddedTails) {
  // N = 12: 11 targets in 3 streams of 4, 4, 3 (inputs 0..3, 4..7, 8..10); Q = 2.
  EvalStream stream(corpus(12), eval_options(3, 2));
  ASSERT_EQ(stream.size(), 2);
  auto b0 = stream.batch(0);
  expect_well_formed(b0);
  EXPECT_TRUE(tensor_equal(b0.tokens, torch::tensor({{0, 1}, {4, 5}, {8, 9}})));
  EXPECT_TRUE(tensor_equal(b0.targets, torch::tensor({{1, 2}, {5, 6}, {9, 10}})));
  EXPECT_TRUE(tensor_equal(b0.reset, torch::tensor({1, 1, 1})));
  auto b1 = stream.batch(1);
  expect_well_formed(b1);
  EXPECT_TRUE(tensor_equal(b1.tokens, torch::tensor({{2, 3}, {6, 7}, {10, P}})));
  EXPECT_TRUE(tensor_equal(b1.targets, torch::tensor({{3, 4}, {7, 8}, {11, P}})));
  EXPECT_TRUE(tensor_equal(b1.input_mask, torch::tensor({{1, 1}, {1, 1}, {1, 0}})));
  EXPECT_TRUE(tensor_equal(b1.target_mask, torch::tensor({{1, 1}, {1, 1}, {1, 0}})));
  EXPECT_TRUE(tensor_equal(b1.reset, torch::tensor({0, 0, 0})));
  EXPECT_EQ(b0.n_scored + b1.n_scored, 11);
}

TEST(EvalStream, ScoresEveryTargetExactlyOnce) {
  struct Case {
    int64_t n, b, q, e;
  };
  for (const auto& c :
       {Case{12, 3, 2, 0}, Case{101, 4, 7, 0}, Case{100, 7, 5, 3}, Case{50, 1, 64, 0},
        Case{2, 1, 3, 0}, Case{1000, 16, 9, 4}, Case{37, 36, 2, 1},
        Case{15, 3, 2, 0} /* last batch: row 2 all padding */}) {
    SCOPED_TRACE("N=" + std::to_string(c.n) + " B=" + std::to_string(c.b) +
                 " Q=" + std::to_string(c.q));
    EvalStream stream(corpus(c.n), eval_options(c.b, c.q, c.e));
    auto counts = torch::zeros({c.n}, torch::kInt64);
    int64_t scored = 0, batches = 0;
    Batch previous;
    while (auto batch = stream.next()) {
      expect_well_formed(*batch);
      EXPECT_EQ(batch->index, batches);
      count_scored(*batch, counts);
      scored += batch->n_scored;
      EXPECT_LE(batch->tokens.size(1), c.q + c.e);
      if (batches > 0) {  // consecutive segments of each stream (rows still running)
        for (int64_t r = 0; r < c.b; ++r) {
          auto now = batch->tokens[r].masked_select(batch->target_mask[r]);
          auto before = previous.tokens[r].masked_select(previous.target_mask[r]);
          if (now.numel() > 0) {
            EXPECT_EQ(now[0].item<int64_t>(), before[-1].item<int64_t>() + 1);
          }
        }
      }
      previous = *batch;
      ++batches;
    }
    EXPECT_EQ(batches, stream.size());
    EXPECT_EQ(scored, c.n - 1);
    EXPECT_EQ(counts[0].item<int64_t>(), 0);
    EXPECT_TRUE(counts.slice(0, 1).eq(1).all().item<bool>());
    // The pass is over; the call after the end starts a new one.
    ASSERT_TRUE(stream.next().has_value());
    EXPECT_EQ(stream.state().epoch, 1);
  }
}

TEST(EvalStream, ExtLenReachesIntoTheTextBeforeAStream) {
  // N = 20: 19 targets in streams of 10 and 9 (starting at 0 and 10); Q = 3, E = 2.
  EvalStream stream(corpus(20), eval_options(2, 3, 2));
  auto b0 = stream.batch(0);
  expect_well_formed(b0);
  EXPECT_TRUE(tensor_equal(b0.tokens, torch::tensor({{P, P, 0, 1, 2}, {8, 9, 10, 11, 12}})));
  EXPECT_TRUE(tensor_equal(b0.target_mask, torch::tensor({{0, 0, 1, 1, 1}, {0, 0, 1, 1, 1}})));
  EXPECT_TRUE(tensor_equal(b0.input_mask, torch::tensor({{0, 0, 1, 1, 1}, {1, 1, 1, 1, 1}})));
}

TEST(EvalStream, WarmUpBatchesAreUnscoredAndComeFromThePrecedingText) {
  // N = 20: 19 targets in streams of 5, 5, 5, 4 starting at 0, 5, 10, 15; Q = 3, W = 6.
  // Warm-up available: 0, 5, 6, 6 tokens, laid out in two batches of 3 ending at each start.
  EvalStream stream(corpus(20), eval_options(4, 3, 0, 6));
  ASSERT_EQ(stream.warmup_batches(), 2);
  ASSERT_EQ(stream.size(), 4);
  auto w0 = stream.batch(0), w1 = stream.batch(1), s0 = stream.batch(2);
  for (const auto& batch : {w0, w1}) {
    expect_well_formed(batch);
    EXPECT_EQ(batch.n_scored, 0);
    EXPECT_FALSE(batch.target_mask.any().item<bool>());
  }
  EXPECT_TRUE(
      tensor_equal(w0.tokens, torch::tensor({{P, P, P}, {P, 0, 1}, {4, 5, 6}, {9, 10, 11}})));
  EXPECT_TRUE(
      tensor_equal(w1.tokens, torch::tensor({{P, P, P}, {2, 3, 4}, {7, 8, 9}, {12, 13, 14}})));
  EXPECT_TRUE(tensor_equal(w0.reset, torch::tensor({1, 1, 1, 1})));
  EXPECT_TRUE(tensor_equal(w1.reset, torch::tensor({0, 0, 0, 0})));
  // The first scored segment follows the warm-up text directly; only stream 0, which had no
  // text before it, starts fresh.
  EXPECT_TRUE(
      tensor_equal(s0.tokens, torch::tensor({{0, 1, 2}, {5, 6, 7}, {10, 11, 12}, {15, 16, 17}})));
  EXPECT_TRUE(tensor_equal(s0.reset, torch::tensor({1, 0, 0, 0})));
  EXPECT_EQ(s0.index, 2);
  // Scoring is unchanged by the warm-up: every target once.
  auto counts = torch::zeros({20}, torch::kInt64);
  for (int64_t i = 0; i < stream.size(); ++i) count_scored(stream.batch(i), counts);
  EXPECT_TRUE(counts.slice(0, 1).eq(1).all().item<bool>());
}

TEST(EvalStream, WarmUpWiderThanASegment) {
  // Streams start at 0, 50, 100, 150 (N = 201, B = 4); W = 7 with Q = 3: batches of 1, 3, 3.
  EvalStream stream(corpus(201), eval_options(4, 3, 0, 7));
  ASSERT_EQ(stream.warmup_batches(), 3);
  std::vector<torch::Tensor> text;
  for (int64_t i = 0; i < 3; ++i) text.push_back(stream.batch(i).tokens);
  auto joined = torch::cat(text, 1);  // [B, 7]
  EXPECT_TRUE(tensor_equal(joined[1], torch::arange(43, 50)));
  EXPECT_TRUE(tensor_equal(joined[3], torch::arange(143, 150)));
  EXPECT_TRUE(joined[0].eq(P).all().item<bool>());
}

TEST(EvalStream, DocumentModeMatchesTheTrainingLayoutAndScoresEveryDocumentTarget) {
  std::vector<int64_t> starts = {0};
  for (int64_t d = 1; d < 40; ++d) starts.push_back(starts.back() + 1 + (d * 29) % 19);
  const int64_t n = starts.back() + 7;
  EvalStream stream(corpus(n), eval_options(4, 5, 2), longs(starts));
  ASSERT_TRUE(stream.document_mode());
  TrainStream train(corpus(n), train_options(4, 5, 2), longs(starts));
  ASSERT_EQ(stream.size(), train.batches_in_epoch());
  auto counts = torch::zeros({n}, torch::kInt64);
  int64_t scored = 0;
  while (auto batch = stream.next()) {
    expect_well_formed(*batch);
    expect_same_batch(*batch, train.next());  // the same rules as training, without roll
    count_scored(*batch, counts);
    scored += batch->n_scored;
  }
  auto expected = torch::ones({n}, torch::kInt64);
  for (int64_t s : starts) expected[s] = 0;
  EXPECT_TRUE(tensor_equal(counts, expected));
  EXPECT_EQ(scored, stream.n_targets());
  EXPECT_EQ(scored, n - static_cast<int64_t>(starts.size()));
  TXL_EXPECT_THROW_WITH(EvalStream(corpus(n), eval_options(4, 5, 0, 8), longs(starts)),
                        "eval.warmup = 8 is not supported with data.document_mode");
}

// Fewer documents than rows in evaluation: the rows without one stay padding and nothing is cut,
// so every target is scored once, as with as many rows as documents.
TEST(EvalStream, FewerDocumentsThanRowsLeaveRowsIdle) {
  EvalStream wide(corpus(30), eval_options(6, 4), doc_starts());
  EvalStream narrow(corpus(30), eval_options(4, 4), doc_starts());
  EXPECT_EQ(wide.n_targets(), narrow.n_targets());
  auto counts = torch::zeros({30}, torch::kInt64);
  int64_t scored = 0;
  while (auto batch = wide.next()) {
    expect_well_formed(*batch);
    EXPECT_FALSE(batch->input_mask[5].any().item<bool>());  // the sixth row has no document
    count_scored(*batch, counts);
    scored += batch->n_scored;
  }
  auto expected = torch::ones({30}, torch::kInt64);
  for (int64_t start : {0, 5, 7, 8, 20}) expected[start] = 0;
  EXPECT_TRUE(tensor_equal(counts, expected));
  EXPECT_EQ(scored, narrow.n_targets());
}

TEST(EvalStream, ResumedMidPassEqualsUninterrupted) {
  EvalStream reference(corpus(300), eval_options(4, 7, 2, 10));
  std::vector<Batch> expected;
  while (auto batch = reference.next()) expected.push_back(*batch);
  EvalStream first(corpus(300), eval_options(4, 7, 2, 10));
  for (int i = 0; i < 5; ++i) first.next();
  EvalStream resumed(corpus(300), eval_options(4, 7, 2, 10));
  resumed.restore(StreamState::from_tensor(first.state().to_tensor()));
  for (size_t i = 5; i < expected.size(); ++i) expect_same_batch(*resumed.next(), expected[i]);
  EXPECT_FALSE(resumed.next().has_value());
  EvalStream other(corpus(301), eval_options(4, 7, 2, 10));
  TXL_EXPECT_THROW_WITH(other.restore(first.state()), "fingerprint");
}

TEST(EvalStream, ErrorsNameTheKey) {
  TXL_EXPECT_THROW_WITH(
      EvalStream(corpus(50), eval_options(64, 4)),
      "eval.batch_size = 64 is larger than the data allows (N = 50 tokens, 49 targets)");
  TXL_EXPECT_THROW_WITH(EvalStream(corpus(50), eval_options(2, 0)), "eval.tgt_len = 0");
  TXL_EXPECT_THROW_WITH(EvalStream(corpus(50), eval_options(2, 4, 0, -3)), "eval.warmup = -3");
  TXL_EXPECT_THROW_WITH(EvalStream(corpus(50), eval_options(2, 4, -1)), "model.ext_len = -1");
  TXL_EXPECT_THROW_WITH(EvalStream(corpus(1), eval_options(1, 4)), "N = 1 tokens");
  EvalStream stream(corpus(50), eval_options(2, 4));
  TXL_EXPECT_THROW_WITH(stream.batch(stream.size()), "outside");
}

// -------------------------------------------------------------------------- SlidingStream

TEST(SlidingStream, ExactWindowsAndScoredPositions) {
  // N = 10 (targets 1..9), L = 4, s = 2: windows [0,4) scores 1..4, [2,6) 5..6, [4,8) 7..8,
  // [5,9) 9.
  SlidingStream stream(corpus(10), sliding_options(2, 4, 2));
  ASSERT_EQ(stream.n_windows(), 4);
  ASSERT_EQ(stream.size(), 2);
  auto b0 = stream.batch(0), b1 = stream.batch(1);
  expect_well_formed(b0);
  expect_well_formed(b1);
  EXPECT_TRUE(tensor_equal(b0.tokens, torch::tensor({{0, 1, 2, 3}, {2, 3, 4, 5}})));
  EXPECT_TRUE(tensor_equal(b0.target_mask, torch::tensor({{1, 1, 1, 1}, {0, 0, 1, 1}})));
  EXPECT_TRUE(tensor_equal(b1.tokens, torch::tensor({{4, 5, 6, 7}, {5, 6, 7, 8}})));
  EXPECT_TRUE(tensor_equal(b1.target_mask, torch::tensor({{0, 0, 1, 1}, {0, 0, 0, 1}})));
  EXPECT_TRUE(tensor_equal(b1.targets, torch::tensor({{P, P, 7, 8}, {P, P, P, 9}})));
  EXPECT_TRUE(b0.reset.all().item<bool>());
}

TEST(SlidingStream, EveryTargetOnceWithItsFullWindow) {
  struct Case {
    int64_t n, l, s, b;
  };
  for (const auto& c : {Case{10, 4, 2, 2}, Case{50, 8, 1, 16}, Case{101, 10, 3, 4},
                        Case{101, 10, 10, 3}, Case{7, 20, 1, 2}, Case{64, 5, 4, 100}}) {
    SCOPED_TRACE("N=" + std::to_string(c.n) + " L=" + std::to_string(c.l) +
                 " s=" + std::to_string(c.s));
    SlidingStream stream(corpus(c.n), sliding_options(c.b, c.l, c.s));
    auto counts = torch::zeros({c.n}, torch::kInt64);
    int64_t scored = 0;
    while (auto batch = stream.next()) {
      expect_well_formed(*batch);
      EXPECT_LE(batch->tokens.size(0), c.b);
      EXPECT_EQ(batch->tokens.size(1), std::min(c.l, c.n - 1));
      count_scored(*batch, counts);
      scored += batch->n_scored;
      // A scored target t in column j sees j + 1 inputs: min(t, L) at the window's end, and at
      // least L - s + 1 elsewhere (fewer only at the start of the text).
      auto col = torch::arange(batch->tokens.size(1)).expand_as(batch->tokens);
      auto seen = (col + 1).masked_select(batch->target_mask);
      auto target = batch->targets.masked_select(batch->target_mask);
      EXPECT_TRUE(seen.ge(torch::clamp_max(target, c.l - c.s + 1)).all().item<bool>());
      EXPECT_TRUE(seen.le(torch::clamp_max(target, c.l)).all().item<bool>());
      if (c.s == 1) {
        EXPECT_TRUE(tensor_equal(seen, torch::clamp_max(target, c.l)));
      }
    }
    EXPECT_EQ(scored, c.n - 1);
    EXPECT_TRUE(counts.slice(0, 1).eq(1).all().item<bool>());
  }
}

TEST(SlidingStream, WindowQStrideQEqualsTheEvalSegments) {
  const int64_t n = 103, q = 8;
  SlidingStream sliding(corpus(n), sliding_options(3, q, q));
  EvalStream segments(corpus(n), eval_options(1, q));
  std::vector<torch::Tensor> windows, windows_scored;
  while (auto batch = sliding.next()) {
    for (int64_t r = 0; r < batch->tokens.size(0); ++r) {
      windows_scored.push_back(batch->targets[r].masked_select(batch->target_mask[r]));
      windows.push_back(batch->tokens[r]);
    }
  }
  ASSERT_EQ(static_cast<int64_t>(windows.size()), segments.size());
  for (int64_t i = 0; i < segments.size(); ++i) {
    auto batch = segments.batch(i);
    auto scored = batch.targets[0].masked_select(batch.target_mask[0]);
    EXPECT_TRUE(tensor_equal(windows_scored[i], scored)) << "segment " << i;
    // Full windows are exactly the segments; the final one is a full window ending at N - 1.
    if (i + 1 < segments.size()) {
      EXPECT_TRUE(tensor_equal(windows[i], batch.tokens[0]));
    }
  }
}

TEST(SlidingStream, ResumeAndErrors) {
  SlidingStream reference(corpus(80), sliding_options(3, 6, 2));
  std::vector<Batch> expected;
  while (auto batch = reference.next()) expected.push_back(*batch);
  SlidingStream first(corpus(80), sliding_options(3, 6, 2));
  first.next();
  first.next();
  SlidingStream resumed(corpus(80), sliding_options(3, 6, 2));
  resumed.restore(StreamState::from_string(first.state().to_string()));
  for (size_t i = 2; i < expected.size(); ++i) expect_same_batch(*resumed.next(), expected[i]);
  TXL_EXPECT_THROW_WITH(SlidingStream(corpus(80), sliding_options(3, 4, 5)),
                        "eval.stride = 5 is larger than eval.window = 4");
  TXL_EXPECT_THROW_WITH(SlidingStream(corpus(80), sliding_options(3, 0, 1)), "eval.window = 0");
  TXL_EXPECT_THROW_WITH(SlidingStream(corpus(80), sliding_options(3, 4, 0)), "eval.stride = 0");
  TXL_EXPECT_THROW_WITH(SlidingStream(corpus(80), sliding_options(0, 4, 1)), "eval.batch_size = 0");
  TXL_EXPECT_THROW_WITH(SlidingStream(corpus(1), sliding_options(1, 4, 1)), "N = 1 tokens");
}

TEST(StreamOptions, FromTheExperimentConfig) {
  txl::config::ExperimentConfig experiment;
  experiment.run.seed = 77;
  experiment.model.tgt_len = 64;
  experiment.model.ext_len = 3;
  experiment.train.batch_size = 8;
  experiment.train.var_len = true;
  experiment.train.roll = true;
  auto train = txl::data::train_stream_options(experiment, 2);
  EXPECT_EQ(train.batch_size, 8);
  EXPECT_EQ(train.tgt_len, 64);
  EXPECT_EQ(train.ext_len, 3);
  EXPECT_TRUE(train.var_len && train.roll);
  EXPECT_EQ(train.seed, 77u);
  EXPECT_EQ(train.pad_id, 2);
  // The evaluation streams' options: tests/eval/settings_test.cpp (eval::Settings).
}

}  // namespace
