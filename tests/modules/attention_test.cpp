#include "txl/modules/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <iostream>

#include "support/test_support.h"
#include "txl/ops/masks.h"
#include "txl/ops/rotary.h"
#include "txl/ops/sinusoid.h"
#include "txl/util/fs.h"
#include "txl/util/process.h"
#include "txl/util/safetensors.h"

namespace txl::modules {
namespace {

using txl::test::tensor_near;

struct Setup {
  AttentionOptions options;
  MultiHeadAttention attn{nullptr};
  torch::Tensor u, v;
  // The scheme's model part (t5's bias table) on a module of its own, in double.
  std::shared_ptr<torch::nn::Module> model = std::make_shared<torch::nn::Module>();
  std::shared_ptr<ModelPositions> model_part;
};

Setup make(const std::string& scheme, int64_t d = 6, int64_t heads = 2, int64_t d_head = 3) {
  Setup s;
  s.options.d_model = d;
  s.options.n_head = heads;
  s.options.d_head = d_head;
  s.options.positions.scheme = scheme;
  s.options.positions.settings = {{"max_rel_dist", 3},
                                  {"t5_buckets", 8},         // distances 0-3 exact, 4-19 in 4
                                  {"t5_max_distance", 20}};  // wider buckets (none on an edge)
  s.options.init.std = 0.5;  // large weights: sharp, position-sensitive attention
  s.attn = MultiHeadAttention(s.options);
  s.attn->to(torch::kDouble);
  if (scheme == "t5") {
    s.model_part = position_scheme(scheme).for_model(*s.model, s.options.position_shape());
    s.model->to(torch::kDouble);
  }
  s.u = torch::randn({heads, d_head}, torch::kDouble);
  s.v = torch::randn({heads, d_head}, torch::kDouble);
  return s;
}

AttentionInputs inputs_for(const Setup& s, int64_t q_len, int64_t m_len, int64_t clamp_len,
                           const torch::Tensor& key_mask = {}, int64_t window = 0) {
  const int64_t k_len = q_len + m_len;
  AttentionInputs in;
  in.blocked = ops::attention_mask(q_len, m_len, window, key_mask, {}).logical_not().unsqueeze(0);
  auto dist = ops::relative_distances(k_len, clamp_len);
  if (s.options.positions.scheme == "xl") {
    in.positions.table = ops::sinusoid_encoding(dist.to(torch::kDouble), s.options.d_model);
    in.positions.u = s.u;
    in.positions.v = s.v;
  } else if (s.options.positions.scheme == "shaw") {
    in.positions.table = dist.clamp_max(s.options.positions.setting("max_rel_dist", 64));
  } else {
    in.positions = position_scheme(s.options.positions.scheme)
                       .inputs(s.options.position_shape(), q_len, k_len, clamp_len, torch::kDouble,
                               torch::kCPU);
    if (s.model_part) s.model_part->complete(in.positions, nullptr);
  }
  return in;
}

// T5's bucket of a distance n >= 0 (Raffel et al. 2020), in double: n below half the buckets,
// then log(n / half) / log(max_distance / half) of the other half, capped at the last.
int64_t t5_bucket(int64_t n, int64_t buckets, int64_t max_distance) {
  const int64_t half = buckets / 2;
  if (n < half) return n;
  const double wider = std::log(double(n) / half) / std::log(double(max_distance) / half);
  return std::min<int64_t>(buckets - 1, half + static_cast<int64_t>(wider * (buckets - half)));
}

// A parameter of the attention by name (the position scheme's are registered on it).
torch::Tensor parameter(const Setup& s, const std::string& name) {
  const auto* p = s.attn->named_parameters().find(name);
  EXPECT_NE(p, nullptr) << name;
  return p != nullptr ? *p : torch::Tensor();
}

// Rotary positions (Su et al. 2021, eq. 34) written out: each pair (2k, 2k+1) of a head's
// dimensions turned by the angle p 10000^(-2k/D).
torch::Tensor turned(const torch::Tensor& x, int64_t position) {
  const int64_t D = x.size(0);
  auto out = torch::empty_like(x);
  for (int64_t k = 0; k < D / 2; ++k) {
    const double angle = position * std::pow(10000.0, -2.0 * k / D);
    const double a = x[2 * k].item<double>(), b = x[2 * k + 1].item<double>();
    out[2 * k] = a * std::cos(angle) - b * std::sin(angle);
    out[2 * k + 1] = b * std::cos(angle) + a * std::sin(angle);
  }
  return out;
}

// ALiBi's slopes as the paper lists them: 2^-8/H, 2^-16/H, ... for 2 heads; for 3 heads those
// of 2 followed by the first of 4's (2^-2).
double alibi_slope(int64_t head, int64_t heads) {
  if (heads == 2) return std::pow(2.0, head == 0 ? -4.0 : -8.0);
  EXPECT_EQ(heads, 3);
  const double slopes[] = {std::pow(2.0, -4.0), std::pow(2.0, -8.0), std::pow(2.0, -2.0)};
  return slopes[head];
}

// The attention of paper 3.3 written pair by pair, with no shift trick and no batching.
torch::Tensor naive_attention(Setup& s, const torch::Tensor& x, const torch::Tensor& mem,
                              int64_t clamp_len, const torch::Tensor& key_mask) {
  const int64_t B = x.size(0), Q = x.size(1), M = mem.defined() ? mem.size(1) : 0, K = M + Q;
  const int64_t H = s.options.n_head, D = s.options.d_head, d = s.options.d_model;
  auto h = M > 0 ? torch::cat({mem, x}, 1) : x;
  auto w = s.attn->qkv->weight;  // [3 H D, d]
  auto q_all = torch::matmul(h, w.narrow(0, 0, H * D).t()).view({B, K, H, D});
  auto k_all = torch::matmul(h, w.narrow(0, H * D, H * D).t()).view({B, K, H, D});
  auto v_all = torch::matmul(h, w.narrow(0, 2 * H * D, H * D).t()).view({B, K, H, D});
  auto out = torch::zeros({B, Q, H, D}, torch::kDouble);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t head = 0; head < H; ++head) {
      for (int64_t i = 0; i < Q; ++i) {
        auto qi = q_all[b][M + i][head];
        std::vector<torch::Tensor> scores;
        for (int64_t j = 0; j < K; ++j) {
          int64_t dist = M + i - j;
          bool visible = dist >= 0 && (!key_mask.defined() || key_mask[b][j].item<bool>());
          if (!visible) {
            scores.push_back(torch::tensor(-1e300, torch::kDouble));
            continue;
          }
          if (clamp_len >= 0) dist = std::min(dist, clamp_len);
          auto kj = k_all[b][j][head];
          if (s.options.positions.scheme == "rope") {  // query at M + i, key at j
            scores.push_back(turned(qi, M + i).dot(turned(kj, j)) / std::sqrt(double(D)));
            continue;
          }
          torch::Tensor score;
          if (s.options.positions.scheme == "xl") {
            auto r = ops::sinusoid_encoding(torch::tensor({double(dist)}, torch::kDouble), d)[0];
            auto wr = torch::matmul(parameter(s, "r_net.weight"), r).view({H, D})[head];
            score = (qi + s.u[head]).dot(kj) + (qi + s.v[head]).dot(wr);
          } else if (s.options.positions.scheme == "shaw") {
            auto a = parameter(s, "rel_key.weight")[std::min<int64_t>(
                dist, s.options.positions.setting("max_rel_dist", 64))][head];
            score = qi.dot(kj) + qi.dot(a);
          } else {
            score = qi.dot(kj);
          }
          score = score / std::sqrt(double(D));
          if (s.options.positions.scheme == "alibi") score = score - alibi_slope(head, H) * dist;
          if (s.options.positions.scheme == "t5") {
            const auto& o = s.options.positions;
            const auto table = *s.model->named_parameters().find("rel_bias");  // [buckets, H]
            score = score + table[t5_bucket(dist, o.setting("t5_buckets", 32),
                                            o.setting("t5_max_distance", 128))][head];
          }
          scores.push_back(score);
        }
        auto p = torch::softmax(torch::stack(scores), 0);  // [K]
        out[b][i][head] = (p.unsqueeze(1) * v_all[b].select(1, head)).sum(0);
      }
    }
  }
  return torch::matmul(out.view({B, Q, H * D}), s.attn->out->weight.t());
}

