// TrainStream: contiguous, var_len, rolled and document streams, resume and errors; StreamState.
#include "txl/data/stream.h"

#include <algorithm>

#include "stream_test_support.h"
#include "support/test_support.h"

namespace {

using txl::data::Batch;
using txl::data::EvalStream;
using txl::data::StreamState;
using txl::data::TrainStream;
using txl::data::stream_test::corpus;
using txl::data::stream_test::count_scored;
using txl::data::stream_test::doc_starts;
using txl::data::stream_test::eval_options;
using txl::data::stream_test::expect_same_batch;
using txl::data::stream_test::expect_well_formed;
using txl::data::stream_test::longs;
using txl::data::stream_test::P;
using txl::data::stream_test::train_options;
using txl::test::tensor_equal;

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
  TXL_EXPECT_THROW_WITH(TrainStream(corpus(50).to(torch::kFloat), train_options(2, 4)),
                        "1-D int64, int32 or int16");
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

// A data-parallel rank reads only its rows: they equal the whole batch's, on an int16 corpus as
// a cache maps it; the other rows are padding under the whole batch's masks and state.
TEST(TrainStream, ARankReadsOnlyItsRows) {
  for (bool documents : {false, true}) {
    auto whole_options = train_options(4, 3, 1);
    whole_options.roll = !documents;
    auto mine = whole_options;
    mine.read_begin = 1;
    mine.read_end = 3;
    const auto starts = documents ? longs({0, 9, 20, 26, 33, 41}) : torch::Tensor();
    TrainStream whole(corpus(48), whole_options, starts);
    TrainStream rank(corpus(48).to(torch::kInt16), mine, starts);
    for (int i = 0; i < 12; ++i) {
      const Batch a = whole.next(), b = rank.next();
      EXPECT_TRUE(tensor_equal(b.tokens.narrow(0, 1, 2), a.tokens.narrow(0, 1, 2))) << i;
      EXPECT_TRUE(tensor_equal(b.targets.narrow(0, 1, 2), a.targets.narrow(0, 1, 2))) << i;
      EXPECT_EQ(b.tokens.scalar_type(), torch::kInt64);
      for (std::int64_t row : {0, 3}) {
        EXPECT_TRUE(b.tokens[row].eq(P).all().item<bool>()) << "row " << row << " was read";
        EXPECT_TRUE(b.targets[row].eq(P).all().item<bool>()) << "row " << row << " was read";
      }
      EXPECT_TRUE(tensor_equal(b.input_mask, a.input_mask)) << i;
      EXPECT_TRUE(tensor_equal(b.target_mask, a.target_mask)) << i;
      EXPECT_EQ(b.n_scored, a.n_scored);
      EXPECT_EQ(rank.state(), whole.state());
    }
  }
  auto bad = train_options(4, 3);
  bad.read_begin = 3;
  bad.read_end = 5;
  TXL_EXPECT_THROW_WITH(TrainStream(corpus(48), bad), "rows to read [3, 5) outside the batch's 4");
}

}  // namespace
