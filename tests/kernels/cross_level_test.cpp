// Every hand-written kernel at every CPU level this machine runs, in one process on the same
// inputs (util::KernelLevelScope), against a plain fp64 reference written with LibTorch's
// operations: the packed products (AVX-512 and portable panels), the batched small products, the
// matrix-vector product, the
// attention over cached keys (the AVX-512 heads of 16 N and the loops of each level), the row
// log-softmax and argmax, the output layer's softmax and its gradient, the fused add and layer
// norm, the vector exp and Adam's update. Sizes are odd on
// purpose (tails of a vector, heads of 12 and 41, widths of 410, 97 and 10,003) and values are
// large (std 0.3 over 410 features, inputs scaled by 30).
//
// Each fp32 result must lie within kBound of the exact value, measured against `scale`: the same
// computation on absolute values, which bounds float's rounding error. Each check has a control:
// the reference with its tail left out (the last input feature of a sum, the last output column,
// the bias of the last entry), what a kernel whose tail loop is gone computes, must fail the same
// bound, so the bound can see a broken tail.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernels/attention_definition.h"
#include "support/test_support.h"
#include "txl/kernels/adam.h"
#include "txl/kernels/batched_matmul.h"
#include "txl/kernels/cached_attention.h"
#include "txl/kernels/layer_norm.h"
#include "txl/kernels/matvec.h"
#include "txl/kernels/packed_linear.h"
#include "txl/kernels/row_reductions.h"
#include "txl/kernels/vector_math.h"
#include "txl/util/cpu.h"
#include "vector_clones.h"