void check_against_naive(const std::string& scheme, int64_t q_len, int64_t m_len, int64_t clamp_len,
                         bool padded, int64_t heads = 2, int64_t d_head = 3) {
  torch::manual_seed(17 + q_len + 3 * m_len);
  auto s = make(scheme, 6, heads, d_head);
  auto x = torch::randn({2, q_len, 6}, torch::kDouble);
  torch::Tensor mem;
  if (m_len > 0) mem = torch::randn({2, m_len, 6}, torch::kDouble);
  torch::Tensor key_mask;
  if (padded) {
    key_mask = torch::ones({2, m_len + q_len}, torch::kBool);
    key_mask[1][0] = false;  // a padded key in memory (or the first token)
    key_mask[0][m_len + q_len - 1] = false;
  }
  torch::NoGradGuard no_grad;
  auto got = s.attn(x, mem, inputs_for(s, q_len, m_len, clamp_len, key_mask));
  auto expected = naive_attention(s, x, mem, clamp_len, key_mask);
  // Query rows with no visible key are not defined by the naive version; compare the rest.
  EXPECT_TRUE(tensor_near(got, expected, 1e-10, 1e-10))
      << "Q = " << q_len << ", M = " << m_len << ", clamp_len = " << clamp_len;
}

TEST(Attention, RelativeEqualsPairByPairFormula) {
  check_against_naive("xl", 4, 0, -1, false);
  check_against_naive("xl", 4, 2, -1, false);
  check_against_naive("xl", 3, 5, -1, true);
  check_against_naive("xl", 4, 3, 2, true);
}

