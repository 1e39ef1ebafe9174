#include "txl/data/batch.h"

#include "support/test_support.h"

namespace {

using txl::data::pad_sequences;
using txl::data::PadSide;
using txl::test::tensor_equal;

constexpr int P = -1;  // a pad id that no real token has

TEST(PadSequences, RightPaddingPutsRealTokensFirst) {
  auto out = pad_sequences({{1, 2, 3}, {4}, {}, {5, 6}}, P);
  EXPECT_EQ(out.ids.scalar_type(), torch::kInt64);
  EXPECT_EQ(out.mask.scalar_type(), torch::kBool);
  EXPECT_TRUE(tensor_equal(out.ids, torch::tensor({{1, 2, 3}, {4, P, P}, {P, P, P}, {5, 6, P}})));
  EXPECT_TRUE(tensor_equal(out.mask, torch::tensor({{1, 1, 1}, {1, 0, 0}, {0, 0, 0}, {1, 1, 0}})));
  EXPECT_TRUE(tensor_equal(out.lengths, torch::tensor({3, 1, 0, 2})));
}

TEST(PadSequences, LeftPaddingEndsEveryRowAtTheLastColumn) {
  auto out = pad_sequences({{1, 2, 3}, {4}, {}, {5, 6}}, 9, PadSide::kLeft);
  EXPECT_TRUE(tensor_equal(out.ids, torch::tensor({{1, 2, 3}, {9, 9, 4}, {9, 9, 9}, {9, 5, 6}})));
  EXPECT_TRUE(tensor_equal(out.mask, torch::tensor({{1, 1, 1}, {0, 0, 1}, {0, 0, 0}, {0, 1, 1}})));
  EXPECT_TRUE(tensor_equal(out.lengths, torch::tensor({3, 1, 0, 2})));
}

TEST(PadSequences, MaskAndLengthsAgreeAndPadIdOnlyWhereMasked) {
  auto out = pad_sequences({{7, 7}, {7, 7, 7, 7, 7}, {7}}, 0);
  EXPECT_TRUE(tensor_equal(out.mask.sum(1), out.lengths));
  EXPECT_TRUE(tensor_equal(out.ids.eq(7), out.mask));
}

TEST(PadSequences, AllEmptySequencesGiveZeroWidth) {
  auto out = pad_sequences({{}, {}}, P);
  EXPECT_EQ(out.ids.sizes(), (std::vector<int64_t>{2, 0}));
  EXPECT_EQ(out.mask.sizes(), (std::vector<int64_t>{2, 0}));
  EXPECT_TRUE(tensor_equal(out.lengths, torch::tensor({0, 0})));
}

TEST(PadSequences, NoSequencesIsAnError) {
  TXL_EXPECT_THROW_WITH(pad_sequences({}, P), "no sequences");
}

TEST(Batch, ToDeviceKeepsEverything) {
  txl::data::Batch batch;
  batch.tokens = torch::tensor({{1, 2}}, torch::kInt64);
  batch.targets = torch::tensor({{2, 3}}, torch::kInt64);
  batch.input_mask = torch::tensor({{true, true}});
  batch.target_mask = torch::tensor({{false, true}});
  batch.reset = torch::tensor({true});
  batch.n_scored = 1;
  batch.index = 5;
  auto moved = batch.to(torch::kCPU);
  EXPECT_TRUE(tensor_equal(moved.tokens, batch.tokens));
  EXPECT_TRUE(tensor_equal(moved.target_mask, batch.target_mask));
  EXPECT_EQ(moved.n_scored, 1);
  EXPECT_EQ(moved.index, 5);
  EXPECT_EQ(moved.rows(), 1);
  EXPECT_EQ(moved.length(), 2);
}

}  // namespace
