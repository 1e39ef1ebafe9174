// TransformerLM's memory: recurrence, windows, gradients, padding, resets and cached keys.
#include "txl/models/transformer_lm.h"

#include <gtest/gtest.h>

#include "support/family.h"
#include "support/test_support.h"
#include "transformer_lm_test_support.h"

#include <algorithm>

namespace txl::models {
namespace {

using config::AttnType;
using transformer_lm_test::ctx_with;
using transformer_lm_test::kVocab;
using transformer_lm_test::make;
using transformer_lm_test::random_tokens;
using transformer_lm_test::run;
using transformer_lm_test::tiny;
using txl::test::tensor_near;

// Test 2: two segments of Q with mem_len = Q equal one pass over 2Q tokens (eval, double).
TEST(TransformerLM, RecurrenceEqualsOneLongPass) {
  torch::NoGradGuard no_grad;
  for (AttnType attn : txl::test::memory_attn_types()) {
    for (int64_t clamp : {-1, 3}) {
      if (attn == AttnType::kRope && clamp >= 0) continue;  // rope has no distances to clamp
      auto model = make(tiny(attn, 5), 2, torch::kDouble);
      auto tokens = random_tokens(2, 10, 11);
      auto first = run(model, tokens.narrow(1, 0, 5), {}, ctx_with(5, clamp));
      ASSERT_EQ(first.memory.length(), 5);
      auto second = run(model, tokens.narrow(1, 5, 5), first.memory, ctx_with(5, clamp));
      auto whole = run(model, tokens, {}, ctx_with(0, clamp));
      EXPECT_TRUE(tensor_near(second.logits, whole.logits.narrow(1, 5, 5), 1e-10, 1e-10))
          << attn << ", clamp_len " << clamp;
      EXPECT_TRUE(tensor_near(second.nll, whole.nll.narrow(1, 5, 5), 1e-10, 1e-10));
      EXPECT_TRUE(tensor_near(first.logits, whole.logits.narrow(1, 0, 5), 1e-10, 1e-10));
    }
  }
}

// Test 2, mem_len < Q: segment-2 queries see keys >= Q - M in the one-pass equivalent.
TEST(TransformerLM, ShortMemoryEqualsWindowedLongPass) {
  torch::NoGradGuard no_grad;
  const int64_t q = 5, m = 3;
  auto model = make(tiny(AttnType::kXl, m), 3, torch::kDouble);
  auto tokens = random_tokens(2, 2 * q, 12);
  auto first = run(model, tokens.narrow(1, 0, q), {}, ctx_with(m));
  ASSERT_EQ(first.memory.length(), m);
  auto second = run(model, tokens.narrow(1, q, q), first.memory, ctx_with(m));
  auto query = torch::arange(2 * q).unsqueeze(1), key = torch::arange(2 * q).unsqueeze(0);
  auto ctx = ctx_with(0);
  ctx.extra_mask = (query < q).logical_or(key >= q - m);  // [2Q, 2Q]
  auto whole = run(model, tokens, {}, ctx);
  EXPECT_TRUE(tensor_near(second.logits, whole.logits.narrow(1, q, q), 1e-10, 1e-10));
  // Without the window the long pass differs: the test can tell the two apart.
  auto unwindowed = run(model, tokens, {}, ctx_with(0));
  EXPECT_FALSE(tensor_near(second.logits, unwindowed.logits.narrow(1, q, q), 1e-6, 1e-6));
}

// mem_len > Q: memory accumulates over segments up to mem_len.
TEST(TransformerLM, LongMemoryEqualsOneLongPass) {
  torch::NoGradGuard no_grad;
  const int64_t q = 4;
  auto model = make(tiny(AttnType::kXl, 2 * q), 4, torch::kDouble);
  auto tokens = random_tokens(2, 3 * q, 13);
  Memory memory;
  std::vector<torch::Tensor> logits;
  for (int s = 0; s < 3; ++s) {
    auto out = run(model, tokens.narrow(1, s * q, q), memory, ctx_with(2 * q));
    memory = out.memory;
    logits.push_back(out.logits);
    EXPECT_EQ(memory.length(), std::min<int64_t>((s + 1) * q, 2 * q));
  }
  auto whole = run(model, tokens, {}, ctx_with(0));
  EXPECT_TRUE(tensor_near(torch::cat(logits, 1), whole.logits, 1e-10, 1e-10));
}

// same_length over segments equals the one-pass run with the same window.
TEST(TransformerLM, SameLengthSegmentsEqualWindowedLongPass) {
  torch::NoGradGuard no_grad;
  auto model = make(tiny(AttnType::kXl, 5), 5, torch::kDouble);
  auto tokens = random_tokens(2, 10, 14);
  auto first = run(model, tokens.narrow(1, 0, 5), {}, ctx_with(5, -1, true));
  auto second = run(model, tokens.narrow(1, 5, 5), first.memory, ctx_with(5, -1, true));
  auto whole = run(model, tokens, {}, ctx_with(5, -1, true));
  EXPECT_TRUE(
      tensor_near(torch::cat({first.logits, second.logits}, 1), whole.logits, 1e-10, 1e-10));
  auto plain = run(model, tokens.narrow(1, 5, 5), first.memory, ctx_with(5));
  EXPECT_FALSE(tensor_near(second.logits, plain.logits, 1e-6, 1e-6));
}

// Test 6: with same_length every query attends to exactly mem_len keys.
TEST(TransformerLM, SameLengthEveryQuerySeesMemLenKeys) {
  torch::NoGradGuard no_grad;
  const int64_t q = 5, m = 3;
  auto model = make(tiny(AttnType::kXl, m), 6);
  auto inputs = model->segment_inputs(q, m, torch::ones({2, q + m}, torch::kBool),
                                      ctx_with(m, -1, true), torch::kFloat, torch::kCPU);
  auto visible = inputs.blocked.logical_not();  // [1, B, Q, K]
  EXPECT_TRUE(txl::test::tensor_equal(visible.sum(-1), torch::full({1, 2, q}, m)));
  torch::Tensor probs;
  auto layer = model->layer_list()[1];
  layer->attn(torch::randn({2, q, 8}), torch::randn({2, m, 8}), inputs, &probs);
  EXPECT_TRUE(txl::test::tensor_equal((probs > 0).sum(-1), torch::full({2, 2, q}, m)));
  // Without same_length query i sees M + i + 1 keys.
  auto plain = model->segment_inputs(q, m, torch::ones({2, q + m}, torch::kBool), ctx_with(m),
                                     torch::kFloat, torch::kCPU);
  EXPECT_TRUE(txl::test::tensor_equal(plain.blocked.logical_not().sum(-1)[0][0],
                                      torch::arange(m + 1, m + q + 1)));
}

// Test 3: the loss of segment 2 puts no gradient on segment 1, parameters still get gradients.
TEST(TransformerLM, StopGradientThroughMemory) {
  for (AttnType attn : txl::test::memory_attn_types()) {
    SCOPED_TRACE(config::to_string(attn));
    auto c = tiny(attn, 5);
    c.tie_weight = false;  // so embedding rows are reached only through the input
    torch::manual_seed(7);
    TransformerLM model(c, kVocab);
    model->train();
    auto seg1 = torch::randint(0, 5, {2, 5}, torch::kLong);   // ids 0..4 only
    auto seg2 = torch::randint(5, 11, {2, 5}, torch::kLong);  // ids 5..10 only
    auto first = run(model, seg1, {}, ctx_with(5));
    ASSERT_TRUE(first.hidden.requires_grad());
    for (const auto& m : first.memory.layers) {
      EXPECT_FALSE(m.requires_grad());
      EXPECT_FALSE(m.grad_fn());
    }
    auto second = run(model, seg2, first.memory, ctx_with(5));
    auto loss = second.nll.mean();
    auto grads = torch::autograd::grad({loss}, {first.hidden}, {}, /*retain_graph=*/true,
                                       /*create_graph=*/false, /*allow_unused=*/true);
    EXPECT_FALSE(grads[0].defined()) << "segment 1 received a gradient from segment 2's loss";
    model->zero_grad();
    loss.backward();
    int with_grad = 0;
    for (const auto& p : model->named_parameters()) {
      if (p.value().grad().defined() && p.value().grad().abs().sum().item<double>() > 0)
        ++with_grad;
    }
    EXPECT_EQ(with_grad, static_cast<int>(model->parameters().size()));
    // Embedding rows of ids seen only in segment 1 get nothing, though memory was used.
    auto emb_grad = model->word_emb->table(0).grad();  // [V, d]
    EXPECT_EQ(emb_grad.narrow(0, 0, 5).abs().sum().item<double>(), 0.0);
    EXPECT_GT(emb_grad.narrow(0, 5, 6).abs().sum().item<double>(), 0.0);
  }
}

// Lookback::memory_grad (back-propagation through segments): the memory keeps its graph, and the
// second segment's loss reaches the embedding rows of ids seen only in the first segment, which
// the stop-gradient leaves at zero (above).
TEST(TransformerLM, MemoryGradLetsTheLossReachTheEarlierSegment) {
  for (AttnType attn : {AttnType::kXl, AttnType::kRope}) {
    SCOPED_TRACE(config::to_string(attn));
    auto c = tiny(attn, 5);
    c.tie_weight = false;
    torch::manual_seed(7);
    TransformerLM model(c, kVocab);
    model->train();
    auto ctx = ctx_with(5);
    ctx.memory_grad = true;
    auto first = run(model, torch::randint(0, 5, {2, 5}, torch::kLong), {}, ctx);
    for (const auto& m : first.memory.layers) EXPECT_TRUE(m.requires_grad());
    auto second = run(model, torch::randint(5, 11, {2, 5}, torch::kLong), first.memory, ctx);
    model->zero_grad();
    second.nll.mean().backward();
    auto emb_grad = model->word_emb->table(0).grad();  // [V, d]
    EXPECT_GT(emb_grad.narrow(0, 0, 5).abs().sum().item<double>(), 0.0);
    // Without the flag, a memory in the graph is refused.
    TXL_EXPECT_THROW_WITH(
        run(model, torch::randint(5, 11, {2, 5}, torch::kLong), first.memory, ctx_with(5)),
        "memory must be detached");
  }
}

// Test 4: left padding changes nothing for the real tokens of a row (relative positions).
TEST(TransformerLM, PaddedRowEqualsRowAlone) {
  torch::NoGradGuard no_grad;
  for (AttnType attn : txl::test::memory_attn_types()) {
    auto model = make(tiny(attn, 4), 8, torch::kDouble);
    auto real = random_tokens(1, 4, 15);
    auto other = random_tokens(1, 6, 16);
    auto padded = torch::cat({torch::zeros({1, 2}, torch::kLong), real}, 1);  // [1, 6]
    auto batch = torch::cat({padded, other}, 0);                              // [2, 6]
    auto mask = torch::ones({2, 6}, torch::kBool);
    mask[0][0] = false;
    mask[0][1] = false;
    // mem_len 6: the whole segment, padding included, moves into memory.
    auto together = run(model, batch, {}, ctx_with(6), mask);
    auto alone = run(model, real, {}, ctx_with(6));
    auto other_alone = run(model, other, {}, ctx_with(6));
    EXPECT_TRUE(tensor_near(together.logits[0].narrow(0, 2, 4), alone.logits[0], 1e-10, 1e-10))
        << attn;
    EXPECT_TRUE(tensor_near(together.logits[1], other_alone.logits[0], 1e-10, 1e-10)) << attn;
    // The padding moves into memory and must stay invisible to the next segment.
    auto next = random_tokens(2, 4, 17);
    auto after_padded = run(model, next, together.memory, ctx_with(6));
    EXPECT_TRUE(txl::test::tensor_equal(together.memory.key_mask[0],
                                        torch::tensor({false, false, true, true, true, true})));
    auto after_alone = run(model, next.narrow(0, 0, 1), alone.memory, ctx_with(6));
    EXPECT_TRUE(tensor_near(after_padded.logits[0], after_alone.logits[0], 1e-10, 1e-10)) << attn;
  }
}

TEST(TransformerLM, ResetClearsOnlyThatRowsMemory) {
  torch::NoGradGuard no_grad;
  auto model = make(tiny(AttnType::kXl, 5), 10, torch::kDouble);
  auto first = run(model, random_tokens(2, 5, 19), {}, ctx_with(5));
  auto seg2 = random_tokens(2, 5, 20);
  auto reset = torch::tensor({true, false});
  auto out = run(model, seg2, first.memory, ctx_with(5), {}, reset);
  auto fresh = run(model, seg2, {}, ctx_with(5));
  auto kept = run(model, seg2, first.memory, ctx_with(5));
  EXPECT_TRUE(tensor_near(out.logits[0], fresh.logits[0], 1e-10, 1e-10));
  EXPECT_TRUE(tensor_near(out.logits[1], kept.logits[1], 1e-10, 1e-10));
  EXPECT_FALSE(tensor_near(kept.logits[0], fresh.logits[0], 1e-6, 1e-6));
  // The cleared positions stay masked once they move on in memory.
  EXPECT_TRUE(txl::test::tensor_equal(out.memory.key_mask, torch::ones({2, 5}, torch::kBool)));
}

TEST(TransformerLM, ExtLenLeavesTheSegmentEndOutOfMemory) {
  torch::NoGradGuard no_grad;
  auto model = make(tiny(AttnType::kXl, 3), 11);
  auto ctx = ctx_with(3);
  ctx.ext_len = 2;
  auto out = run(model, random_tokens(1, 6, 21), {}, ctx);
  ASSERT_EQ(out.memory.length(), 3);
  auto no_ext = run(model, random_tokens(1, 6, 21), {}, ctx_with(5));
  // Memory ends 2 positions before the segment end: positions 1..3 of the layer inputs.
  for (size_t l = 0; l < 2; ++l) {
    EXPECT_TRUE(
        txl::test::tensor_equal(out.memory.layers[l], no_ext.memory.layers[l].narrow(1, 0, 3)));
  }
}

// Test 10: vanilla variants carry nothing from segment 1 to segment 2.
TEST(TransformerLM, VanillaSegmentsAreIndependent) {
  torch::NoGradGuard no_grad;
  for (AttnType attn : {AttnType::kVanilla, AttnType::kVanillaLearned}) {
    auto model = make(tiny(attn, 0), 12);
    auto seg2 = random_tokens(2, 5, 22);
    auto first = run(model, random_tokens(2, 5, 23), {}, ctx_with(0));
    EXPECT_TRUE(first.memory.empty());
    auto after = run(model, seg2, first.memory, ctx_with(0));
    auto alone = run(model, seg2, {}, ctx_with(0));
    EXPECT_TRUE(txl::test::tensor_equal(after.logits, alone.logits)) << attn;
    // With memory permitted explicitly, the first segment does reach the second.
    auto c = tiny(attn, 5);
    c.allow_abs_with_memory = true;
    auto with_memory = make(c, 12);
    auto m = run(with_memory, random_tokens(2, 5, 23), {}, ctx_with(5)).memory;
    EXPECT_FALSE(tensor_near(run(with_memory, seg2, m, ctx_with(5)).logits,
                             run(with_memory, seg2, {}, ctx_with(5)).logits, 1e-6, 1e-6));
  }
}

// model.mem_init: zeros (Hugging Face's TransfoXL): a stream starts with mem_len zero vectors
// in every layer, visible to the first segment; exactly an explicit memory of zeros.
TEST(TransformerLM, ZeroMemoryStartIsAnExplicitMemoryOfZeros) {
  torch::NoGradGuard no_grad;
  auto model = make(tiny(AttnType::kXl, 3), 31, torch::kDouble);
  auto tokens = random_tokens(2, 5, 32);
  auto zeros_ctx = ctx_with(3);
  zeros_ctx.zero_memory = true;
  Memory zeros;
  for (int l = 0; l < 2; ++l) zeros.layers.push_back(torch::zeros({2, 3, 8}, torch::kDouble));
  zeros.key_mask = torch::ones({2, 3}, torch::kBool);
  auto started = run(model, tokens, {}, zeros_ctx);
  auto explicit_zeros = run(model, tokens, zeros, ctx_with(3));
  auto empty = run(model, tokens, {}, ctx_with(3));
  EXPECT_TRUE(tensor_near(started.logits, explicit_zeros.logits, 1e-12, 1e-12));
  EXPECT_FALSE(tensor_near(started.logits, empty.logits, 1e-3, 1e-3));
  EXPECT_EQ(started.memory.length(), 3);
  // The next segment goes on from that memory; a reset row starts from zeros again.
  auto next = random_tokens(2, 5, 33);
  auto reset = torch::tensor({true, false});
  auto out = run(model, next, started.memory, zeros_ctx, {}, reset);
  auto fresh = run(model, next, {}, zeros_ctx);
  auto kept = run(model, next, started.memory, ctx_with(3));
  EXPECT_TRUE(tensor_near(out.logits[0], fresh.logits[0], 1e-12, 1e-12));
  EXPECT_TRUE(tensor_near(out.logits[1], kept.logits[1], 1e-12, 1e-12));
  EXPECT_FALSE(tensor_near(kept.logits[0], fresh.logits[0], 1e-3, 1e-3));
  // From the model's config too.
  auto c = tiny(AttnType::kXl, 3);
  c.mem_init = config::MemInit::kZeros;
  EXPECT_TRUE(Lookback::from_config(c).zero_memory);
  EXPECT_FALSE(Lookback::from_config(tiny(AttnType::kXl, 3)).zero_memory);
}

// Evaluation with the memory's keys and values carried between segments (Lookback::cache_kv)
// gives the numbers of projecting them anew, segment after segment, for every scheme that can
// cache, post- and pre-norm, with ext_len, a reset row and padding; and the cache is really
// used: changing it changes the output.
TEST(TransformerLM, CachedKeysAndValuesGiveTheSameNumbers) {
  torch::NoGradGuard no_grad;
  struct Case {
    AttnType attn;
    bool pre_norm;
    int64_t ext_len;
  };
  for (const Case& k : {Case{AttnType::kXl, false, 0}, Case{AttnType::kXl, true, 0},
                        Case{AttnType::kXl, false, 2}, Case{AttnType::kShaw, false, 0},
                        Case{AttnType::kVanilla, false, 0}, Case{AttnType::kRope, false, 0},
                        Case{AttnType::kRope, true, 2}, Case{AttnType::kAlibi, false, 0}}) {
    SCOPED_TRACE(config::to_string(k.attn) + (k.pre_norm ? " pre_norm" : "") + " ext_len " +
                 std::to_string(k.ext_len));
    auto c = tiny(k.attn, 7);
    c.pre_norm = k.pre_norm;
    c.allow_abs_with_memory = k.attn == AttnType::kVanilla;
    auto model = make(c, 31, torch::kDouble);
    ASSERT_TRUE(model->can_cache_kv());
    Lookback plain = ctx_with(7);
    plain.ext_len = k.ext_len;
    Lookback cached = plain;
    cached.cache_kv = true;
    Memory m_plain, m_cached;
    auto reset = torch::tensor({false, true});  // row 1 starts a new stream at segment 2
    auto mask = torch::ones({2, 5}, torch::kBool);
    mask[0][4] = false;  // padding in row 0 of segment 1, which the later segments remember
    for (int segment = 0; segment < 5; ++segment) {
      auto tokens = random_tokens(2, 5, 40 + segment);
      const auto r = segment == 2 ? reset : torch::Tensor();
      const auto im = segment == 1 ? mask : torch::Tensor();
      if (segment == 3) m_cached.kv.clear();  // a memory without its keys: projected, then cached
      auto a = run(model, tokens, m_plain, plain, im, r);
      auto b = run(model, tokens, m_cached, cached, im, r);
      EXPECT_TRUE(tensor_near(b.nll, a.nll, 1e-12, 1e-12)) << "segment " << segment;
      EXPECT_TRUE(a.memory.kv.empty());
      ASSERT_EQ(b.memory.kv.size(), 2u);
      EXPECT_EQ(b.memory.kv[0].sizes(), (std::vector<int64_t>{2, 2, 2, b.memory.length(), 4}));
      m_plain = a.memory;
      m_cached = b.memory;
    }
    // Used, not recomputed: other cached values give other outputs.
    auto tokens = random_tokens(2, 5, 50);
    Memory changed = m_cached;
    for (auto& kv : changed.kv) kv = kv + 0.5;
    EXPECT_FALSE(tensor_near(run(model, tokens, changed, cached).nll,
                             run(model, tokens, m_cached, cached).nll, 1e-6, 1e-6));
    // A cache of the wrong length or dtype is a clear error.
    Memory shorter = m_cached;
    for (auto& kv : shorter.kv) kv = kv.narrow(3, 1, kv.size(3) - 1);
    TXL_EXPECT_THROW_WITH(run(model, tokens, shorter, cached), "cached keys and values must be");
    Memory other_dtype = m_cached;
    for (auto& kv : other_dtype.kv) kv = kv.to(torch::kFloat);
    TXL_EXPECT_THROW_WITH(run(model, tokens, other_dtype, cached),
                          "cached keys and values are Float");
  }
}

TEST(TransformerLM, CachedKeysAndValuesAreForEvaluationOnly) {
  auto model = make(tiny(AttnType::kXl, 4), 32);
  Lookback ctx = ctx_with(4);
  ctx.cache_kv = true;
  auto tokens = random_tokens(2, 5, 51);
  TXL_EXPECT_THROW_WITH(run(model, tokens, {}, ctx),
                        "cache_kv is for evaluation without gradients");
  auto c = tiny(AttnType::kVanillaLearned, 0);
  auto learned = make(c, 33);
  EXPECT_FALSE(learned->can_cache_kv());
  torch::NoGradGuard no_grad;
  EXPECT_NO_THROW(run(learned, tokens, {}, ctx_with(0)));  // without the cache it runs
  Lookback bad = ctx_with(0);
  bad.cache_kv = true;
  TXL_EXPECT_THROW_WITH(run(learned, tokens, {}, bad), "cache_kv with attn_type vanilla_learned");
}

}  // namespace
}  // namespace txl::models