TEST(Attention, ShawEqualsPairByPairFormula) {
  check_against_naive("shaw", 4, 0, -1, false);
  check_against_naive("shaw", 3, 6, -1, true);  // distances beyond max_rel_dist
}

TEST(Attention, AbsoluteEqualsPairByPairFormula) {
  check_against_naive("vanilla", 4, 0, -1, false);
  check_against_naive("vanilla", 3, 2, -1, true);
}

TEST(Attention, RotaryEqualsPairByPairFormula) {
  check_against_naive("rope", 4, 0, -1, false, 2, 4);
  check_against_naive("rope", 3, 5, -1, true, 3, 2);
  check_against_naive("rope", 4, 2, -1, false, 1, 6);
}

TEST(Attention, AlibiEqualsPairByPairFormula) {
  check_against_naive("alibi", 4, 0, -1, false);
  check_against_naive("alibi", 3, 5, -1, true, 3, 2);
  check_against_naive("alibi", 4, 3, 2, true);  // distances clamped at 2
}

TEST(Attention, T5EqualsPairByPairFormula) {
  check_against_naive("t5", 4, 0, -1, false);
  check_against_naive("t5", 3, 7, -1, true, 3, 2);  // distances up to 9: the wider buckets
  check_against_naive("t5", 4, 3, 2, true);         // distances clamped at 2
}

// A control that the pair-by-pair checks can fail: queries turned to their position in the
// segment (i) instead of their place after the memory (M + i) give other outputs.
TEST(Attention, RotaryQueriesSitAfterTheMemory) {
  torch::manual_seed(3);
  auto s = make("rope", 6, 2, 4);
  const int64_t q_len = 3, m_len = 4;
  auto x = torch::randn({1, q_len, 6}, torch::kDouble);
  auto mem = torch::randn({1, m_len, 6}, torch::kDouble);
  torch::NoGradGuard no_grad;
  auto in = inputs_for(s, q_len, m_len, -1);
  const auto right = s.attn(x, mem, in);
  // Shifting every position by the same amount changes nothing (only distances count) ...
  in.positions.table = ops::rotary_table(q_len + m_len + 5, 4, torch::kDouble, torch::kCPU)
                           .narrow(1, 5, q_len + m_len);
  EXPECT_TRUE(tensor_near(s.attn(x, mem, in), right, 1e-10, 1e-10));
  // ... while the distances of a segment read without its memory's offset do.
  auto wrong = torch::cat(
      {in.positions.table.narrow(1, 0, m_len), in.positions.table.narrow(1, 0, q_len)}, 1);
  in.positions.table = wrong;
  EXPECT_FALSE(tensor_near(s.attn(x, mem, in), right, 1e-4, 1e-4));
}

