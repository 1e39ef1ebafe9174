// RECL (docs/model.md section 8) on hand-made loss tables whose answer is known, and the paired
// block bootstrap of a ppl ratio.
#include "txl/eval/statistics.h"

#include <cmath>

#include "support/test_support.h"

namespace {

using txl::eval::paired_bootstrap_ppl_ratio;
using txl::eval::ReclOptions;
using txl::eval::relative_effective_context;

const std::vector<std::int64_t> kGrid = {64, 128, 192, 256};

// A [I, C, T] table from per-model, per-context rows of T losses.
torch::Tensor table(const std::vector<std::vector<std::vector<double>>>& rows) {
  std::vector<torch::Tensor> models;
  for (const auto& model : rows) {
    std::vector<torch::Tensor> contexts;
    for (const auto& losses : model)
      contexts.push_back(torch::tensor(losses, torch::kDouble));  // [T]
    models.push_back(torch::stack(contexts));                     // [C, T]
  }
  return torch::stack(models);  // [I, C, T]
}

// One model whose every token's loss is `by_context[c]`.
std::vector<std::vector<double>> flat(const std::vector<double>& by_context, int tokens) {
  std::vector<std::vector<double>> out;
  for (double l : by_context) out.emplace_back(static_cast<size_t>(tokens), l);
  return out;
}

ReclOptions ratios(std::vector<double> r) {
  ReclOptions o;
  o.ratios = std::move(r);
  return o;
}

// The loss falls by 0.1 nats (a 9.5% gain) to 192 tokens and then not at all: RECL 192 at every r.
TEST(Recl, StopsWhereTheGainEnds) {
  const auto r = relative_effective_context(table({flat({4.0, 3.9, 3.8, 3.8}, 10)}), kGrid);
  EXPECT_EQ(r.recl[0], (std::vector<std::int64_t>{192, 192, 192}));
  EXPECT_EQ(r.ratios, (std::vector<double>{0.1, 0.5, 1.0}));
  EXPECT_EQ(relative_effective_context(table({flat({4.0, 3.9, 3.8, 3.7}, 10)}), kGrid).recl[0][2],
            256)
      << "a gain at every step ends at the grid's last point";
}

// A gain of 1.01% extends c, one of 0.99% does not (g = 1 - exp(-delta)).
TEST(Recl, TheOnePercentThreshold) {
  const double above = -std::log(1.0 - 0.0101), below = -std::log(1.0 - 0.0099);
  EXPECT_EQ(relative_effective_context(
                table({flat({3.0, 3.0 - above, 3.0 - above - below, 2.0}, 5)}), kGrid)
                .recl[0][0],
            128);
  EXPECT_EQ(
      relative_effective_context(table({flat({3.0, 3.0 - below, 2.0, 1.0}, 5)}), kGrid).recl[0][0],
      64);
  ReclOptions strict = ratios({1.0});
  strict.threshold = 0.02;
  EXPECT_EQ(
      relative_effective_context(table({flat({3.0, 3.0 - above, 2.0, 2.0}, 5)}), kGrid, strict)
          .recl[0][0],
      64);
}

// 10 hard tokens (loss 6) gain nothing from context, 90 easy ones (loss 1) gain to 192 tokens:
// r = 0.1 looks only at the hard ones (RECL 64), r = 0.5 and 1 see the easy ones' gain (192).
TEST(Recl, TheRatioChoosesTheHardestTokens) {
  std::vector<std::vector<double>> model;
  for (double easy : {1.0, 0.8, 0.6, 0.6}) {
    std::vector<double> losses(100, easy);
    for (int t = 0; t < 100; t += 10)
      losses[static_cast<size_t>(t)] = 6.0;  // spread through the text
    model.push_back(losses);
  }
  const auto r = relative_effective_context(table({model}), kGrid);
  EXPECT_EQ(r.recl[0], (std::vector<std::int64_t>{64, 192, 192}));
}

// Gains count only below the group's best loss: B, bad at short context, falls to A's level and
// gains nothing; C, better than A, gains to 192. A gains nothing below C.
TEST(Recl, OnlyGainsBelowTheGroupsBestCount) {
  const auto a = flat({3.0, 3.0, 3.0, 3.0}, 8), b = flat({5.0, 4.0, 3.0, 3.0}, 8),
             c = flat({2.9, 2.8, 2.7, 2.7}, 8);
  auto r = relative_effective_context(table({a, b}), kGrid, ratios({1.0}));
  EXPECT_EQ(r.recl[0][0], 64);
  EXPECT_EQ(r.recl[1][0], 64) << "B's fall from 5 to 3 is not a gain below A's 3";
  r = relative_effective_context(table({a, b, c}), kGrid, ratios({1.0}));
  EXPECT_EQ(r.recl, (std::vector<std::vector<std::int64_t>>{{64}, {64}, {192}}));
}

// Tied models get one RECL; tied losses at the top-r boundary are taken earliest first: with
// every b equal at 64, r = 0.5 of 4 tokens takes tokens 0 and 1, which gain; 2 and 3 do not.
TEST(Recl, Ties) {
  const auto m = flat({4.0, 3.9, 3.8, 3.8}, 6);
  const auto r = relative_effective_context(table({m, m}), kGrid);
  EXPECT_EQ(r.recl[0], r.recl[1]);
  EXPECT_EQ(r.recl[0], (std::vector<std::int64_t>{192, 192, 192}));
  const std::vector<std::vector<double>> early = {
      {3, 3, 3, 3}, {2, 2, 3, 3}, {2, 2, 3, 3}, {2, 2, 3, 3}};
  const std::vector<std::vector<double>> late = {
      {3, 3, 3, 3}, {3, 3, 2, 2}, {3, 3, 2, 2}, {3, 3, 2, 2}};
  EXPECT_EQ(relative_effective_context(table({early}), kGrid, ratios({0.5})).recl[0][0], 128);
  EXPECT_EQ(relative_effective_context(table({late}), kGrid, ratios({0.5})).recl[0][0], 64);
}

TEST(Recl, RejectsABadTableGridOrRatio) {
  const auto t = table({flat({4.0, 3.9, 3.8, 3.8}, 4)});
  TXL_EXPECT_THROW_WITH(relative_effective_context(t, {64, 128, 192}), "4 context columns but 3");
  TXL_EXPECT_THROW_WITH(relative_effective_context(t, {64, 192, 128, 256}), "must increase");
  TXL_EXPECT_THROW_WITH(relative_effective_context(t, kGrid, ratios({0.0})), "must be in (0, 1]");
  auto nan = t.clone();
  nan[0][1][2] = NAN;
  TXL_EXPECT_THROW_WITH(relative_effective_context(nan, kGrid), "not finite");
  TXL_EXPECT_THROW_WITH(relative_effective_context(torch::zeros({4, 4}), kGrid),
                        "[models, contexts, tokens]");
}

// --- paired bootstrap ---------------------------------------------------------------------

TEST(PairedBootstrap, SameLossesGiveOneAndAConstantGapItsExactRatio) {
  torch::manual_seed(1);
  const auto a = torch::rand({1000}, torch::kDouble) * 5;  // [1000]
  auto same = paired_bootstrap_ppl_ratio(a, a);
  EXPECT_EQ(same.ratio, 1.0);
  EXPECT_EQ(same.low, 1.0);
  EXPECT_EQ(same.high, 1.0);
  EXPECT_FALSE(same.significant());
  const auto gap = paired_bootstrap_ppl_ratio(a, a - 0.02);
  EXPECT_NEAR(gap.ratio, std::exp(0.02), 1e-12);
  EXPECT_NEAR(gap.low, std::exp(0.02), 1e-12);
  EXPECT_NEAR(gap.high, std::exp(0.02), 1e-12);
  EXPECT_TRUE(gap.significant());
  EXPECT_EQ(gap.blocks, 16);  // ceil(1000 / 64)
  EXPECT_EQ(gap.tokens, 1000);
}

// Two models with the same loss distribution: the 95% interval holds 1 in at least 18 of 20
// texts; and it narrows about as 1 / sqrt(N).
TEST(PairedBootstrap, NoRealDifferenceIsRarelySignificantAndMoreTokensNarrowTheInterval) {
  int holds_one = 0;
  for (int seed = 0; seed < 20; ++seed) {
    torch::manual_seed(100 + seed);
    const auto a = torch::rand({6400}, torch::kDouble) * 4,
               b = torch::rand({6400}, torch::kDouble) * 4;
    holds_one += paired_bootstrap_ppl_ratio(a, b, 64, 1000, seed).significant() ? 0 : 1;
  }
  EXPECT_GE(holds_one, 18);
  torch::manual_seed(7);
  const auto a = torch::rand({25600}, torch::kDouble) * 4,
             b = torch::rand({25600}, torch::kDouble) * 4;
  const auto quarter = paired_bootstrap_ppl_ratio(a.narrow(0, 0, 6400), b.narrow(0, 0, 6400));
  const auto whole = paired_bootstrap_ppl_ratio(a, b);
  const double narrowing = (whole.high - whole.low) / (quarter.high - quarter.low);
  EXPECT_GT(narrowing, 0.35);
  EXPECT_LT(narrowing, 0.7);
}

// Differences that persist over passages (one sign per 64-token stretch): blocks of 64 see 100
// independent draws, not 6,400, and give an interval several times wider than blocks of 1.
TEST(PairedBootstrap, BlocksWidenTheIntervalForCorrelatedTokens) {
  torch::manual_seed(3);
  const auto signs = torch::randint(0, 2, {100, 1}, torch::kDouble) * 2 - 1;  // [100, 1]
  const auto d = (signs * 0.05).expand({100, 64}).reshape({6400});            // [6400]
  const auto b = torch::rand({6400}, torch::kDouble) * 4;                     // [6400]
  const auto blocks = paired_bootstrap_ppl_ratio(b + d, b, 64);
  const auto tokens = paired_bootstrap_ppl_ratio(b + d, b, 1);
  EXPECT_DOUBLE_EQ(blocks.ratio, tokens.ratio);
  EXPECT_GT(blocks.high - blocks.low, 4.0 * (tokens.high - tokens.low));
}

TEST(PairedBootstrap, IsDeterministicForASeedAndRejectsBadInput) {
  torch::manual_seed(5);
  const auto a = torch::rand({500}, torch::kDouble), b = torch::rand({500}, torch::kDouble);
  const auto x = paired_bootstrap_ppl_ratio(a, b, 32, 200, 9),
             y = paired_bootstrap_ppl_ratio(a, b, 32, 200, 9);
  EXPECT_EQ(x.low, y.low);
  EXPECT_EQ(x.high, y.high);
  EXPECT_NE(paired_bootstrap_ppl_ratio(a, b, 32, 200, 10).low, x.low);
  TXL_EXPECT_THROW_WITH(paired_bootstrap_ppl_ratio(a, b.narrow(0, 0, 499)), "one size");
  TXL_EXPECT_THROW_WITH(paired_bootstrap_ppl_ratio(a, b, 0), "block >= 1");
  auto nan = b.clone();
  nan[3] = NAN;
  TXL_EXPECT_THROW_WITH(paired_bootstrap_ppl_ratio(a, nan), "not finite");
}

}  // namespace

