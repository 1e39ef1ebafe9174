#include "txl/ops/linear_cross_entropy.h"

#include <gtest/gtest.h>

#include <vector>

#include "support/test_support.h"
#include "txl/util/autocast.h"

namespace txl::ops {
namespace {

// The unfused output layer: log_softmax (in fp32 for bf16 logits) then nll_loss.
torch::Tensor reference(const torch::Tensor& hidden, const torch::Tensor& weight,
                        const torch::Tensor& bias, const torch::Tensor& target) {
  const torch::Tensor logits = torch::linear(hidden, weight, bias);  // [N, V]
  const torch::Tensor log_prob = logits.scalar_type() == torch::kBFloat16
                                     ? torch::log_softmax(logits, -1, torch::kFloat)
                                     : torch::log_softmax(logits, -1);  // [N, V]
  return torch::nll_loss(log_prob, target, {}, at::Reduction::None);    // [N]
}

struct Case {
  torch::Tensor hidden, weight, bias, target, upstream;  // [N, d], [V, d], [V], [N], [N]
};

// Random inputs with leaf parameters; the upstream gradient has zeros (masked rows) and varied
// weights, as the trainer's masked mean gives.
Case make_case(std::int64_t rows, std::int64_t width, std::int64_t classes,
               torch::ScalarType type) {
  auto opts = torch::dtype(type);
  Case c;
  c.hidden = (torch::randn({rows, width}, opts) * 1.5).requires_grad_();
  c.weight = (torch::randn({classes, width}, opts) * 0.7).requires_grad_();
  c.bias = torch::randn({classes}, opts).requires_grad_();
  c.target = torch::randint(classes, {rows}, torch::kLong);
  c.upstream = torch::rand({rows}, opts) * (torch::rand({rows}, opts) > 0.25).to(type);
  return c;
}

// nll and the gradients of sum(upstream * nll) with respect to hidden, weight, bias.
std::vector<torch::Tensor> run(const Case& c, bool fused, std::int64_t chunk_rows = 0) {
  const torch::Tensor nll =
      fused ? linear_cross_entropy(c.hidden, c.weight, c.bias, c.target, chunk_rows)
            : reference(c.hidden, c.weight, c.bias, c.target);
  const torch::Tensor loss = (nll.to(c.upstream.scalar_type()) * c.upstream).sum();
  std::vector<torch::Tensor> out{nll};
  for (const auto& g : torch::autograd::grad({loss}, {c.hidden, c.weight, c.bias}))
    out.push_back(g);
  return out;
}

const char* const kNames[] = {"nll", "d_hidden", "d_weight", "d_bias"};

// fp32 and fp64: the same nll and gradients as the unfused path, whatever the block size (one
// row, blocks that do not divide N, one block, more rows than N).
TEST(LinearCrossEntropy, MatchesUnfusedPath) {
  torch::manual_seed(1);
  for (auto type : {torch::kFloat, torch::kDouble}) {
    const Case c = make_case(37, 16, 53, type);
    const auto expected = run(c, false);
    const double tol = type == torch::kFloat ? 1e-5 : 1e-12;
    for (std::int64_t chunk : {0, 1, 5, 37, 100}) {
      SCOPED_TRACE(::testing::Message() << c10::toString(type) << " chunk_rows " << chunk);
      const auto got = run(c, true, chunk);
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(got[i].scalar_type(), type) << kNames[i];
        EXPECT_TRUE(txl::test::tensor_near(got[i], expected[i], tol, tol)) << kNames[i];
      }
    }
  }
}

// exp(-nll) over every possible target of one row sums to one: the normalisation is right.
TEST(LinearCrossEntropy, ProbabilitiesOverAllTargetsSumToOne) {
  torch::manual_seed(2);
  const std::int64_t classes = 41;
  const torch::Tensor row = torch::randn({1, 8}) * 3;       // [1, d]
  const torch::Tensor hidden = row.expand({classes, 8});    // [V, d]
  const torch::Tensor weight = torch::randn({classes, 8});  // [V, d]
  const torch::Tensor bias = torch::randn({classes});       // [V]
  const torch::Tensor nll =
      linear_cross_entropy(hidden, weight, bias, torch::arange(classes), 3);  // [V]
  EXPECT_TRUE((nll > 0).all().item<bool>());
  EXPECT_NEAR(nll.neg().exp().sum().item<double>(), 1.0, 1e-5);
}

// Each row of d_logits = (softmax - onehot) * g sums to zero. Seen from outside: a weight column
// that is the same for every class gets no gradient through hidden, and d_bias sums to zero.
TEST(LinearCrossEntropy, LogitGradientRowsSumToZero) {
  torch::manual_seed(3);
  Case c = make_case(29, 6, 31, torch::kDouble);
  {
    torch::NoGradGuard no_grad;
    c.weight.select(1, 2).fill_(0.8);
  }
  const auto got = run(c, true, 4);
  EXPECT_LT(got[1].select(1, 2).abs().max().item<double>(), 1e-12);
  EXPECT_GT(got[1].select(1, 1).abs().max().item<double>(), 1e-3);  // the other columns do get one
  EXPECT_NEAR(got[3].sum().item<double>(), 0.0, 1e-12);
}

// A row whose nll is masked out (upstream gradient 0) contributes nothing: the gradients equal
// those of the scored rows alone.
TEST(LinearCrossEntropy, MaskedRowsContributeNothing) {
  torch::manual_seed(4);
  const Case c = make_case(20, 8, 30, torch::kDouble);
  const torch::Tensor scored = c.upstream.ne(0).nonzero().reshape({-1});  // [S]
  ASSERT_GT(scored.numel(), 0);
  ASSERT_LT(scored.numel(), 20);
  Case only = c;
  only.hidden = c.hidden.detach().index_select(0, scored).requires_grad_();
  only.target = c.target.index_select(0, scored);
  only.upstream = c.upstream.index_select(0, scored);
  const auto all = run(c, true, 3);
  const auto part = run(only, true, 3);
  EXPECT_TRUE(txl::test::tensor_near(all[1].index_select(0, scored), part[1], 1e-12, 1e-12));
  const torch::Tensor masked = c.upstream.eq(0).nonzero().reshape({-1});
  EXPECT_TRUE(
      txl::test::tensor_equal(all[1].index_select(0, masked), torch::zeros({masked.numel(), 8})));
  EXPECT_TRUE(txl::test::tensor_near(all[2], part[2], 1e-12, 1e-12));
  EXPECT_TRUE(txl::test::tensor_near(all[3], part[3], 1e-12, 1e-12));
}

// Without gradients (evaluation) the softmax is not written and nothing is saved: the same nll
// to the bit, in fp32 and under bf16 autocast.
TEST(LinearCrossEntropy, NoGradGivesTheSameNll) {
  torch::manual_seed(9);
  const Case c = make_case(33, 16, 70, torch::kFloat);
  for (bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "bf16 autocast" : "fp32");
    AutocastGuard autocast(bf16, torch::kCPU);
    const torch::Tensor with_grad = linear_cross_entropy(c.hidden, c.weight, c.bias, c.target, 4);
    ASSERT_TRUE(with_grad.requires_grad());
    torch::Tensor without;
    {
      torch::NoGradGuard no_grad;
      without = linear_cross_entropy(c.hidden, c.weight, c.bias, c.target, 4);
    }
    EXPECT_FALSE(without.requires_grad());
    EXPECT_TRUE(txl::test::tensor_equal(without, with_grad.detach()));
  }
}