// Rotary and ALiBi attention against the PyPI packages that define them (rotary-embedding-torch,
// x-transformers), on the same weights and inputs with memory and padding
// (tests/modules/position_reference.py, in the LibTorch 2.x environment where
// tools/requirements-torch2.txt installs them; skipped where they are missing).
TEST(Attention, RotaryAndAlibiEqualPyPIsReferences) {
  const std::string python = txl::test::python();
  const std::vector<std::string> probe = {python, "-c",
                                          "import rotary_embedding_torch, x_transformers"};
  if (!txl::process::run_program(probe).ok())
    GTEST_SKIP() << "no rotary-embedding-torch and x-transformers in " << python
                 << " (TXL_TORCH=pip tools/setup.sh installs them)";
  torch::NoGradGuard no_grad;
  txl::safetensors::NamedTensors dump;
  struct Case {
    std::string name;
    std::string scheme;
    int64_t heads, d_head, q_len, m_len;
  };
  for (const Case& c : {Case{"rotary_a", "rope", 2, 4, 5, 3}, Case{"rotary_b", "rope", 3, 6, 4, 9},
                        Case{"alibi_a", "alibi", 4, 3, 5, 3}, Case{"alibi_b", "alibi", 3, 4, 4, 9},
                        Case{"t5_a", "t5", 2, 4, 5, 3}, Case{"t5_b", "t5", 3, 4, 4, 30}}) {
    torch::manual_seed(41 + c.m_len);
    auto s = make(c.scheme, 6, c.heads, c.d_head);
    auto x = torch::randn({2, c.q_len, 6}, torch::kDouble);
    auto mem = torch::randn({2, c.m_len, 6}, torch::kDouble);
    auto keep = torch::ones({2, c.m_len + c.q_len}, torch::kBool);
    keep[1][0] = false;  // padding in the second row's memory
    const std::string p = c.name + ".";
    dump.emplace_back(p + "qkv", s.attn->qkv->weight);
    dump.emplace_back(p + "out", s.attn->out->weight);
    dump.emplace_back(p + "x", x);
    dump.emplace_back(p + "mem", mem);
    dump.emplace_back(p + "keep", keep);
    dump.emplace_back(p + "n_head", torch::tensor(c.heads));
    dump.emplace_back(p + "d_head", torch::tensor(c.d_head));
    if (c.scheme == "t5") {
      dump.emplace_back(p + "rel_bias", *s.model->named_parameters().find("rel_bias"));
      dump.emplace_back(p + "max_distance",
                        torch::tensor(s.options.positions.setting("t5_max_distance", 128)));
    }
    dump.emplace_back(p + "y", s.attn(x, mem, inputs_for(s, c.q_len, c.m_len, -1, keep)));
  }
  txl::test::TempDir dir;
  txl::fs::write_atomic(dir / "dump.safetensors", txl::safetensors::serialize(dump));
  const auto script = txl::test::source_dir() / "tests" / "modules" / "position_reference.py";
  const auto r =
      txl::process::run_program({python, script.string(), (dir / "dump.safetensors").string()});
  EXPECT_TRUE(r.ok()) << r.status() << "\n" << r.out << r.stderr_tail;
  std::cout << r.out;
}

