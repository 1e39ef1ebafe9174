// models::Memory's row operations and named-tensor form, which checkpoints carry.
#include "txl/models/memory.h"

#include <set>

#include "support/test_support.h"
#include "txl/models/memory_mechanism.h"
#include "txl/util/error.h"

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

// A memory of every registered part: positions with a mask, a compressed memory with its mask,
// memory tokens (one tensor of the model).
Memory with_parts() {
  Memory m = sample(true);                                                      // [6, 5, 3] x 2
  m.parts["compressed"] = {{torch::randn({6, 2, 3}), torch::randn({6, 2, 3})},  // [B, N, d]
                           torch::rand({6, 2}) > 0.5};                          // [B, N]
  m.parts["tokens"] = {{torch::randn({6, 4, 3})}, {}};                          // [B, m, d]
  return m;
}

void expect_same_parts(const Memory& a, const Memory& b) {
  ASSERT_EQ(a.layers.empty(), b.layers.empty());
  if (!a.layers.empty()) expect_same(a, b);
  ASSERT_EQ(a.parts.size(), b.parts.size());
  for (const auto& [name, part] : a.parts) {
    const auto& other = b.part(name);
    ASSERT_EQ(part.layers.size(), other.layers.size()) << name;
    for (size_t l = 0; l < part.layers.size(); ++l)
      EXPECT_TRUE(txl::test::tensor_equal(part.layers[l], other.layers[l])) << name << " " << l;
    ASSERT_EQ(part.mask.defined(), other.mask.defined()) << name;
    if (part.mask.defined()) {
      EXPECT_TRUE(txl::test::tensor_equal(part.mask, other.mask)) << name;
    }
  }
}

// Rows, joins, detaching and named tensors are written once over the parts: each part keeps its
// checkpoint names (those of checkpoints written before the parts existed).
TEST(Memory, EveryPartSplitsJoinsDetachesAndRoundTrips) {
  const Memory m = with_parts();
  std::vector<std::string> names;
  for (const auto& [name, t] : m.to_tensors("memory/")) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"memory/layer.0", "memory/layer.1", "memory/key_mask",
                                             "memory/compressed.0", "memory/compressed.1",
                                             "memory/compressed_mask", "memory/tokens"}));
  expect_same_parts(
      Memory::from_tensors(m.to_tensors("memory/"), "memory/", 2, 3, torch::kCPU, "t"), m);
  const Memory joined = Memory::join_rows({m.narrow_rows(0, 1), m.narrow_rows(1, 5)});
  expect_same_parts(joined, m);
  EXPECT_EQ(m.narrow_rows(2, 3).part("tokens").rows(), 3);
  EXPECT_TRUE(txl::test::tensor_equal(m.narrow_rows(2, 3).part("compressed").mask,
                                      m.part("compressed").mask.narrow(0, 2, 3)));
  // Picking rows by index equals joining them one by one, every part and mask with them.
  const Memory picked = m.index_rows(torch::tensor({4, 1, 3}, torch::kLong));
  expect_same_parts(
      picked, Memory::join_rows({m.narrow_rows(4, 1), m.narrow_rows(1, 1), m.narrow_rows(3, 1)}));
  EXPECT_FALSE(txl::test::tensor_equal(picked.layers[0], m.narrow_rows(1, 3).layers[0]));
  EXPECT_TRUE(Memory().index_rows(torch::tensor({0}, torch::kLong)).empty());
  // Detaching cuts every part from the graph.
  Memory grad = m;
  grad.parts["tokens"].layers[0] = grad.part("tokens").layers[0].clone().requires_grad_(true);
  grad.layers[0] = grad.layers[0].clone().requires_grad_(true);
  const Memory cut = grad.detached();
  EXPECT_FALSE(cut.layers[0].requires_grad());
  EXPECT_FALSE(cut.part("tokens").layers[0].requires_grad());
  EXPECT_TRUE(grad.part("tokens").layers[0].requires_grad());
  // Memory tokens alone (no memory positions) are a memory too.
  Memory tokens_only;
  tokens_only.parts["tokens"] = m.part("tokens");
  EXPECT_FALSE(tokens_only.empty());
  EXPECT_EQ(tokens_only.rows(), 6);
  expect_same_parts(
      Memory::join_rows({tokens_only.narrow_rows(0, 4), tokens_only.narrow_rows(4, 2)}),
      tokens_only);
}

