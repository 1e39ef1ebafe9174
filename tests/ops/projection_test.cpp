// ops::Projection and ops::log_softmax_linear, at every CPU level this machine runs, through each
// of their kernels (packed panels, AVX-512 or portable; the matrix-vector product; LibTorch's
// product), equal fp64 LibTorch: x W^T + b, its relu, and log_softmax(x W^T + b) with the bias
// counted once. Rows 1, 3, 16, 64 (the packed panels' limit) and 65, with and without W^T.
//
// The packed path of log_softmax_linear added the bias twice until 2026-12-06 (its panels carry
// the bias, and the log-softmax added it again): decoding on AVX-512 CPUs, the only ones that
// packed, gave other log-probabilities than the model. always_packed runs that path on every CPU;
// the control, the bias counted twice, fails the bound.
#include "txl/ops/projection.h"

#include <gtest/gtest.h>

#include <string>

#include "support/test_support.h"
#include "txl/util/cpu.h"

namespace txl::ops {
namespace {

// fp32 against fp64 on log-probabilities of logits of a few units.
constexpr double kTolerance = 1e-5;

double max_difference(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

struct Weights {
  torch::Tensor w, b;  // [V, in], [V]
};

// A vocabulary of 1,003 (a tail for every vector width) over 41 features, weights and bias of
// std 0.3.
Weights random_weights() {
  torch::manual_seed(5);
  return {torch::randn({1003, 41}) * 0.3, torch::randn({1003}) * 0.3};
}

TEST(Projection, LogSoftmaxLinearCountsTheBiasOnceOnEveryPath) {
  torch::NoGradGuard no_grad;
  const auto weights = random_weights();
  const auto w64 = weights.w.to(torch::kDouble), b64 = weights.b.to(torch::kDouble);
  const auto weight_t = weights.w.t().contiguous();  // [in, V]
  for (int64_t rows : {int64_t{1}, int64_t{3}, int64_t{16}, kPackedRows, kPackedRows + 1}) {
    SCOPED_TRACE("rows " + std::to_string(rows));
    torch::manual_seed(rows);
    const auto hidden = torch::randn({rows, 41});  // [N, in]
    const auto logits = torch::linear(hidden.to(torch::kDouble), w64, b64);
    const auto exact = torch::log_softmax(logits, -1);        // [N, V]
    const auto twice = torch::log_softmax(logits + b64, -1);  // the control
    ASSERT_GT(max_difference(twice, exact), 100 * kTolerance);
    for (auto level : util::levels_available()) {
      SCOPED_TRACE(std::string("level ") + util::to_string(level));
      util::KernelLevelScope scope(level);
      const Projection plain(weights.w, weights.b);
      const auto packed = Projection::always_packed(weights.w, weights.b);
      const auto decoding = Projection::packed_for_decoding(weights.w, weights.b);
      ASSERT_TRUE(packed.packed());
      for (const auto* p : {&plain, &packed, &decoding}) {
        SCOPED_TRACE(p->packed() ? "packed" : "unpacked");
        EXPECT_LT(max_difference((*p)(hidden), logits), kTolerance);
        EXPECT_LT(max_difference((*p)(hidden, /*relu=*/true), logits.relu()), kTolerance);
        EXPECT_LT(max_difference(log_softmax_linear(*p, hidden), exact), kTolerance);
        EXPECT_LT(max_difference(log_softmax_linear(*p, hidden, weight_t), exact), kTolerance);
      }
    }
  }
}

}  // namespace
}  // namespace txl::ops
