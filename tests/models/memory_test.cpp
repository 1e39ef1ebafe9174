// models::Memory's row operations and named-tensor form, which checkpoints carry.
#include "txl/models/memory.h"

#include "support/test_support.h"

namespace {

using txl::models::Memory;

// 2 layers, 6 rows, 5 positions, width 3; a key mask with some padding.
Memory sample(bool with_mask) {
  torch::manual_seed(3);
  Memory m;
  m.layers = {torch::randn({6, 5, 3}), torch::randn({6, 5, 3})};  // [B, M, d]
  if (with_mask) m.key_mask = torch::rand({6, 5}) > 0.3;          // [B, M]
  return m;
}

void expect_same(const Memory& a, const Memory& b) {
  ASSERT_EQ(a.layers.size(), b.layers.size());
  for (size_t l = 0; l < a.layers.size(); ++l)
    EXPECT_TRUE(txl::test::tensor_equal(a.layers[l], b.layers[l])) << l;
  EXPECT_TRUE(txl::test::tensor_equal(a.mask_or_ones(), b.mask_or_ones()));
}

TEST(Memory, NarrowedPiecesJoinBackToTheWhole) {
  for (bool masked : {false, true}) {
    const Memory m = sample(masked);
    const Memory joined =
        Memory::join_rows({m.narrow_rows(0, 2), m.narrow_rows(2, 1), m.narrow_rows(3, 3)});
    expect_same(joined, m);
    EXPECT_EQ(joined.key_mask.defined(), masked);
  }
}

TEST(Memory, APieceWithoutMaskCountsAsAllReal) {
  Memory a = sample(true).narrow_rows(0, 2), b = sample(false).narrow_rows(2, 4);
  const Memory joined = Memory::join_rows({a, b});
  EXPECT_TRUE(txl::test::tensor_equal(joined.key_mask.narrow(0, 0, 2), a.key_mask));
  EXPECT_TRUE(joined.key_mask.narrow(0, 2, 4).all().item<bool>());
}

TEST(Memory, EmptyMemoriesStayEmptyAndMixturesAreRefused) {
  EXPECT_TRUE(Memory::join_rows({Memory(), Memory()}).empty());
  EXPECT_TRUE(Memory().narrow_rows(0, 0).empty());
  TXL_EXPECT_THROW_WITH(Memory::join_rows({sample(false), Memory()}), "cannot be joined");
  TXL_EXPECT_THROW_WITH(Memory::join_rows({Memory(), sample(false)}), "some pieces");
  TXL_EXPECT_THROW_WITH(sample(false).narrow_rows(4, 3), "outside the memory's 6 rows");
}

TEST(Memory, NamedTensorsRoundTrip) {
  for (bool masked : {false, true}) {
    const Memory m = sample(masked);
    auto named = m.to_tensors("memory/");
    ASSERT_EQ(named.size(), masked ? 3u : 2u);
    EXPECT_EQ(named[0].first, "memory/layer.0");
    named.emplace_back("other/layer.0", torch::zeros({1}));  // other prefixes are ignored
    expect_same(Memory::from_tensors(named, "memory/", 2, 3, torch::kCPU, "t"), m);
  }
  EXPECT_TRUE(Memory::from_tensors({}, "memory/", 2, 3, torch::kCPU, "t").empty());
}

TEST(Memory, NamedTensorsThatDoNotFitTheModelAreRefused) {
  auto named = sample(true).to_tensors("memory/");
  TXL_EXPECT_THROW_WITH(Memory::from_tensors(named, "memory/", 3, 3, torch::kCPU, "ckpt"),
                        "ckpt: the memory has 2 layers");
  TXL_EXPECT_THROW_WITH(Memory::from_tensors(named, "memory/", 2, 4, torch::kCPU, "ckpt"),
                        "expected one floating shape [B, M, 4]");
  auto bad_mask = named;
  bad_mask[2].second = torch::ones({6, 4}, torch::kBool);
  TXL_EXPECT_THROW_WITH(Memory::from_tensors(bad_mask, "memory/", 2, 3, torch::kCPU, "ckpt"),
                        "key mask");
  auto gap = named;
  gap[1].first = "memory/layer.7";
  TXL_EXPECT_THROW_WITH(Memory::from_tensors(gap, "memory/", 2, 3, torch::kCPU, "ckpt"),
                        "numbered up to 7");
  auto stray = named;
  stray.emplace_back("memory/bogus", torch::zeros({1}));
  TXL_EXPECT_THROW_WITH(Memory::from_tensors(stray, "memory/", 2, 3, torch::kCPU, "ckpt"),
                        "memory/bogus");
}

}  // namespace
