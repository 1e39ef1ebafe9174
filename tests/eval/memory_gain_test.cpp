// Where memory helps (memory_gain.h): each scored token's segment and memory reproduced from the
// evaluation's layout (checked against a 1-layer model, whose prediction depends on exactly the
// inputs it attends to), the groups of hand-built sequences whose class is known, the gain sums
// and shares of hand-made losses, and the errors.
#include "txl/eval/memory_gain.h"

#include <cmath>

#include "support/test_support.h"
#include "support/tiny_experiment.h"
#include "txl/eval/evaluator.h"

namespace {

using namespace txl::eval;  // NOLINT: the module under test
using txl::test::longs;
using txl::test::tensor_equal;

ReachOptions layout(std::int64_t b, std::int64_t q, std::int64_t m, std::int64_t warmup = 0) {
  ReachOptions o;
  o.batch_size = b;
  o.tgt_len = q;
  o.mem_len = m;
  o.warmup = warmup;
  return o;
}

// One stream, Q = 4, M = 4: segments of inputs [0, 4), [4, 8), [8, 12); the memory holds the
// previous segment.
TEST(MemoryReach, OneStreamSegmentsAndMemory) {
  const auto r = segment_reach(13, {}, layout(1, 4, 4));
  EXPECT_TRUE(tensor_equal(r.target, torch::arange(1, 13, torch::kInt64)));
  EXPECT_TRUE(tensor_equal(r.segment_begin, longs({0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8})));
  EXPECT_TRUE(tensor_equal(r.visible_begin, longs({0, 0, 0, 0, 0, 0, 0, 0, 4, 4, 4, 4})));
  // M = 2: the memory holds the last two inputs of the previous segment.
  const auto short_memory = segment_reach(13, {}, layout(1, 4, 2));
  EXPECT_TRUE(
      tensor_equal(short_memory.visible_begin, longs({0, 0, 0, 0, 2, 2, 2, 2, 6, 6, 6, 6})));
  // Segments mode (M = 0): only the segment.
  EXPECT_TRUE(tensor_equal(segment_reach(13, {}, layout(1, 4, 0)).visible_begin,
                           longs({0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8})));
}

// B = 2 streams of 6 targets: stream 1 starts at input 6 with an empty memory, although inputs
// 0-5 precede it; with a warm-up of 3 its memory holds inputs 3-5.
TEST(MemoryReach, ParallelStreamsStartWithoutMemoryUnlessWarmedUp) {
  const auto r = segment_reach(13, {}, layout(2, 4, 4));
  EXPECT_TRUE(tensor_equal(r.segment_begin, longs({0, 0, 0, 0, 4, 4, 6, 6, 6, 6, 10, 10})));
  EXPECT_TRUE(tensor_equal(r.visible_begin, longs({0, 0, 0, 0, 0, 0, 6, 6, 6, 6, 6, 6})));
  const auto warm = segment_reach(13, {}, layout(2, 4, 4, 3));
  EXPECT_TRUE(tensor_equal(warm.segment_begin, r.segment_begin));
  EXPECT_TRUE(tensor_equal(warm.visible_begin, longs({0, 0, 0, 0, 0, 0, 3, 3, 3, 3, 6, 6})));
}

// same_length: every query sees the last M keys, itself included.
TEST(MemoryReach, SameLengthSeesTheLastMKeys) {
  ReachOptions o = layout(1, 4, 2);
  o.same_length = true;
  const auto r = segment_reach(10, {}, o);
  // target u (input u - 1) sees inputs [u - 2, u), from 0 on.
  EXPECT_TRUE(tensor_equal(r.visible_begin, longs({0, 0, 1, 2, 3, 4, 5, 6, 7})));
}

// Documents dealt shortest stream first (Q = 2): row 0 reads documents 0 and 3, row 1
// documents 1 and 2; each document starts with an empty memory, and the reach is in text order
// (as EvalResult::token_losses is in document mode).
TEST(MemoryReach, DocumentsReset) {
  ReachOptions o = layout(2, 2, 4);
  o.documents = true;
  const auto starts = longs({0, 5, 7, 9});
  const auto r = segment_reach(12, starts, o);
  EXPECT_TRUE(tensor_equal(r.target, longs({1, 2, 3, 4, 6, 8, 10, 11})));
  EXPECT_TRUE(tensor_equal(r.segment_begin, longs({0, 0, 2, 2, 5, 7, 9, 9})));
  EXPECT_TRUE(tensor_equal(r.visible_begin, longs({0, 0, 0, 0, 5, 7, 9, 9})));
}

// The reach against a model: with one layer the memory holds the embeddings, so a target's loss
// depends on exactly the inputs [visible_begin, u). Changing the input just before
// visible_begin leaves it as it is; changing the one at visible_begin changes it.
TEST(MemoryReach, AOneLayerModelSeesExactlyTheReach) {
  torch::manual_seed(5);
  txl::test::TempDir dir;
  auto config = txl::test::tiny_experiment(dir.path());
  config.model.n_layer = 1;
  const std::int64_t vocab = 30, n = 23;
  txl::models::TransformerLM model(config.model, vocab);
  const auto ids = torch::randint(vocab, {n}, torch::kInt64);
  const std::vector<std::pair<int, bool>> variants = {{0, false}, {2, false}, {0, true}};
  for (const auto& [warmup, same_length] : variants) {
    SCOPED_TRACE(testing::Message() << "warmup " << warmup << " same_length " << same_length);
    Settings s;
    s.tgt_len = 4;
    s.mem_len = 3;
    s.batch_size = 2;
    s.warmup = warmup;
    s.same_length = same_length;
    const auto reach = segment_reach(n, {}, reach_options(s));
    const auto losses_for = [&](const torch::Tensor& text) {
      txl::data::EncodedSplit split;
      split.ids = text;
      Extras extras;
      extras.token_losses = true;
      return evaluate(model, split, s, extras).token_losses;  // [T], text order (plain text)
    };
    const auto base = losses_for(ids);
    for (std::int64_t k = 0; k < reach.target.numel(); ++k) {
      const std::int64_t v = reach.visible_begin[k].item<std::int64_t>();
      auto changed = ids.clone();
      changed[v] = (ids[v].item<std::int64_t>() + 1) % vocab;
      EXPECT_GT(std::abs(losses_for(changed)[k].item<float>() - base[k].item<float>()), 1e-6)
          << "target " << reach.target[k].item<std::int64_t>() << " sees input " << v;
      if (v == 0) continue;
      changed = ids.clone();
      changed[v - 1] = (ids[v - 1].item<std::int64_t>() + 1) % vocab;
      EXPECT_EQ(losses_for(changed)[k].item<float>(), base[k].item<float>())
          << "target " << reach.target[k].item<std::int64_t>() << " does not see input " << v - 1;
    }
  }
}

// ids of known classes, one stream, Q = 4, M = 4 (OneStreamSegmentsAndMemory's reach):
//   offset  0  1  2  3  4  5  6  7  8  9 10 11 12
//   id      5  7  5  8  9  7  6  9  8  5  6 10 10
const std::vector<std::int64_t> kIds = {5, 7, 5, 8, 9, 7, 6, 9, 8, 5, 6, 10, 10};
constexpr std::int64_t F = kFirstInDocument, S = kInSegment, M = kInMemory, B = kBeyondMemory;

TEST(MemoryGroups, DistanceToThePreviousOccurrence) {
  const auto ids = longs(kIds);
  EXPECT_TRUE(tensor_equal(previous_occurrence(ids, {}),
                           longs({-1, -1, 0, -1, -1, 1, -1, 4, 3, 2, 6, -1, 11})));
  const auto reach = segment_reach(13, {}, layout(1, 4, 4));
  // u=2: 5 at 0, in its segment; u=5: 7 at 1, segment 4-7, memory 0-3; u=9: 5 at 2, below the
  // memory 4-7; u=10: 6 at 6, in memory; u=12: 10 at 11.
  EXPECT_TRUE(
      tensor_equal(distance_groups(ids, {}, reach), longs({F, S, F, F, M, F, S, M, B, M, F, S})));
  // A document starting at 6 bounds the search (the memory still crosses it in stream mode).
  EXPECT_TRUE(tensor_equal(distance_groups(ids, longs({0, 6}), reach),
                           longs({F, S, F, F, M, F, F, F, F, M, F, S})));
  // Without memory nothing is in memory: those are beyond.
  EXPECT_TRUE(tensor_equal(distance_groups(ids, {}, segment_reach(13, {}, layout(1, 4, 0))),
                           longs({F, S, F, F, B, F, S, B, B, B, F, S})));
}

TEST(MemoryGroups, FrequencyRanksShareTies) {
  const auto ranks = frequency_ranks(longs({5, 9, 5, 0, 9, 1}));
  EXPECT_TRUE(tensor_equal(ranks, longs({2, 0, 2, 5, 0, 4})));
  const auto ids = longs({0, 1, 2, 3, 4, 5});
  EXPECT_TRUE(tensor_equal(frequency_groups(ids, ranks, {1, 3}), longs({1, 0, 1, 2, 0, 2})));
  // Two ids tie at rank 0: an edge at 1 keeps both in the top class.
  EXPECT_TRUE(tensor_equal(frequency_groups(ids, ranks, {1}), longs({1, 0, 1, 1, 0, 1})));
  TXL_EXPECT_THROW_WITH(frequency_groups(ids, ranks, {3, 3}), "must increase");
  TXL_EXPECT_THROW_WITH(frequency_groups(ids, ranks, {0}), "above 0");
  TXL_EXPECT_THROW_WITH(frequency_groups(longs({6}), ranks, {1}), "token id 6");
  TXL_EXPECT_THROW_WITH(frequency_ranks(longs({1, -1})), "negative");
}

constexpr std::int64_t kCap = kCapitalisedWord, kLow = kLowercaseWord, kNone = kNoCase;

TEST(MemoryGroups, CapitalisedWordsFromSentencepiecePieces) {
  const std::vector<std::string> pieces = {
      "<pad>",    "<unk>", "</s>", "\u2581Har", "ry",         "\u2581the",    "\u2581", "Dursley",
      "\u2581\"", "Pot",   "ter",  "s",         "\u25811990", "\u2581\u00c9", "cole"};
  const auto f = word_flags_of_pieces(pieces, {0, 2});
  EXPECT_EQ(f.starts_word,
            (std::vector<std::uint8_t>{0, 0, 0, 1, 0, 1, 1, 0, 1, 0, 0, 0, 1, 1, 0}));
  EXPECT_EQ(f.first_case,
            (std::vector<std::int8_t>{0, -1, 0, 1, -1, -1, 0, 1, 0, 1, -1, -1, 0, 1, -1}));
  EXPECT_EQ(f.separator[2], 1);
  // ▁Har ry | ▁the | ▁ Dursley s | ▁" Pot ter | </s> | s | ▁1990 | ▁É cole
  const auto ids = longs({3, 4, 5, 6, 7, 11, 8, 9, 10, 2, 11, 12, 13, 14});
  EXPECT_TRUE(
      tensor_equal(case_groups(ids, {}, f), longs({kCap, kCap, kLow, kCap, kCap, kCap, kCap, kCap,
                                                   kCap, kNone, kLow, kNone, kCap, kCap})));
  // A document start splits a word: "ter" opens a lowercase word of its own.
  EXPECT_TRUE(tensor_equal(case_groups(longs({9, 10}), longs({0, 1}), f), longs({kCap, kLow})));
}

TEST(MemoryGroups, CapitalisedWordsOfTheWordAndByteTokenizers) {
  const auto words = txl::data::build_word_tokenizer({"Harry met the Dursleys . harry Potter"}, 1);
  const auto wf = word_flags(*words);
  std::vector<std::int64_t> ids = words->encode("Harry met the Dursleys . harry Potter");
  ids.push_back(words->eos_id());
  ids.push_back(words->unk_id());
  EXPECT_TRUE(tensor_equal(case_groups(longs(ids), {}, wf),
                           longs({kCap, kLow, kLow, kCap, kNone, kLow, kCap, kNone, kNone})));
  const auto bytes = txl::data::make_byte_tokenizer();
  const auto bf = word_flags(*bytes);
  const auto text = bytes->encode("Hi there, 'Tis Bob");
  // H i _ t h e r e , _ ' T i s _ B o b
  EXPECT_TRUE(tensor_equal(case_groups(longs(text), {}, bf),
                           longs({kCap, kCap, kNone, kLow, kLow, kLow, kLow, kLow, kLow, kNone,
                                  kCap, kCap, kCap, kCap, kNone, kCap, kCap, kCap})));
}

// Inputs over kIds with losses a = 3 everywhere and b = a - the gain of the token's distance
// class: first 0, in segment 0.1, in memory 0.5, beyond 0.2.
GainInputs hand_inputs() {
  GainInputs in;
  in.ids = longs(kIds);
  in.reach = segment_reach(13, {}, layout(1, 4, 4));
  const std::vector<double> gain_of = {0.1, 0.5, 0.2, 0.0};  // by DistanceGroup
  const auto groups = distance_groups(in.ids, {}, in.reach);
  in.loss_a = torch::full({12}, 3.0, torch::kFloat);
  in.loss_b = in.loss_a.clone();
  for (std::int64_t k = 0; k < 12; ++k)
    in.loss_b[k] = 3.0 - gain_of[static_cast<size_t>(groups[k].item<std::int64_t>())];
  in.train_counts = torch::zeros({11}, torch::kInt64);
  in.words = word_flags_of_pieces(std::vector<std::string>(11, "x"), {});
  return in;
}

// Hand sums: in segment 3 x 0.1, in memory 3 x 0.5, beyond 1 x 0.2, of a total 2.0.
TEST(MemoryGain, SumsAndSharesAreTheHandComputation) {
  const auto g = memory_gain(hand_inputs());
  ASSERT_EQ(g.by_distance.rows.size(), 4u);
  const std::vector<std::int64_t> tokens = {3, 3, 1, 5};
  const std::vector<double> gains = {0.3, 1.5, 0.2, 0.0}, per_token = {0.1, 0.5, 0.2, 0.0};
  EXPECT_NEAR(g.total.gain, 2.0, 1e-5);
  EXPECT_EQ(g.total.tokens, 12);
  for (size_t k = 0; k < 4; ++k) {
    const auto& row = g.by_distance.rows[k];
    SCOPED_TRACE(row.group);
    EXPECT_EQ(row.group, distance_group_name(static_cast<std::int64_t>(k)));
    EXPECT_EQ(row.tokens, tokens[k]);
    EXPECT_NEAR(row.gain, gains[k], 1e-5);
    EXPECT_NEAR(row.share, gains[k] / 2.0, 1e-5);
    EXPECT_NEAR(row.loss_a - row.loss_b, per_token[k], 1e-5);
    EXPECT_NEAR(row.ratio.ratio, std::exp(per_token[k]), 1e-5);
    // Every token of the group gains the same: every resample gives the same ratio.
    EXPECT_NEAR(row.ratio.low, row.ratio.ratio, 1e-5);
    EXPECT_NEAR(row.ratio.high, row.ratio.ratio, 1e-5);
  }
  // All counts are 0: one frequency class (rank 0) holds every token; all words are lowercase.
  EXPECT_EQ(g.by_frequency.rows[0].tokens, 12);
  EXPECT_NEAR(g.by_frequency.rows[0].share, 1.0, 1e-6);
  EXPECT_EQ(g.by_frequency.rows[1].tokens, 0);
  EXPECT_TRUE(std::isnan(g.by_frequency.rows[1].loss_a));
  EXPECT_EQ(g.by_case.rows[kLowercaseWord].tokens, 12);

  const auto md = gain_markdown(g, "no_memory", "xl");
  EXPECT_NE(md.find("| in memory | 3 | 3.0000 | 2.5000 | 1.6487 | [1.6487, 1.6487] | 75.0% |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| group | tokens | loss no_memory | loss xl | ppl ratio | 95% interval |"),
            std::string::npos);
  EXPECT_NE(md.find("| ranks 100-999 | 0 | n/a |"), std::string::npos) << md;
  EXPECT_NE(md.find("by the case of the word"), std::string::npos);
}

// Swapping a and b inverts every ratio and negates every gain; the shares stay.
TEST(MemoryGain, SwappingTheModelsInvertsTheRatios) {
  auto in = hand_inputs();
  torch::manual_seed(5);
  in.loss_a = in.loss_a + 0.3 * torch::rand({12});  // varied, so that intervals have width
  const auto g = memory_gain(in);
  std::swap(in.loss_a, in.loss_b);
  const auto h = memory_gain(in);
  EXPECT_NEAR(h.total.ratio.ratio, 1.0 / g.total.ratio.ratio, 1e-6);
  for (size_t k = 0; k < 4; ++k) {
    const auto &x = g.by_distance.rows[k], &y = h.by_distance.rows[k];
    EXPECT_NEAR(y.ratio.ratio, 1.0 / x.ratio.ratio, 1e-6);
    EXPECT_NEAR(y.gain, -x.gain, 1e-6);
    EXPECT_NEAR(y.share, x.share, 1e-6);
    EXPECT_NEAR(y.loss_a, x.loss_b, 1e-6);
    EXPECT_LE(y.ratio.low, y.ratio.ratio);
    EXPECT_GE(y.ratio.high, y.ratio.ratio);
    EXPECT_NEAR(y.ratio.low, 1.0 / x.ratio.high, 1e-2 * y.ratio.ratio);
  }
}

TEST(MemoryGain, BadInputIsAnError) {
  {
    auto in = hand_inputs();
    in.loss_b = in.loss_b.narrow(0, 0, 11);
    TXL_EXPECT_THROW_WITH(memory_gain(in), "loss_b has 11 tokens");
  }
  {
    auto in = hand_inputs();
    in.loss_a[4] = std::nan("");
    TXL_EXPECT_THROW_WITH(memory_gain(in), "non-finite");
  }
  {
    auto in = hand_inputs();
    in.ids = in.ids.narrow(0, 0, 10);  // the reach is of a longer split
    TXL_EXPECT_THROW_WITH(memory_gain(in), "outside a split of 10 tokens");
  }
  {
    auto in = hand_inputs();
    in.train_counts = torch::zeros({9}, torch::kInt64);  // ids 9 and 10 have no count
    TXL_EXPECT_THROW_WITH(memory_gain(in), "token id");
  }
  GainOptions o;
  o.block = 0;
  TXL_EXPECT_THROW_WITH(memory_gain(hand_inputs(), o), "block");
  o = GainOptions();
  o.confidence = 1.0;
  TXL_EXPECT_THROW_WITH(memory_gain(hand_inputs(), o), "confidence");
  TXL_EXPECT_THROW_WITH(previous_occurrence(longs(kIds), longs({1, 4})), "start at 0");
  TXL_EXPECT_THROW_WITH(previous_occurrence(longs(kIds), longs({0, 13})), "below N = 13");
  Settings s;
  s.mode = Mode::kSliding;
  TXL_EXPECT_THROW_WITH(reach_options(s), "sliding");
  s.mode = Mode::kMemory;
  s.ext_len = 2;
  TXL_EXPECT_THROW_WITH(reach_options(s), "ext_len");
  TXL_EXPECT_THROW_WITH(segment_reach(1, {}, layout(1, 4, 4)), "at least 2");
  ReachOptions documents = layout(1, 4, 4);
  documents.documents = true;
  TXL_EXPECT_THROW_WITH(segment_reach(13, {}, documents), "document starts");
}

}  // namespace
