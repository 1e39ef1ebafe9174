// kernels::linear_packed equals torch::linear (+ relu) against a reference in fp64: the fp64
// product to 1e-12, the fp32 one to 1e-5 sqrt(in) (sums of `in` unit-sized products in another
// order). Row counts cover every block size of both kernels and their remainders (1 .. 17, 33),
// widths that are and are not multiples of a panel (out 1, 15, 16, 17, 12871), and inputs with an
// odd number of features (the split sums' remainder). The AVX-512 and portable kernels agree; the
// threads' split of the panels changes no bit; packing pads with zeros; bad inputs are errors.
#include "txl/kernels/packed_linear.h"

#include <gtest/gtest.h>

#include <cmath>

#include "support/test_support.h"
#include "txl/kernels/blas_threads.h"

namespace txl::kernels {
namespace {

using txl::test::tensor_near;

struct Case {
  int64_t rows, in, out;
};

// x [N, in] W^T + b in fp64, relu'd when asked: the reference for both dtypes.
torch::Tensor reference(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b,
                        bool relu) {
  auto y = torch::linear(x.to(torch::kDouble), w.to(torch::kDouble),
                         b.defined() ? b.to(torch::kDouble) : b);  // [N, out]
  return relu ? y.relu() : y;
}

void expect_equals_linear(const Case& c, torch::ScalarType dtype, PackedKernel kernel) {
  SCOPED_TRACE(::testing::Message() << c.rows << " x " << c.in << " -> " << c.out << " " << dtype
                                    << (kernel == PackedKernel::kBest ? " best" : " portable"));
  torch::manual_seed(c.rows * 1009 + c.in * 31 + c.out);
  const auto opts = torch::dtype(dtype);
  auto w = torch::randn({c.out, c.in}, opts);   // [out, in]
  auto b = torch::randn({c.out}, opts);         // [out]
  auto x = torch::randn({c.rows, c.in}, opts);  // [N, in]
  const double tol = dtype == torch::kDouble ? 1e-12 : 1e-5 * std::sqrt(double(c.in));
  for (bool with_bias : {false, true}) {
    for (bool relu : {false, true}) {
      const auto packed = pack_weight(w, with_bias ? b : torch::Tensor());
      LinearOptions o;
      o.relu = relu;
      o.kernel = kernel;
      auto y = linear_packed(x, packed, o);  // [N, out]
      ASSERT_EQ(y.sizes(), (torch::IntArrayRef{c.rows, c.out}));
      ASSERT_EQ(y.scalar_type(), dtype);
      auto want = reference(x, w, with_bias ? b : torch::Tensor(), relu);  // [N, out]
      EXPECT_TRUE(tensor_near(y.to(torch::kDouble), want, tol, tol))
          << "bias " << with_bias << " relu " << relu << ", largest error "
          << (y.to(torch::kDouble) - want).abs().max().item<double>();
      if (relu) {
        EXPECT_GE(y.min().item<double>(), 0.0);
      }
    }
  }
}

TEST(LinearPacked, EqualsLinearForEveryBlockOfRows) {
  std::vector<Case> cases;
  for (int64_t rows = 1; rows <= 17; ++rows) cases.push_back({rows, 37, 40});
  // 31 rows: every block (16, 8, 4, 2, 1) after another, each transposed in its own layout.
  for (int64_t rows : {31, 33, 64}) cases.push_back({rows, 37, 40});
  for (auto kernel : {PackedKernel::kBest, PackedKernel::kPortable}) {
    for (auto dtype : {torch::kDouble, torch::kFloat}) {
      for (const auto& c : cases) expect_equals_linear(c, dtype, kernel);
    }
  }
}

TEST(LinearPacked, EqualsLinearForEveryWidth) {
  const std::vector<Case> cases = {{3, 1, 1},        {2, 7, 15},     {5, 8, 16},
                                   {16, 9, 17},      {1, 256, 768},  {16, 1024, 256},
                                   {16, 256, 12871}, {1, 256, 12871}};
  for (auto kernel : {PackedKernel::kBest, PackedKernel::kPortable}) {
    for (auto dtype : {torch::kDouble, torch::kFloat}) {
      for (const auto& c : cases) expect_equals_linear(c, dtype, kernel);
    }
  }
}

TEST(LinearPacked, KernelsAgreeAndLeadingDimsAreKept) {
  torch::manual_seed(5);
  auto w = torch::randn({70, 50}, torch::kDouble);    // [out, in]
  auto b = torch::randn({70}, torch::kDouble);        // [out]
  auto x = torch::randn({2, 3, 50}, torch::kDouble);  // [2, 3, in]: six rows
  const auto packed = pack_weight(w, b);
  LinearOptions portable;
  portable.kernel = PackedKernel::kPortable;
  auto best = linear_packed(x, packed);            // [2, 3, out]
  auto slow = linear_packed(x, packed, portable);  // [2, 3, out]
  ASSERT_EQ(best.sizes(), (torch::IntArrayRef{2, 3, 70}));
  EXPECT_TRUE(tensor_near(best, slow, 1e-12, 1e-12));
  EXPECT_TRUE(tensor_near(best, torch::linear(x, w, b), 1e-12, 1e-12));
}

TEST(LinearPacked, ThreadsChangeNoBit) {
  test::OpenBlasThreads blas;  // restores OpenBLAS's count
  if (!blas.available()) GTEST_SKIP() << "the BLAS is not OpenBLAS";
  for (auto dtype : {torch::kDouble, torch::kFloat}) {
    torch::manual_seed(11);
    auto w = torch::randn({12871, 256}, torch::dtype(dtype));  // [V, d]: split between threads
    auto x = torch::randn({16, 256}, torch::dtype(dtype));     // [16, d]
    const auto packed = pack_weight(w);
    blas.set(2);
    ASSERT_TRUE(blas_has_own_threads());
    auto split = linear_packed(x, packed);  // [16, V]
    blas.set(1);
    auto serial = linear_packed(x, packed);  // [16, V]
    EXPECT_TRUE(torch::equal(split, serial));
  }
}

TEST(LinearPacked, PanelsHoldTheTransposeAndZeros) {
  auto w = torch::arange(1, 1 + 17 * 3, torch::kFloat).view({17, 3});  // [out 17, in 3]
  auto b = torch::arange(17, torch::kFloat);                           // [17]
  const auto packed = pack_weight(w, b);
  ASSERT_EQ(packed.panels.sizes(), (torch::IntArrayRef{2, 3, 16}));  // two panels of 16
  ASSERT_EQ(packed.out, 17);
  EXPECT_TRUE(torch::equal(packed.panels[0], w.narrow(0, 0, 16).t()));
  EXPECT_TRUE(torch::equal(packed.panels[1].select(1, 0), w[16]));
  EXPECT_EQ(packed.panels[1].narrow(1, 1, 15).abs().sum().item<float>(), 0.0f);
  EXPECT_EQ(packed.bias.size(0), 32);
  EXPECT_EQ(packed.bias.narrow(0, 17, 15).abs().sum().item<float>(), 0.0f);
  EXPECT_EQ(pack_weight(w.to(torch::kDouble)).panels.size(2), 8);  // 8 doubles a panel
}

TEST(LinearPacked, ReluKeepsNaN) {
  for (auto kernel : {PackedKernel::kBest, PackedKernel::kPortable}) {
    auto w = torch::ones({20, 3});  // [out, in]
    auto x = torch::tensor({1.0f, std::nanf(""), 1.0f, -1.0f, -1.0f, -1.0f}).view({2, 3});
    LinearOptions o;
    o.relu = true;
    o.kernel = kernel;
    auto y = linear_packed(x, pack_weight(w), o);  // [2, out]
    EXPECT_TRUE(y[0].isnan().all().item<bool>());  // as torch::relu
    EXPECT_EQ(y[1].abs().max().item<float>(), 0.0f);
  }
}

TEST(LinearPacked, BadInputsAreClearErrors) {
  auto w = torch::randn({4, 3});
  const auto packed = pack_weight(w);
  TXL_EXPECT_THROW_WITH(linear_packed(torch::randn({2, 4}), packed), "[..., in = 3]");
  TXL_EXPECT_THROW_WITH(linear_packed(torch::randn({3, 2}).t(), packed), "contiguous");
  TXL_EXPECT_THROW_WITH(linear_packed(torch::randn({2, 3}, torch::kDouble), packed),
                        "of the weight's dtype");
  TXL_EXPECT_THROW_WITH(linear_packed(torch::randn({2, 3}), PackedWeight{}), "not packed");
  TXL_EXPECT_THROW_WITH(pack_weight(w.to(torch::kHalf)), "weight must be");
  TXL_EXPECT_THROW_WITH(pack_weight(torch::randn({4})), "weight must be");
  TXL_EXPECT_THROW_WITH(pack_weight(w, torch::randn({3})), "bias must be [out = 4]");
  EXPECT_FALSE(packed_takes(torch::zeros({2, 2}, torch::kLong)));
  auto cut = pack_weight(torch::randn({40, 3}));
  cut.panels = cut.panels.narrow(0, 0, 2);  // 32 columns' panels for out = 40
  TXL_EXPECT_THROW_WITH(linear_packed(torch::randn({2, 3}), cut), "as pack_weight makes them");
  auto short_bias = pack_weight(w, torch::randn({4}));
  short_bias.bias = short_bias.bias.narrow(0, 0, 4);
  TXL_EXPECT_THROW_WITH(linear_packed(torch::randn({2, 3}), short_bias), "packed bias");
  EXPECT_EQ(linear_packed(torch::randn({0, 3}), packed).sizes(), (torch::IntArrayRef{0, 4}));
}

}  // namespace
}  // namespace txl::kernels