namespace {

// Targets at offsets 1..8 of a text whose documents start at 0 and 5: positions 1, 2, 3, 4 in the
// first, then 0, 1, 2, 3 in the second. Each loss is 10 x its offset, so every bucket's mean
// names the targets it holds.
TEST(LossByDocumentPosition, GroupsPositionsInPowersOfTwo) {
  const auto losses = torch::arange(1, 9, torch::kDouble) * 10;  // double [8]
  const auto starts = torch::tensor({0, 5}, torch::kLong);       // int64 [2]
  std::vector<std::int64_t> counts;
  const auto three = txl::eval::loss_by_document_position(losses, starts, 3, &counts);
  EXPECT_EQ(counts, (std::vector<std::int64_t>{1, 4, 3}));
  EXPECT_DOUBLE_EQ(three[0], 50.0);                       // position 0: offset 5
  EXPECT_DOUBLE_EQ(three[1], (10.0 + 20 + 60 + 70) / 4);  // positions 1-2
  EXPECT_DOUBLE_EQ(three[2], (30.0 + 40 + 80) / 3);       // positions 3-6
  const auto two = txl::eval::loss_by_document_position(losses, starts, 2, &counts);
  EXPECT_EQ(counts, (std::vector<std::int64_t>{1, 7}));  // the last bucket is open
  const auto many = txl::eval::loss_by_document_position(losses, starts, 6, &counts);
  EXPECT_TRUE(std::isnan(many[5]));  // no target that far in
  EXPECT_EQ(counts[5], 0);
  TXL_EXPECT_THROW_WITH(txl::eval::loss_by_document_position(losses, starts, 0), "buckets");
  // Document mode's losses leave out offset 5 (the second document's first token): the same
  // positions without position 0.
  const auto alone = torch::cat({losses.narrow(0, 0, 4), losses.narrow(0, 5, 3)});  // [7]
  const auto kept = txl::eval::loss_by_document_position(alone, starts, 3, &counts, true);
  EXPECT_EQ(counts, (std::vector<std::int64_t>{0, 4, 3}));
  EXPECT_DOUBLE_EQ(kept[1], three[1]);
  EXPECT_DOUBLE_EQ(kept[2], three[2]);
}

}  // namespace
