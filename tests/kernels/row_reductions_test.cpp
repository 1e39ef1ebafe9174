// kernels::log_softmax_rows_ equals log_softmax(x + bias) computed in fp64 (fp64 to 1e-12, fp32 to
// 2e-6 plus 1e-6 relative) for rows short and long, with and without the bias, and each row's
// probabilities sum to 1; -inf stays -inf, NaN stays in its row; threads change no bit.
// ops::argmax_rows equals torch::argmax, ties and NaNs included, on every path (the kernel for
// contiguous CPU float and double, LibTorch's argmax elsewhere).
#include "txl/kernels/row_reductions.h"
#include "txl/ops/sampling.h"

#include <gtest/gtest.h>

#include <limits>

#include "support/test_support.h"

namespace txl::kernels {
namespace {

using txl::test::tensor_equal;
using txl::test::tensor_near;

constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(LogSoftmaxRows, EqualsTorchLogSoftmax) {
  for (auto dtype : {torch::kDouble, torch::kFloat}) {
    for (auto [rows, n] : std::vector<std::pair<int64_t, int64_t>>{
             {1, 1}, {3, 7}, {16, 12871}, {2, 100003}, {40, 33}}) {
      SCOPED_TRACE(::testing::Message() << rows << " x " << n << " " << dtype);
      const double atol = dtype == torch::kDouble ? 1e-12 : 2e-6;
      const double rtol = dtype == torch::kDouble ? 1e-12 : 1e-6;
      torch::manual_seed(rows * 131 + n);
      auto x = torch::randn({rows, n}, torch::dtype(dtype)) * 4;  // [B, V]
      auto b = torch::randn({n}, torch::dtype(dtype));            // [V]
      // The exact values: fp64 (LibTorch's fp32 log_softmax sums 10^5 terms in fp32 and is
      // 3e-5 off itself there).
      auto exact = [](const torch::Tensor& t) {
        return torch::log_softmax(t.to(torch::kDouble), 1).to(t.scalar_type());  // [B, V]
      };
      auto plain = x.clone();  // [B, V]
      EXPECT_TRUE(tensor_near(log_softmax_rows_(plain), exact(x), atol, rtol));
      auto biased = x.clone();  // [B, V]
      auto& same = log_softmax_rows_(biased, b);
      EXPECT_EQ(same.data_ptr(), biased.data_ptr());  // in place
      EXPECT_TRUE(tensor_near(biased, exact(x + b), atol, rtol));
      auto mass = biased.to(torch::kDouble).exp().sum(1);  // [B]
      EXPECT_TRUE(tensor_near(mass, torch::ones({rows}, torch::kDouble), 10 * atol, 1e-5));
    }
  }
}

// Rows give the same bits whichever thread computes them (split_work's side thread where
// OpenBLAS has two threads, the caller where it has one).
TEST(LogSoftmaxRows, SideThreadChangesNoBit) {
  test::OpenBlasThreads blas;  // restores OpenBLAS's count
  if (!blas.available()) GTEST_SKIP() << "the BLAS is not OpenBLAS";
  auto x = torch::randn({16, 12871}) * 4;  // [B, V]
  auto b = torch::randn({12871});          // [V]
  auto split = x.clone();                  // [B, V]
  auto serial = x.clone();                 // [B, V]
  blas.set(2);
  log_softmax_rows_(split, b);
  blas.set(1);
  log_softmax_rows_(serial, b);
  EXPECT_TRUE(torch::equal(split, serial));
}

TEST(LogSoftmaxRows, MinusInfinityStaysAndNanStaysInItsRow) {
  for (auto dtype : {torch::kDouble, torch::kFloat}) {
    SCOPED_TRACE(dtype);
    auto x = torch::randn({3, 50}, torch::dtype(dtype));  // [B, V]
    x[0][7] = -kInf;
    x[0][30] = -kInf;
    x[1][2] = std::nan("");
    x[2].fill_(-kInf);
    auto y = x.clone();  // [B, V]
    log_softmax_rows_(y);
    auto expected = torch::log_softmax(x[0], 0);  // [V]
    EXPECT_TRUE(tensor_near(y[0], expected, 2e-6, 1e-6));
    EXPECT_TRUE(std::isinf(y[0][7].item<double>()) && y[0][7].item<double>() < 0);
    EXPECT_TRUE(y[1].isnan().all().item<bool>());
    EXPECT_FALSE(y[2].isfinite().any().item<bool>());  // no probability anywhere: no number
  }
}

TEST(ArgmaxRows, EqualsTorchArgmaxWithTiesAndNans) {
  for (auto dtype : {torch::kDouble, torch::kFloat}) {
    SCOPED_TRACE(dtype);
    torch::manual_seed(5);
    auto x = torch::randn({16, 12871}, torch::dtype(dtype));  // [B, V]
    EXPECT_TRUE(tensor_equal(ops::argmax_rows(x), x.argmax(1)));
    auto ties = torch::zeros({4, 9}, torch::dtype(dtype));  // [B, V]
    ties[0][3] = 2;
    ties[0][6] = 2;  // first of equal maxima: 3
    ties[1][8] = std::nan("");
    ties[1][2] = std::nan("");  // first NaN: 2
    ties[1][0] = 5;
    ties[2].fill_(-kInf);  // all -inf: 0
    ties[3][8] = 1;        // the last entry
    EXPECT_TRUE(tensor_equal(ops::argmax_rows(ties), torch::tensor({3, 2, 0, 8}, torch::kLong)));
    EXPECT_TRUE(tensor_equal(ops::argmax_rows(ties), ties.argmax(1)));
    auto strided = x.t().contiguous().t();  // [B, V], not contiguous: LibTorch's argmax
    EXPECT_TRUE(tensor_equal(ops::argmax_rows(strided), x.argmax(1)));
  }
  auto half = torch::randn({2, 5}).to(torch::kHalf);
  EXPECT_TRUE(tensor_equal(ops::argmax_rows(half), half.argmax(1)));
}

TEST(RowReductions, BadInputsAreClearErrors) {
  auto x = torch::randn({2, 3});
  auto strided = torch::randn({3, 2}).t();
  auto half = x.to(torch::kHalf);
  auto flat = torch::randn({3});
  TXL_EXPECT_THROW_WITH(log_softmax_rows_(strided), "x must be a contiguous CPU float");
  TXL_EXPECT_THROW_WITH(log_softmax_rows_(half), "x must be a contiguous CPU float");
  TXL_EXPECT_THROW_WITH(log_softmax_rows_(flat), "x must be a contiguous CPU float");
  TXL_EXPECT_THROW_WITH(log_softmax_rows_(x, torch::randn({4})), "bias must be contiguous [V = 3]");
  TXL_EXPECT_THROW_WITH(log_softmax_rows_(x, torch::randn({3}, torch::kDouble)), "bias must be");
  TXL_EXPECT_THROW_WITH(ops::argmax_rows(flat), "argmax_rows: x must be [B, V >= 1]");
  TXL_EXPECT_THROW_WITH(ops::argmax_rows(torch::zeros({2, 0})), "argmax_rows: x must be");
}

}  // namespace
}  // namespace txl::kernels