// Test 8: finite differences in double precision through the fused projection, the u / v
// biases, the relative shift and the masks.
TEST(Attention, GradientMatchesFiniteDifferences) {
  for (const std::string scheme : {"xl", "shaw", "rope", "alibi", "t5"}) {
    torch::manual_seed(5);
    auto s = make(scheme, 4, 2, 2);
    auto x = torch::randn({2, 3, 4}, torch::dtype(torch::kDouble).requires_grad(true));
    auto mem = torch::randn({2, 2, 4}, torch::kDouble);
    auto key_mask = torch::ones({2, 5}, torch::kBool);
    key_mask[0][1] = false;
    auto in = inputs_for(s, 3, 2, -1, key_mask);
    in.positions.u = s.u.clone().requires_grad_(true);
    in.positions.v = s.v.clone().requires_grad_(true);
    auto weights = torch::randn({2, 3, 4}, torch::kDouble);
    // t5's bias is made from the model's table each time, as each segment makes it.
    auto loss_fn = [&] {
      return (s.attn(x, mem, scheme == "t5" ? inputs_for(s, 3, 2, -1, key_mask) : in) * weights)
          .sum();
    };

    std::vector<torch::Tensor> checked{x};
    for (auto& p : s.attn->parameters()) checked.push_back(p);
    if (scheme == "xl") {
      checked.push_back(in.positions.u);
      checked.push_back(in.positions.v);
    }
    for (auto& p : s.model->parameters()) checked.push_back(p);  // t5's table
    for (auto& t : checked) {
      if (t.grad().defined()) t.grad().zero_();
    }
    loss_fn().backward();
    const double eps = 1e-6;
    for (auto& t : checked) {
      auto analytic = t.grad().clone();
      auto numeric = torch::zeros_like(t);
      torch::NoGradGuard no_grad;
      auto flat = t.view(-1);
      auto num_flat = numeric.view(-1);
      for (int64_t e = 0; e < flat.numel(); ++e) {
        const double orig = flat[e].item<double>();
        flat[e] = orig + eps;
        const double plus = loss_fn().item<double>();
        flat[e] = orig - eps;
        const double minus = loss_fn().item<double>();
        flat[e] = orig;
        num_flat[e] = (plus - minus) / (2 * eps);
      }
      EXPECT_TRUE(tensor_near(analytic, numeric, 1e-7, 1e-5)) << "tensor of shape " << t.sizes();
      EXPECT_GT(analytic.abs().sum().item<double>(), 0.0);
    }
  }
}

TEST(Attention, QueryWithNoVisibleKeyGivesNoNaN) {
  auto s = make("xl");
  auto key_mask = torch::zeros({2, 3}, torch::kBool);  // everything is padding
  torch::Tensor probs;
  auto y = s.attn(torch::randn({2, 3, 6}, torch::kDouble), torch::Tensor(),
                  inputs_for(s, 3, 0, -1, key_mask), &probs);
  EXPECT_TRUE(torch::isfinite(y).all().item<bool>());
  EXPECT_TRUE(torch::isfinite(probs).all().item<bool>());
}

// Test 6 at the attention level: with a window of W keys (same_length), every query with
// enough history puts non-zero weight on exactly W keys, all within the window.
TEST(Attention, WindowGivesEveryQueryTheSameNumberOfKeys) {
  auto s = make("xl");
  const int64_t q_len = 5, m_len = 3;
  torch::manual_seed(5);
  torch::Tensor probs;
  s.attn(torch::randn({2, q_len, 6}, torch::kDouble), torch::randn({2, m_len, 6}, torch::kDouble),
         inputs_for(s, q_len, m_len, -1, {}, /*window=*/m_len), &probs);
  ASSERT_EQ(probs.sizes(), (std::vector<int64_t>{2, 2, q_len, q_len + m_len}));
  auto used = (probs > 0).sum(-1);  // [B, H, Q]
  EXPECT_TRUE(txl::test::tensor_equal(used, torch::full({2, 2, q_len}, m_len)));
  for (int64_t i = 0; i < q_len; ++i) {
    auto row = probs.select(2, i);  // [B, H, K]
    EXPECT_EQ(row.narrow(-1, i + 1, m_len).sum(-1).min().item<double>() > 0.999999, true);
  }
}

TEST(Attention, RejectsMismatchedMemory) {
  auto s = make("xl");
  auto x = torch::randn({2, 3, 6}, torch::kDouble);
  TXL_EXPECT_THROW_WITH(s.attn(x, torch::randn({3, 2, 6}, torch::kDouble), inputs_for(s, 3, 2, -1)),
                        "memory must be [B = 2, M, d = 6]");
  TXL_EXPECT_THROW_WITH(s.attn(torch::randn({2, 3, 5}), torch::Tensor(), inputs_for(s, 3, 0, -1)),
                        "input must be [B, Q, d = 6]");
  AttentionOptions bad;
  bad.n_head = 0;
  TXL_EXPECT_THROW_WITH(MultiHeadAttention{bad}, "must be > 0");
}

}  // namespace
}  // namespace txl::modules