TEST(Memory, PiecesOrTensorsWhosePartsDisagreeAreRefused) {
  const Memory m = with_parts();
  Memory without_tokens = m.narrow_rows(3, 3);
  without_tokens.parts.erase("tokens");
  TXL_EXPECT_THROW_WITH(Memory::join_rows({m.narrow_rows(0, 3), without_tokens}),
                        "memory tokens is 0 layers");
  TXL_EXPECT_THROW_WITH(Memory::join_rows({without_tokens, m.narrow_rows(0, 3)}),
                        "with and without the part 'tokens'");
  auto named = m.to_tensors("memory/");
  // A compressed memory needs the memory it was compressed from, and rows of the same batch.
  std::vector<std::pair<std::string, torch::Tensor>> no_positions;
  for (const auto& [name, t] : named) {
    if (name.rfind("memory/layer.", 0) != 0 && name != "memory/key_mask")
      no_positions.emplace_back(name, t);
  }
  TXL_EXPECT_THROW_WITH(Memory::from_tensors(no_positions, "memory/", 2, 3, torch::kCPU, "ckpt"),
                        "ckpt: a compressed memory without memory layers");
  auto other_rows = named;
  other_rows.back().second = torch::zeros({5, 4, 3});  // the tokens of 5 rows, the memory's 6
  TXL_EXPECT_THROW_WITH(Memory::from_tensors(other_rows, "memory/", 2, 3, torch::kCPU, "ckpt"),
                        "ckpt: the memory tokens has 5 rows, the memory 6");
}

// The registry: Transformer-XL's memory of positions first, every part under names of its own.
TEST(Memory, EveryMechanismOfTheRegistryHasNamesOfItsOwn) {
  const auto& all = txl::models::memory_mechanisms();
  ASSERT_GE(all.size(), 3u);
  EXPECT_EQ(all.front()->layout().name, "layer");
  std::set<std::string> names, stems;
  for (const auto* m : all) {
    EXPECT_TRUE(names.insert(std::string(m->name())).second) << m->name();
    EXPECT_TRUE(stems.insert(m->layout().name).second) << m->layout().name;
    if (!m->layout().mask_name.empty()) {
      EXPECT_TRUE(stems.insert(m->layout().mask_name).second) << m->layout().mask_name;
    }
    EXPECT_FALSE(m->layout().setting.empty()) << m->name();
  }
}

}  // namespace

// What a forward is given as a mechanism's part: a wrong count, shape, gradient or mask is
// refused naming the part; the right one passes.
TEST(Memory, APartOfTheWrongShapeIsRefusedNamingThePart) {
  using txl::models::check_part;
  using txl::models::MemoryPart;
  using txl::models::PartLayout;
  using txl::models::PartShape;
  const PartLayout layout{"store", false, "store_mask", true, false, "test store", "S", "x"};
  const torch::Device cpu(torch::kCPU);
  const PartShape shape{1, 2, -1, 4, 3, false};  // one [B = 2, S <= 4, d = 3]
  const auto good = [] {
    MemoryPart p;
    p.layers = {torch::zeros({2, 4, 3})};
    p.mask = torch::ones({2, 4}, torch::kBool);
    return p;
  };
  EXPECT_NO_THROW(check_part(good(), layout, shape, cpu));
  MemoryPart p = good();
  p.layers.push_back(torch::zeros({2, 4, 3}));
  TXL_EXPECT_THROW_WITH(check_part(p, layout, shape, cpu),
                        "the test store is 2 tensors; expected 1");
  for (const auto& sizes : {std::vector<int64_t>{3, 4, 3}, {2, 5, 3}, {2, 4, 2}}) {
    p = good();
    p.layers = {torch::zeros(sizes)};
    p.mask = torch::ones({sizes[0], sizes[1]}, torch::kBool);
    TXL_EXPECT_THROW_WITH(check_part(p, layout, shape, cpu),
                          "the test store's tensor 0 must be [B = 2, S = <= 4, d = 3]");
  }
  p = good();
  p.layers = {torch::zeros({2, 4, 3}, torch::requires_grad())};
  TXL_EXPECT_THROW_WITH(check_part(p, layout, shape, cpu), "without gradient");
  PartShape with_grad = shape;
  with_grad.grad = true;
  EXPECT_NO_THROW(check_part(p, layout, with_grad, cpu));
  p = good();
  p.mask = torch::ones({2, 4});  // not bool
  TXL_EXPECT_THROW_WITH(check_part(p, layout, shape, cpu),
                        "the test store's mask must be bool [B = 2, S = 4]");
  p.mask = torch::Tensor();  // the layout requires one
  EXPECT_THROW(check_part(p, layout, shape, cpu), txl::Error);
  PartLayout optional_mask = layout;
  optional_mask.mask_required = false;
  EXPECT_NO_THROW(check_part(p, optional_mask, shape, cpu));
  PartShape exact = shape;
  exact.length = 3;  // exactly 3 rows
  TXL_EXPECT_THROW_WITH(check_part(good(), layout, exact, cpu), "S = 3");
}
