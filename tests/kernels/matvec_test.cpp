// kernels::matvec equals torch::mv (+ bias): fp64 to 1e-12, fp32 to 1e-5 sqrt(in) (sums of `in`
// products of unit size round differently in another order), for row counts that are
// and are not multiples of its blocks of four, and large enough to be split between threads.
#include "txl/kernels/matvec.h"
#include "txl/kernels/vector_loops.h"

#include <gtest/gtest.h>

#include <cmath>

#include "support/test_support.h"

namespace txl::kernels {
namespace {

using txl::test::tensor_near;

TEST(Matvec, EqualsTorchMv) {
  for (auto dtype : {torch::kDouble, torch::kFloat}) {
    for (auto [out, in] : std::vector<std::pair<int64_t, int64_t>>{
             {1, 1}, {3, 5}, {4, 8}, {7, 33}, {768, 256}, {12871, 256}, {257, 1024}}) {
      SCOPED_TRACE(::testing::Message() << out << " x " << in << " " << dtype);
      const double tol = dtype == torch::kDouble ? 1e-12 : 1e-5 * std::sqrt(double(in));
      torch::manual_seed(out * 31 + in);
      auto w = torch::randn({out, in}, torch::dtype(dtype));  // [out, in]
      auto x = torch::randn({in}, torch::dtype(dtype));       // [in]
      auto b = torch::randn({out}, torch::dtype(dtype));      // [out]
      EXPECT_TRUE(tensor_near(matvec(w, x), torch::mv(w, x), tol, tol));
      EXPECT_TRUE(tensor_near(matvec(w, x, b), torch::addmv(b, w, x), tol, tol));
    }
  }
}

TEST(Matvec, BadInputsAreClearErrors) {
  auto w = torch::randn({4, 3});
  TXL_EXPECT_THROW_WITH(matvec(w, torch::randn({4})), "x must be contiguous [in = 3]");
  TXL_EXPECT_THROW_WITH(matvec(w.t(), torch::randn({4})), "w must be");
  TXL_EXPECT_THROW_WITH(matvec(w, torch::randn({3}, torch::kDouble)), "x must be");
  TXL_EXPECT_THROW_WITH(matvec(w, torch::randn({3}), torch::randn({3})), "bias must be");
  TXL_EXPECT_THROW_WITH(matvec(w.to(torch::kHalf), torch::randn({3})), "w must be");
  EXPECT_FALSE(vector_loops_take(torch::zeros({1}, torch::kLong)));
}

}  // namespace
}  // namespace txl::kernels