// Backward leaves what it saved untouched: a second backward through the same graph agrees.
TEST(LinearCrossEntropy, BackwardTwiceAgrees) {
  torch::manual_seed(5);
  const Case c = make_case(12, 4, 9, torch::kFloat);
  const torch::Tensor loss =
      (linear_cross_entropy(c.hidden, c.weight, c.bias, c.target, 5) * c.upstream).sum();
  const auto first =
      torch::autograd::grad({loss}, {c.hidden, c.weight, c.bias}, {}, /*retain_graph=*/true);
  const auto second = torch::autograd::grad({loss}, {c.hidden, c.weight, c.bias});
  for (size_t i = 0; i < first.size(); ++i)
    EXPECT_TRUE(txl::test::tensor_equal(first[i], second[i]));
}

// Under bf16 autocast the products run in bf16 and the statistics in fp32, as the unfused path
// does: the nll is fp32, the gradients of the fp32 leaves are fp32, and both agree with the
// unfused path under autocast to bf16 rounding and with fp32 to bf16 tolerances.
TEST(LinearCrossEntropy, Bfloat16AutocastMatchesUnfusedPath) {
  torch::manual_seed(6);
  const Case c = make_case(45, 32, 300, torch::kFloat);
  const auto fp32 = run(c, false);
  std::vector<torch::Tensor> amp, fused;
  {
    AutocastGuard autocast(true, torch::kCPU);
    amp = run(c, false);
    fused = run(c, true, 7);
  }
  ASSERT_EQ(amp[0].scalar_type(), torch::kFloat);
  bool bf16_products = false;
  {
    AutocastGuard autocast(true, torch::kCPU);
    bf16_products = txl::ops::linear_cross_entropy_dtype(c.hidden, c.weight) == torch::kBFloat16;
  }
  for (size_t i = 0; i < fused.size(); ++i) {
    SCOPED_TRACE(kNames[i]);
    EXPECT_EQ(fused[i].scalar_type(), torch::kFloat);
    const double scale = fp32[i].abs().max().item<double>();
    if (!bf16_products) {  // a CPU without AVX-512: fp32 products, the fp32 path's figures
      EXPECT_TRUE(txl::test::tensor_near(fused[i], fp32[i], 1e-5 * scale, 1e-4));
      continue;
    }
    // Same bf16 logits, fp32 statistics: the nll agrees closely; the gradients went through one
    // bf16 rounding of d_logits each (at different points for d_bias).
    EXPECT_TRUE(txl::test::tensor_near(fused[i], amp[i], i == 0 ? 1e-4 : 0.01 * scale, 0.01));
    EXPECT_TRUE(txl::test::tensor_near(fused[i], fp32[i], 0.03 * scale, 0.03));
  }
}