namespace txl::kernels {
namespace {

using util::CpuLevel;

// fp32 against fp64, relative to the sum of absolute terms: 2^-23 is 1.2e-7, and sums of a few
// hundred terms stay well inside 1e-5 of their absolute sum.
constexpr double kBound = 1e-5;

// max |got - exact| / scale over the entries (scale > 0 everywhere).
double excess(const torch::Tensor& got, const torch::Tensor& exact, const torch::Tensor& scale) {
  auto e = (got.to(torch::kDouble) - exact).abs() / scale;
  // A NaN anywhere is an infinite excess, not a pass.
  if (e.isnan().any().item<bool>()) return std::numeric_limits<double>::infinity();
  return e.max().item<double>();
}

// Runs check(level) at every level the CPU has, naming the level on failure.
template <typename F>
void at_every_level(F&& check) {
  const auto levels = util::levels_available();
  ASSERT_FALSE(levels.empty());
  for (auto level : levels) {
    SCOPED_TRACE(std::string("level ") + util::to_string(level));
    util::KernelLevelScope scope(level);
    ASSERT_EQ(util::kernel_level(), level);
    check(level);
  }
}

// The bound holds for `got`, and fails by far for each control (the reference with a tail left
// out).
void expect_within(const torch::Tensor& got, const torch::Tensor& exact, const torch::Tensor& scale,
                   const std::vector<torch::Tensor>& controls) {
  EXPECT_LT(excess(got, exact, scale), kBound);
  for (const auto& control : controls) {
    EXPECT_GT(excess(control, exact, scale), 10 * kBound) << "a control passed: the bound is blind";
  }
}

torch::Tensor f64(const torch::Tensor& t) { return t.to(torch::kDouble); }

struct ProductSize {
  int64_t rows, in, out;
};

const std::vector<ProductSize>& product_sizes() {
  static const std::vector<ProductSize> kSizes = {{1, 41, 17},    {3, 410, 97}, {16, 96, 120},
                                                  {17, 48, 1003}, {5, 12, 33},  {64, 410, 410}};
  return kSizes;
}

// x [N, in] and W [out, in] of std 0.3 (x also scaled by 30), b [out].
struct Product {
  torch::Tensor x, w, b;
};

Product random_product(const ProductSize& s, uint64_t seed) {
  torch::manual_seed(seed);
  return {torch::randn({s.rows, s.in}) * 30, torch::randn({s.out, s.in}) * 0.3,
          torch::randn({s.out}) * 0.3};
}

TEST(CrossLevel, PackedProductsEqualTheReference) {
  for (const auto& s : product_sizes()) {
    SCOPED_TRACE(::testing::Message() << s.rows << " x " << s.in << " -> " << s.out);
    const auto p = random_product(s, s.rows * 1000 + s.in);
    const auto exact = torch::linear(f64(p.x), f64(p.w), f64(p.b));                    // [N, out]
    const auto scale = torch::linear(f64(p.x).abs(), f64(p.w).abs(), f64(p.b).abs());  // [N, out]
    // A kernel that dropped the last input feature of its sums.
    auto control = torch::linear(f64(p.x).narrow(1, 0, s.in - 1), f64(p.w).narrow(1, 0, s.in - 1),
                                 f64(p.b));  // [N, out]
    auto unstored = exact.clone();           // [N, out]
    unstored.select(1, s.out - 1).zero_();   // one that stored no tail column
    at_every_level([&](CpuLevel) {
      const auto packed = pack_weight(p.w, p.b);
      for (auto kernel : {PackedKernel::kBest, PackedKernel::kPortable}) {
        LinearOptions o;
        o.kernel = kernel;
        const auto got = linear_packed(p.x, packed, o);
        expect_within(got, exact, scale, {control, unstored});
        o.relu = true;
        EXPECT_TRUE(torch::equal(linear_packed(p.x, packed, o), got.relu()));
      }
    });
  }
}

// Batches of small products c[s] = a[s] b[s] (the attention's per head and row) at odd sizes:
// columns not a whole vector, heads of 41 and 12, sums of 410; b as stored, b transposed (the
// keys of q k^T, copied into whole vectors first) and a transposed (a^T grad, the backward's).
TEST(CrossLevel, BatchedProductsEqualTheReference) {
  struct Size {
    int64_t s, m, k, n;
  };
  for (const auto& z : std::vector<Size>{{3, 1, 41, 17},
                                         {5, 7, 12, 33},
                                         {2, 32, 32, 96},
                                         {3, 5, 410, 97},
                                         {4, 41, 41, 41},
                                         {2, 3, 1, 16},
                                         {1, 6, 9, 8}}) {
    SCOPED_TRACE(::testing::Message() << z.s << " x " << z.m << " x " << z.k << " x " << z.n);
    torch::manual_seed(z.m * 100 + z.n);
    const auto a = torch::randn({z.s, z.m, z.k}) * 30, b = torch::randn({z.s, z.k, z.n}) * 0.3;
    const auto exact = torch::bmm(f64(a), f64(b));              // [S, M, N]
    const auto scale = torch::bmm(f64(a).abs(), f64(b).abs());  // [S, M, N]
    // A kernel that dropped the last term of its sums, and one that stored no tail column.
    auto control = exact - torch::bmm(f64(a).narrow(2, z.k - 1, 1), f64(b).narrow(1, z.k - 1, 1));
    auto unstored = exact.clone();
    unstored.select(2, z.n - 1).zero_();
    const auto bt = b.transpose(1, 2).contiguous().transpose(1, 2);  // b's values, N-major
    const auto at = a.transpose(1, 2).contiguous().transpose(1, 2);  // a's values, M-major
    at_every_level([&](CpuLevel) {
      for (const auto& [x, y] : {std::pair{a, b}, std::pair{a, bt}, std::pair{at, b}}) {
        const auto got = batched_matmul(x, y);
        EXPECT_TRUE(got.is_contiguous());
        expect_within(got, exact, scale, {control, unstored});
      }
      // Double: to double's rounding.
      EXPECT_LT((batched_matmul(f64(a), f64(bt)) - exact).abs().div(scale).max().item<double>(),
                1e-13);
    });
  }
}

TEST(CrossLevel, MatrixVectorProductsEqualTheReference) {
  for (const auto& s : product_sizes()) {
    SCOPED_TRACE(::testing::Message() << s.in << " -> " << s.out);
    const auto p = random_product(s, s.in * 7 + s.out);
    const auto x = p.x[0].contiguous();                                             // [in]
    const auto exact = torch::addmv(f64(p.b), f64(p.w), f64(x));                    // [out]
    const auto scale = torch::addmv(f64(p.b).abs(), f64(p.w).abs(), f64(x).abs());  // [out]
    const auto control = torch::addmv(f64(p.b), f64(p.w).narrow(1, 0, s.in - 1),
                                      f64(x).narrow(0, 0, s.in - 1));  // [out]
    auto unstored = exact.clone();                                     // [out]
    unstored[s.out - 1] = 0;
    at_every_level([&](CpuLevel) {
      expect_within(matvec(p.w, x, p.b), exact, scale, {control, unstored});
    });
  }
}

// Rows of n large logits (std 30) with a bias.
TEST(CrossLevel, RowLogSoftmaxAndArgmaxEqualTheReference) {
  for (int64_t n : {1, 15, 17, 120, 10003}) {
    SCOPED_TRACE(::testing::Message() << "n " << n);
    torch::manual_seed(n);
    auto x = torch::randn({5, n}) * 30;                         // [B, V]
    const auto b = torch::randn({n});                           // [V]
    const auto exact = torch::log_softmax(f64(x) + f64(b), 1);  // [B, V]
    // Rounding: of each entry and of the row's log-sum-exp, which the subtraction carries.
    const auto lse = torch::logsumexp(f64(x) + f64(b), 1, true);  // [B, 1]
    const auto scale = 1 + (f64(x) + f64(b)).abs() + lse.abs();   // [B, V]
    auto biased = f64(x) + f64(b);                                // [B, V]
    biased.select(1, n - 1) -= f64(b)[n - 1];  // a first pass that missed the tail's bias
    const auto control = torch::log_softmax(biased, 1);
    const auto expected_argmax = torch::argmax(x, 1);
    at_every_level([&](CpuLevel) {
      auto got = x.clone();
      log_softmax_rows_(got, b);
      if (n > 1) {
        expect_within(got, exact, scale, {control});
      } else {
        EXPECT_TRUE(torch::equal(got, torch::zeros_like(got)));  // one entry: log 1
      }
      EXPECT_TRUE(torch::equal(argmax_rows(x), expected_argmax));
    });
  }
}

// The output layer's softmax (softmax_rows_) and its gradient (cross_entropy_grad_rows) on rows of
// n logits of std 3 and 30 with a bias (std 30: most of a row's softmax is below exp(-87), the
// vector exp's floor; the last logit of each row is its largest, so that the tail weighs in its
// sum).
// The log-sum-exp within fp32's rounding of 1 + |lse|, each probability of its own size; the
// gradient and the bias's sum within rounding of the same sums over absolute values. Controls:
// a first pass that missed the tail's bias, and a gradient whose tail column was not scaled.
TEST(CrossLevel, SoftmaxAndCrossEntropyGradientEqualTheReference) {
  for (int64_t n : {1, 15, 17, 120, 10003}) {
    for (double spread : {3.0, 30.0}) {
      SCOPED_TRACE(::testing::Message() << "n " << n << " std " << spread);
      torch::manual_seed(n);
      auto x = torch::randn({5, n}) * spread;               // [B, V]
      auto b = torch::randn({n});                           // [V]
      x.select(1, n - 1).copy_(std::get<0>(x.max(1)) + 1);  // the tail leads every row
      b[n - 1] = 1.5;
      const auto grad = torch::rand({5}) * 2 - 0.5;  // [B]
      const auto target = torch::randint(n, {5}, torch::kLong);
      const auto d_target = torch::randn({5});               // [B]
      const auto z = f64(x) + f64(b);                        // [B, V]
      const auto exact_lse = torch::logsumexp(z, 1);         // [B]
      const auto exact = torch::softmax(z, 1);               // [B, V]
      auto missed = z.clone();                               // [B, V]
      missed.select(1, n - 1) -= f64(b)[n - 1];              // the tail's bias left out
      const auto control_lse = torch::logsumexp(missed, 1);  // [B]
      // The gradient from the exact softmax; the scale of each entry is its own size.
      auto exact_out = exact * f64(grad).unsqueeze(1);  // [B, V]
      exact_out.scatter_(1, target.unsqueeze(1), f64(d_target).unsqueeze(1));
      const auto exact_bias = exact_out.sum(0);        // [V]
      const auto out_scale = exact_out.abs() + 1e-30;  // [B, V]
      const auto bias_scale = exact_out.abs().sum(0) + 1e-30;
      auto unscaled = exact_out.clone();
      unscaled.select(1, n - 1) = exact.select(1, n - 1);  // a tail that missed grad[r]
      unscaled.scatter_(1, target.unsqueeze(1), f64(d_target).unsqueeze(1));
      at_every_level([&](CpuLevel) {
        auto got = x.clone();
        auto lse = torch::empty({5});
        softmax_rows_(got, b, lse, /*write=*/true);
        expect_within(
            lse, exact_lse, 1 + exact_lse.abs(),
            n > 1 ? std::vector<torch::Tensor>{control_lse} : std::vector<torch::Tensor>{});
        // A probability below exp(-87) is the floor's (about 1.6e-38 / sum): absolute 1e-37.
        EXPECT_LT(excess(got, exact, exact + 1e-32), kBound);
        auto no_write = x.clone();
        auto lse_only = torch::empty({5});
        softmax_rows_(no_write, b, lse_only, /*write=*/false);
        EXPECT_TRUE(torch::equal(lse_only, lse));
        auto out = torch::empty_like(got);
        auto d_bias = torch::zeros({n});
        cross_entropy_grad_rows(got, grad, target, d_target, out, d_bias);
        expect_within(out, exact_out, out_scale + 1e-30,
                      n > 1 ? std::vector<torch::Tensor>{unscaled} : std::vector<torch::Tensor>{});
        EXPECT_LT(excess(d_bias, exact_bias, bias_scale), kBound);
      });
    }
  }
}

TEST(CrossLevel, ArgmaxFindsAMaximumInTheTail) {
  for (int64_t n : {17, 41, 10003}) {
    SCOPED_TRACE(::testing::Message() << "n " << n);
    torch::manual_seed(n);
    auto x = torch::randn({3, n});  // [B, V]
    x[0][n - 1] = 100;              // the last entry, in every vector's tail
    x[1][n / 2] = 100;
    x[2][0] = 100;
    const auto expected = torch::tensor({n - 1, n / 2, int64_t{0}}, torch::kLong);
    // The control: an argmax that stopped before the tail gives another index for row 0.
    ASSERT_NE(torch::argmax(x.narrow(1, 0, n - 1), 1)[0].item<int64_t>(), n - 1);
    at_every_level([&](CpuLevel) { EXPECT_TRUE(torch::equal(argmax_rows(x), expected)); });
  }
}

TEST(CrossLevel, AddLayerNormEqualsTheReference) {
  for (int64_t d : {1, 12, 17, 41, 48, 410}) {
    SCOPED_TRACE(::testing::Message() << "d " << d);
    torch::manual_seed(d);
    // Rows far from zero (mean 100, std 30): the centring is where float loses most.
    const auto x = torch::randn({7, d}) * 30 + 100;  // [N, d]
    const auto y = torch::randn({7, d}) * 30;        // [N, d]
    const auto w = torch::randn({d}) * 0.3 + 1;      // [d]
    const auto b = torch::randn({d}) * 0.3;          // [d]
    const auto sum = f64(x) + f64(y);                // [N, d]
    const auto exact = torch::layer_norm(sum, {d}, f64(w), f64(b), 1e-5);
    const auto unit = torch::layer_norm(sum, {d}, {}, {}, 1e-5);  // [N, d]
    const auto scale = f64(w).abs() * (unit.abs() + 1) + f64(b).abs();
    // A kernel whose first pass left the last feature out of the mean (one feature: none).
    std::vector<torch::Tensor> controls;
    if (d > 1) {
      const auto mean = sum.narrow(1, 0, d - 1).mean(1, true);                   // [N, 1]
      const auto var = (sum - sum.mean(1, true)).pow(2).mean(1, true);           // [N, 1]
      controls.push_back((sum - mean) / (var + 1e-5).sqrt() * f64(w) + f64(b));  // [N, d]
    }
    at_every_level([&](CpuLevel) {
      expect_within(add_layer_norm(x, y, w, b, 1e-5), exact, scale, controls);
      // Without weight and bias: the unit norm.
      EXPECT_LT(excess(add_layer_norm(x, y, {}, {}, 1e-5), unit, unit.abs() + 1), kBound);
    });
  }
}

struct AttentionCase {
  int64_t d, k_len;
  bool rel, biases;
};

// One query per row over keys [first_b, K), each row of B its own first slot.
struct AttentionInputs {
  torch::Tensor qkv;  // [B, 3, H, D]
  CachedKeys keys;    // buffer [2, H, B, C, D]
  std::vector<int64_t> first;
};

AttentionInputs attention_inputs(const AttentionCase& c, uint64_t seed) {
  constexpr int64_t kBatch = 3, kHeads = 2, kCapacity = 40;
  torch::manual_seed(seed);
  AttentionInputs in;
  // Queries of std 1 / sqrt(D) as the model scales them, keys and values of std 3.
  in.qkv = torch::randn({kBatch, 3, kHeads, c.d}) * 3;  // [B, 3, H, D]
  in.qkv.select(1, 0).mul_(1.0 / std::sqrt(static_cast<double>(c.d)));
  in.keys.buffer = torch::randn({2, kHeads, kBatch, kCapacity, c.d}) * 3;   // [2, H, B, C, D]
  if (c.rel) in.keys.by_distance = torch::randn({kHeads, kCapacity, c.d});  // [H, C, D]
  if (c.biases) {
    in.keys.u = torch::randn({kHeads, c.d}) * 0.3;  // [H, D]
    in.keys.v = torch::randn({kHeads, c.d}) * 0.3;  // [H, D]
  }
  for (int64_t b = 0; b < kBatch; ++b) in.first.push_back((b * 5) % c.k_len);
  return in;
}

// The definition in fp64 (attention_definition.h), the last `cut` features left out of the
// scores; *scale as there.
torch::Tensor attention_reference(const AttentionInputs& in, int64_t k_len, int64_t cut,
                                  torch::Tensor* scale) {
  auto exact = [](const torch::Tensor& t) { return t.defined() ? f64(t) : t; };
  CachedKeys keys;
  keys.buffer = f64(in.keys.buffer);
  keys.by_distance = exact(in.keys.by_distance);
  keys.u = exact(in.keys.u);
  keys.v = exact(in.keys.v);
  return txl::test::attention_definition(f64(in.qkv), keys, k_len, in.first, cut, scale);
}

TEST(CrossLevel, AttentionOverCachedKeysEqualsTheReference) {
  const std::vector<AttentionCase> cases = {
      {12, 7, true, true},  {41, 20, true, true},  {41, 1, true, true},  {16, 9, false, false},
      {64, 33, true, true}, {128, 2, true, false}, {48, 40, true, true}, {17, 12, false, true}};
  for (const auto& c : cases) {
    SCOPED_TRACE(::testing::Message() << "D " << c.d << ", K " << c.k_len << (c.rel ? ", rel" : "")
                                      << (c.biases ? ", u v" : ""));
    const auto in = attention_inputs(c, c.d * 100 + c.k_len);
    torch::Tensor scale, unused;
    const auto exact = attention_reference(in, c.k_len, 0, &scale);
    // A kernel that stored no tail feature, and one that left the last feature out of its
    // scores (which changes nothing where a row sees one key).
    auto unstored = exact.clone();  // [B, H D]
    unstored.select(1, exact.size(1) - 1).zero_();
    std::vector<torch::Tensor> controls = {unstored};
    if (c.k_len > 1) controls.push_back(attention_reference(in, c.k_len, 1, &unused));
    at_every_level([&](CpuLevel) {
      for (auto kernel : {CachedKernel::kBest, CachedKernel::kPortable}) {
        CachedKeys keys = in.keys;
        keys.buffer = in.keys.buffer.clone();  // the kernel writes the new key and value
        const auto got = attend_cached(in.qkv, keys, c.k_len, in.first, kernel);
        expect_within(got, exact, scale, controls);
      }
    });
  }
}

// The vector exp of vector_math.h, built for each level as the kernels build it.
inline __attribute__((always_inline)) void exp_all(const float* __restrict x, float* __restrict y,
                                                   int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] = exp_nonpositive(x[i]);
}

TXL_VECTOR_LEVELS(void, exp_of, exp_all, (const float* x, float* y, int64_t n), (x, y, n))

TEST(CrossLevel, VectorExpEqualsTheReference) {
  // 10,003 values in [-100, 0] (a tail for every vector width), then the edges.
  auto x = torch::linspace(-100, 0, 10003);  // [n]
  const float inf = std::numeric_limits<float>::infinity();
  x = torch::cat({x, torch::tensor({-87.5f, -87.0f, 0.0f, 1.5f, inf, -inf})});
  // Below -87 (-inf included) exp(-87), the clamp's floor; +inf gives +inf.
  const auto exact = f64(x).exp().clamp_min(std::exp(-87.0));
  auto control = exact.clone();
  control[x.size(0) - 7] *= 1 + 1e-5;  // one value of the tail a little off
  const auto finite = torch::isfinite(exact);
  auto relative = [&](const torch::Tensor& t) {
    return ((f64(t) - exact).abs() / exact).masked_fill(~finite, 0).max().item<double>();
  };
  ASSERT_GT(relative(control), 4e-7);
  at_every_level([&](CpuLevel) {
    auto got = torch::empty_like(x);
    exp_of(x.data_ptr<float>(), got.data_ptr<float>(), x.size(0));
    EXPECT_LT(relative(got), 4e-7);
    EXPECT_EQ(got[-2].item<float>(), inf);  // +inf
  });
}

// Adam's update (and AdamW's), three steps on 10,003 values of std 0.3 (a tail for every vector
// width) with gradients scaled by 30: the same bits at every level (the file is built without
// fused multiply-adds), and within fp32's rounding of the update written in fp64 with LibTorch's
// operations, term by term as torch::optim::Adam writes it. Scales: the same sums over absolute
// terms (a moment is a difference of terms that can cancel). The control leaves the last
// value's update out.
TEST(CrossLevel, AdamUpdateEqualsTheReference) {
  constexpr int64_t kN = 10003;
  for (bool decoupled : {false, true}) {
    SCOPED_TRACE(decoupled ? "adamw" : "adam");
    torch::manual_seed(decoupled ? 8 : 7);
    const auto p0 = torch::randn({kN}) * 0.3;
    std::vector<torch::Tensor> grads;
    for (int step = 0; step < 3; ++step) grads.push_back(torch::randn({kN}) * 30);
    AdamScalars s;
    s.lr = 3e-3;
    s.weight_decay = 0.01;
    s.decoupled = decoupled;
    // The reference in fp64, and its scales: m_abs the first moment over |terms|, p_scale
    // |p| plus the update's size over m_abs.
    auto p = f64(p0), m = torch::zeros_like(p), v = torch::zeros_like(p);
    auto m_abs = torch::zeros_like(p), p_scale = p.abs();
    torch::Tensor last_step;  // [N] the last step's change of p
    for (int step = 1; step <= 3; ++step) {
      auto g = f64(grads[step - 1]);
      const auto before = p.clone();
      auto g_abs = g.abs();
      if (decoupled) {
        p = p * (1 - s.lr * s.weight_decay);
      } else {
        g = g + s.weight_decay * p;
        g_abs = g_abs + s.weight_decay * p.abs();
      }
      m = m * s.beta1 + (1 - s.beta1) * g;
      m_abs = m_abs * s.beta1 + (1 - s.beta1) * g_abs;
      v = v * s.beta2 + (1 - s.beta2) * g * g;
      const double bias1 = 1 - std::pow(s.beta1, step), bias2 = 1 - std::pow(s.beta2, step);
      const auto denom = v.sqrt() / std::sqrt(bias2) + s.eps;
      p = p - (s.lr / bias1) * m / denom;
      p_scale = p_scale + (s.lr / bias1) * m_abs / denom;
      last_step = p - before;
    }
    auto control = p.clone();
    control[kN - 1] -= last_step[kN - 1];  // the tail's last update left out
    torch::Tensor first;
    at_every_level([&](CpuLevel) {
      auto got = p0.clone(), gm = torch::zeros_like(got), gv = torch::zeros_like(got);
      for (int step = 1; step <= 3; ++step) {
        s.step = step;
        adam_update(got, grads[step - 1], gm, gv, s);
      }
      EXPECT_LT(excess(got, p, p_scale), kBound);
      EXPECT_LT(excess(gm, m, m_abs), kBound);
      EXPECT_LT(excess(gv, v, v), kBound);
      EXPECT_GT(excess(control, p, p_scale), 10 * kBound) << "a control passed: the bound is blind";
      if (!first.defined()) {
        first = got;
      } else {
        EXPECT_TRUE(torch::equal(got, first)) << "another level gives other bits";
      }
    });
  }
}

}  // namespace
}  // namespace txl::kernels
