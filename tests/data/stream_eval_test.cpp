// EvalStream and SlidingStream: every target scored once, warm-up, documents, resume, errors.
#include "txl/data/stream.h"

#include "stream_test_support.h"
#include "support/test_support.h"

namespace {

using txl::data::Batch;
using txl::data::EvalStream;
using txl::data::SlidingStream;
using txl::data::SlidingStreamOptions;
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

SlidingStreamOptions sliding_options(std::int64_t b, std::int64_t l, std::int64_t s) {
  SlidingStreamOptions o;
  o.batch_size = b;
  o.window = l;
  o.stride = s;
  o.pad_id = P;
  return o;
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

}  // namespace