// Confident rows under bf16 autocast: the target's softmax is 0.9955, so its gradient 1 - p is
// 0.0045, below the bf16 spacing near 1 (0.0039). It must be formed in fp32 and rounded once:
// rounding p first and then subtracting 1 would be off by up to 40%.
TEST(LinearCrossEntropy, Bfloat16ConfidentTargetsKeepTheirGradient) {
  torch::manual_seed(8);
  const std::int64_t rows = 64, classes = 100;
  Case c;
  c.hidden = (torch::randn({rows, 8}) * 0.5).requires_grad_();  // small logits next to the bias
  c.weight = (torch::randn({classes, 8}) * 0.01).requires_grad_();
  c.bias = torch::zeros({classes}).index_fill_(0, torch::tensor({0}), 10.0).requires_grad_();
  c.target = torch::zeros({rows}, torch::kLong);
  c.upstream = torch::full({rows}, 1.0 / rows);
  const auto fp32 = run(c, false);
  std::vector<torch::Tensor> fused;
  {
    AutocastGuard autocast(true, torch::kCPU);
    fused = run(c, true, 16);
  }
  const double want = fp32[3][0].item<double>(), got = fused[3][0].item<double>();
  ASSERT_NEAR(want, -0.00446, 0.0001);
  EXPECT_NEAR(got, want, 0.01 * std::abs(want));
  // The other classes: p of about 4.5e-5 each, a relative error of bf16 rounding.
  EXPECT_TRUE(txl::test::tensor_near(fused[3].narrow(0, 1, classes - 1),
                                     fp32[3].narrow(0, 1, classes - 1), 0, 0.01));
  // d_weight of the target class is the target column of the bf16 d_logits times hidden: it
  // shows the column as written down, not only the fp32 sum d_bias is taken from.
  const torch::Tensor want_row = fp32[2][0], got_row = fused[2][0];  // [d]
  EXPECT_LT((got_row - want_row).abs().max().item<double>(),
            0.02 * want_row.abs().max().item<double>())
      << got_row << want_row;
}

// A layer converted to bf16 as a whole: bf16 products, fp32 statistics and nll, bf16 gradients.
TEST(LinearCrossEntropy, Bfloat16InputsGiveFp32Nll) {
  torch::manual_seed(7);
  const Case c = make_case(30, 16, 100, torch::kFloat);
  Case b = c;
  b.hidden = c.hidden.detach().to(torch::kBFloat16).requires_grad_();
  b.weight = c.weight.detach().to(torch::kBFloat16).requires_grad_();
  b.bias = c.bias.detach().to(torch::kBFloat16).requires_grad_();
  const auto fp32 = run(c, false);
  const auto got = run(b, true, 4);
  EXPECT_EQ(got[0].scalar_type(), torch::kFloat);
  EXPECT_TRUE(txl::test::tensor_near(got[0], fp32[0], 0.05, 0.02));
  for (size_t i = 1; i < got.size(); ++i) {
    EXPECT_EQ(got[i].scalar_type(), torch::kBFloat16) << kNames[i];
    const double scale = fp32[i].abs().max().item<double>();
    EXPECT_TRUE(txl::test::tensor_near(got[i].to(torch::kFloat), fp32[i], 0.03 * scale, 0.03))
        << kNames[i];
  }
}

TEST(LinearCrossEntropy, RejectsBadShapes) {
  const torch::Tensor h = torch::randn({4, 3}), w = torch::randn({5, 3}), b = torch::randn({5});
  const torch::Tensor t = torch::zeros({4}, torch::kLong);
  TXL_EXPECT_THROW_WITH(linear_cross_entropy(h, torch::randn({5, 2}), b, t), "weight [V, d]");
  TXL_EXPECT_THROW_WITH(linear_cross_entropy(h, w, torch::randn({4}), t), "bias must be [V]");
  TXL_EXPECT_THROW_WITH(linear_cross_entropy(h, w, b, torch::zeros({3}, torch::kLong)),
                        "target must be int64 [N]");
  TXL_EXPECT_THROW_WITH(linear_cross_entropy(h, w, b, t, -1), "chunk_rows");
}

}  // namespace
}  // namespace txl::ops
