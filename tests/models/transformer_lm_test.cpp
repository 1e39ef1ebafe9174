#include "txl/models/transformer_lm.h"

#include <gtest/gtest.h>

#include "support/family.h"
#include "support/test_support.h"
#include "support/tiny_model.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace txl::models {
namespace {

using config::AttnType;
using txl::test::tensor_near;

constexpr int64_t kVocab = 11;

config::ModelConfig tiny(AttnType attn_type, int mem_len) {
  return txl::test::tiny_model_config(attn_type, /*tgt_len=*/5, mem_len);
}

TransformerLM make(const config::ModelConfig& c, uint64_t seed = 1,
                   torch::ScalarType dtype = torch::kFloat) {
  torch::manual_seed(seed);
  TransformerLM model(c, kVocab);
  model->to(dtype);
  model->eval();
  return model;
}

Context ctx_with(int64_t mem_len, int64_t clamp_len = -1, bool same_length = false) {
  Context ctx;
  ctx.mem_len = mem_len;
  ctx.clamp_len = clamp_len;
  ctx.same_length = same_length;
  return ctx;
}

LMOutput run(TransformerLM& model, const torch::Tensor& tokens, const Memory& memory,
             const Context& ctx, const torch::Tensor& input_mask = {},
             const torch::Tensor& reset = {}) {
  auto targets = (tokens * 3 + 1).remainder(kVocab);  // any fixed function of the input
  txl::models::Inputs inputs;
  inputs.tokens = tokens;          // int64 [B, T]
  inputs.targets = targets;        // int64 [B, T]
  inputs.input_mask = input_mask;  // bool [B, T] or undefined
  inputs.reset = reset;            // bool [B] or undefined
  return model->forward(inputs, memory, ctx, /*want_logits=*/true);
}

torch::Tensor random_tokens(int64_t batch, int64_t len, uint64_t seed) {
  torch::manual_seed(seed);
  return torch::randint(kVocab, {batch, len}, torch::kLong);
}

struct Variant {
  std::string name;
  AttnType attn_type;
  int mem_len;
};
const std::vector<Variant> kVariants = {{"xl", AttnType::kXl, 4},
                                        {"rel_no_memory", AttnType::kXl, 0},
                                        {"shaw", AttnType::kShaw, 4},
                                        {"vanilla", AttnType::kVanilla, 0},
                                        {"vanilla_learned", AttnType::kVanillaLearned, 0},
                                        {"rope", AttnType::kRope, 4},
                                        {"alibi", AttnType::kAlibi, 4}};

// Test 1: changing token t never changes an output before t, and does change the output at t.
TEST(TransformerLM, CausalForEveryVariant) {
  torch::NoGradGuard no_grad;
  for (const auto& v : kVariants) {
    auto model = make(tiny(v.attn_type, v.mem_len));
    auto ctx = ctx_with(v.mem_len);
    Memory memory;
    if (v.mem_len > 0) memory = run(model, random_tokens(2, 5, 9), {}, ctx).memory;
    auto tokens = random_tokens(2, 6, 10);
    auto base = run(model, tokens, memory, ctx);
    for (int64_t t = 0; t < 6; ++t) {
      auto changed = tokens.clone();
      changed.select(1, t).add_(1).remainder_(kVocab);
      auto out = run(model, changed, memory, ctx);
      if (t > 0) {
        EXPECT_TRUE(
            txl::test::tensor_equal(out.logits.narrow(1, 0, t), base.logits.narrow(1, 0, t)))
            << v.name << ", token " << t;
        EXPECT_TRUE(txl::test::tensor_equal(out.nll.narrow(1, 0, t), base.nll.narrow(1, 0, t)))
            << v.name << ", token " << t;
      }
      EXPECT_GT((out.logits.select(1, t) - base.logits.select(1, t)).abs().max().item<double>(),
                1e-4)
          << v.name << ": the output at the changed token must change";
    }
  }
}

// Every attention type with relative positions carries memory and is on the contract tests' list
// (support/family.h), so none escapes them.
TEST(TransformerLM, EveryMemorySchemeIsOnTheContractList) {
  const auto& listed = txl::test::memory_attn_types();
  for (const auto& [type, name] : config::EnumNames<AttnType>::kNames) {
    const bool on_list = std::find(listed.begin(), listed.end(), type) != listed.end();
    EXPECT_EQ(on_list, config::uses_relative_positions(type)) << name;
  }
}

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

// The whole model against an independent re-computation in the paper code's layout
// (tests/models/paper_reference.py, run with the system Python's torch when there is one).
TEST(TransformerLM, PaperCrossCheck) {
  const std::string python = "/usr/bin/python3";
  if (!std::filesystem::exists(python) ||
      std::system((python + " -c 'import torch' > /dev/null 2>&1").c_str()) != 0) {
    GTEST_SKIP() << "no Python with torch at " << python;
  }
  torch::NoGradGuard no_grad;
  auto c = tiny(AttnType::kXl, 4);
  c.n_layer = 3;
  auto model = make(c, 30, torch::kDouble);
  auto tokens = random_tokens(2, 8, 31);
  auto first = run(model, tokens.narrow(1, 0, 4), {}, ctx_with(4));
  auto second = run(model, tokens.narrow(1, 4, 4), first.memory, ctx_with(4));
  c10::Dict<std::string, torch::Tensor> dump;
  for (const auto& p : model->named_parameters()) dump.insert(p.key(), p.value());
  dump.insert("tokens", tokens);
  dump.insert("logits0", first.logits);
  dump.insert("logits1", second.logits);
  dump.insert("segment", torch::tensor(4));
  dump.insert("n_layer", torch::tensor(c.n_layer));
  dump.insert("n_head", torch::tensor(c.n_head));
  dump.insert("d_head", torch::tensor(c.d_head));
  dump.insert("mem_len", torch::tensor(c.mem_len));
  txl::test::TempDir dir;
  auto bytes = torch::pickle_save(dump);
  std::ofstream((dir / "dump.pt").string(), std::ios::binary).write(bytes.data(), bytes.size());
  auto script = txl::test::source_dir() / "tests" / "models" / "paper_reference.py";
  const int rc =
      std::system((python + " " + script.string() + " " + (dir / "dump.pt").string()).c_str());
  EXPECT_EQ(rc, 0) << "txl and the paper-layout reference disagree (see the printed differences)";
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

// Context::memory_grad (back-propagation through segments): the memory keeps its graph, and the
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

TEST(TransformerLM, FullyPaddedRowGivesNoNaN) {
  torch::NoGradGuard no_grad;
  for (const auto& v : kVariants) {
    auto model = make(tiny(v.attn_type, v.mem_len), 9);
    auto mask = torch::ones({2, 5}, torch::kBool);
    mask[1].fill_(false);
    auto out = run(model, random_tokens(2, 5, 18), {}, ctx_with(v.mem_len), mask);
    EXPECT_TRUE(torch::isfinite(out.logits).all().item<bool>()) << v.name;
    EXPECT_TRUE(torch::isfinite(out.nll).all().item<bool>()) << v.name;
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

TEST(TransformerLM, LogProbsSumToOneAndMatchNll) {
  torch::NoGradGuard no_grad;
  auto model = make(tiny(AttnType::kXl, 4), 13);
  auto tokens = random_tokens(2, 5, 24);
  auto out = run(model, tokens, {}, ctx_with(4));
  EXPECT_TRUE(tensor_near(out.logits.exp().sum(-1), torch::ones({2, 5}), 1e-5, 1e-5));
  auto targets = (tokens * 3 + 1).remainder(kVocab);
  EXPECT_TRUE(tensor_near(out.nll, -out.logits.gather(2, targets.unsqueeze(2)).squeeze(2)));
}

// Test 9: save -> load -> identical logits.
TEST(TransformerLM, SaveLoadGivesIdenticalLogits) {
  torch::NoGradGuard no_grad;
  txl::test::TempDir dir;
  auto c = tiny(AttnType::kXl, 4);
  c.cutoffs = {4, 8};
  c.div_val = 2;
  auto model = make(c, 14);
  torch::save(model, (dir / "model.pt").string());
  auto other = make(c, 99);
  auto tokens = random_tokens(2, 5, 25);
  ASSERT_FALSE(tensor_near(run(other, tokens, {}, ctx_with(4)).logits,
                           run(model, tokens, {}, ctx_with(4)).logits, 1e-6, 1e-6));
  torch::load(other, (dir / "model.pt").string());
  EXPECT_TRUE(txl::test::tensor_equal(run(other, tokens, {}, ctx_with(4)).logits,
                                      run(model, tokens, {}, ctx_with(4)).logits));
}

// The checkpoint keys of a 2-layer xl model are part of the file format: pin them.
TEST(TransformerLM, ParameterNamesArePinned) {
  auto model = make(tiny(AttnType::kXl, 4), 15);
  std::vector<std::string> names;
  for (const auto& p : model->named_parameters()) names.push_back(p.key());
  std::vector<std::string> expected = {"u_bias", "v_bias", "word_emb.emb_layers.0.weight"};
  for (std::string l : {"0", "1"}) {
    for (std::string n : {"attn.qkv.weight", "attn.out.weight", "attn.r_net.weight",
                          "ff.fc1.weight", "ff.fc1.bias", "ff.fc2.weight", "ff.fc2.bias",
                          "attn_norm.weight", "attn_norm.bias", "ff_norm.weight", "ff_norm.bias"}) {
      expected.push_back("layers." + l + "." + n);
    }
  }
  expected.push_back("crit.out_layers.0.bias");
  EXPECT_EQ(names, expected);
}

TEST(TransformerLM, UntieRGivesEachLayerItsOwnBiases) {
  auto c = tiny(AttnType::kXl, 4);
  c.untie_r = true;
  auto model = make(c, 16);
  auto params = model->named_parameters();
  EXPECT_EQ(params.find("u_bias"), nullptr);
  EXPECT_NE(params.find("layers.1.attn.u_bias"), nullptr);
  EXPECT_NE(params.find("layers.0.attn.v_bias"), nullptr);
  torch::NoGradGuard no_grad;
  auto out = run(model, random_tokens(2, 5, 26), {}, ctx_with(4));
  EXPECT_TRUE(torch::isfinite(out.logits).all().item<bool>());
}

TEST(TransformerLM, PreNormHasAFinalNorm) {
  auto c = tiny(AttnType::kXl, 4);
  c.pre_norm = true;
  auto model = make(c, 17);
  EXPECT_NE(model->named_parameters().find("final_norm.weight"), nullptr);
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(torch::isfinite(run(model, random_tokens(2, 5, 27), {}, ctx_with(4)).logits)
                  .all()
                  .item<bool>());
}

// model.final_norm: false is the paper code's pre_lnorm model: the same weights but the final
// LayerNorm; the output layer scores the last layer's output as it is.
TEST(TransformerLM, PreNormWithoutFinalNormScoresTheLastLayerDirectly) {
  torch::NoGradGuard no_grad;
  auto c = tiny(AttnType::kXl, 4);
  c.pre_norm = true;
  auto with = make(c, 17, torch::kDouble);
  c.final_norm = false;
  auto without = make(c, 18, torch::kDouble);
  auto params = without->named_parameters();
  EXPECT_EQ(params.find("final_norm.weight"), nullptr);
  EXPECT_EQ(params.size() + 2, with->named_parameters().size());
  for (const auto& p : params) p.value().copy_(with->named_parameters()[p.key()]);
  auto tokens = random_tokens(2, 5, 27);
  auto a = run(without, tokens, {}, ctx_with(4));
  auto b = run(with, tokens, {}, ctx_with(4));
  // The final norm applied to the model without it gives the model with it, and only then.
  EXPECT_TRUE(tensor_near(with->final_norm(a.hidden), b.hidden, 1e-12, 1e-12));
  EXPECT_FALSE(tensor_near(a.hidden, b.hidden, 1e-3, 1e-3));
  auto logp = without->crit->log_prob(a.hidden.reshape({-1, 8})).view({2, 5, kVocab});
  EXPECT_TRUE(tensor_near(a.logits, logp, 1e-12, 1e-12));
  // Post-norm layers already end in a LayerNorm: final_norm has nothing to remove there.
  c.pre_norm = false;
  EXPECT_EQ(make(c, 19)->named_parameters().find("final_norm.weight"), nullptr);
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
  EXPECT_TRUE(Context::from_config(c).zero_memory);
  EXPECT_FALSE(Context::from_config(tiny(AttnType::kXl, 3)).zero_memory);
}

TEST(TransformerLM, BadInputsAreClearErrors) {
  torch::NoGradGuard no_grad;
  auto model = make(tiny(AttnType::kXl, 4), 18);
  auto tokens = random_tokens(2, 5, 28);
  auto memory = run(model, tokens, {}, ctx_with(4)).memory;
  TXL_EXPECT_THROW_WITH(run(model, torch::full({2, 5}, kVocab, torch::kLong), {}, ctx_with(4)),
                        "token id 11 is outside the vocabulary [0, 11)");
  TXL_EXPECT_THROW_WITH(run(model, tokens.to(torch::kInt), {}, ctx_with(4)),
                        "tokens must be a non-empty int64 [B, T]");
  TXL_EXPECT_THROW_WITH(run(model, random_tokens(3, 5, 1), memory, ctx_with(4)),
                        "layer 0 must be [B = 3, M = 4, d = 8]");
  Memory wide = memory;
  for (auto& m : wide.layers) m = torch::zeros({2, 4, 6});
  TXL_EXPECT_THROW_WITH(run(model, tokens, wide, ctx_with(4)), "d = 8], got [2, 4, 6]");
  Memory short_memory = memory;
  short_memory.layers.pop_back();
  TXL_EXPECT_THROW_WITH(run(model, tokens, short_memory, ctx_with(4)),
                        "has 1 layers, the model has n_layer = 2");
  TXL_EXPECT_THROW_WITH(run(model, tokens, {}, ctx_with(-1)), "mem_len = -1 must be >= 0");
  TXL_EXPECT_THROW_WITH(run(model, tokens, {}, ctx_with(4, -2)), "clamp_len = -2");
  TXL_EXPECT_THROW_WITH(run(model, tokens, {}, ctx_with(4), torch::ones({2, 4}, torch::kBool)),
                        "input_mask must be bool [B, T]");
  TXL_EXPECT_THROW_WITH(run(model, tokens, {}, ctx_with(4), {}, torch::ones({3}, torch::kBool)),
                        "reset must be bool [B = 2]");
  Memory doubled = memory;
  for (auto& m : doubled.layers) m = m.to(torch::kDouble);
  TXL_EXPECT_THROW_WITH(run(model, tokens, doubled, ctx_with(4)),
                        "layer 0 is Double but the layer input is Float");
  Memory grad_memory = memory;
  grad_memory.layers[0] = grad_memory.layers[0].clone().requires_grad_(true);
  TXL_EXPECT_THROW_WITH(run(model, tokens, grad_memory, ctx_with(4)), "must be detached");

  auto c = tiny(AttnType::kVanilla, 4);
  TXL_EXPECT_THROW_WITH(TransformerLM(c, kVocab), "allow_abs_with_memory: true");
  auto vanilla = make(tiny(AttnType::kVanilla, 0), 1);
  TXL_EXPECT_THROW_WITH(run(vanilla, tokens, {}, ctx_with(4)), "absolute positions need mem_len 0");
  c = tiny(AttnType::kXl, 4);
  c.attn_type = static_cast<AttnType>(9);  // no enumerator: only a cast makes one
  TXL_EXPECT_THROW_WITH(TransformerLM(c, kVocab),
                        "model.attn_type: unknown value \"9\" (allowed: xl | shaw | vanilla | "
                        "vanilla_learned | rope | alibi)");
  c = tiny(AttnType::kRope, 4);
  c.clamp_len = 3;
  TXL_EXPECT_THROW_WITH(TransformerLM(c, kVocab), "rotary positions have no distances to clamp");
  c.clamp_len = -1;
  c.d_head = 3;
  TXL_EXPECT_THROW_WITH(TransformerLM(c, kVocab), "must be even for rotary positions");
  auto rope = make(tiny(AttnType::kRope, 4), 1);
  TXL_EXPECT_THROW_WITH(run(rope, tokens, {}, ctx_with(4, 3)),
                        "model context: clamp_len = 3 with attn_type rope");
  c = tiny(AttnType::kXl, 4);
  c.n_head = 0;
  TXL_EXPECT_THROW_WITH(TransformerLM(c, kVocab), "model.n_head = 0 must be > 0");
  c = tiny(AttnType::kVanillaLearned, 0);
  c.max_positions = 4;
  auto learned = make(c, 1);
  TXL_EXPECT_THROW_WITH(run(learned, tokens, {}, ctx_with(0)),
                        "5 positions requested but the table has 4");
}

// Evaluation with the memory's keys and values carried between segments (Context::cache_kv)
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
    Context plain = ctx_with(7);
    plain.ext_len = k.ext_len;
    Context cached = plain;
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
  Context ctx = ctx_with(4);
  ctx.cache_kv = true;
  auto tokens = random_tokens(2, 5, 51);
  TXL_EXPECT_THROW_WITH(run(model, tokens, {}, ctx),
                        "cache_kv is for evaluation without gradients");
  auto c = tiny(AttnType::kVanillaLearned, 0);
  auto learned = make(c, 33);
  EXPECT_FALSE(learned->can_cache_kv());
  torch::NoGradGuard no_grad;
  EXPECT_NO_THROW(run(learned, tokens, {}, ctx_with(0)));  // without the cache it runs
  Context bad = ctx_with(0);
  bad.cache_kv = true;
  TXL_EXPECT_THROW_WITH(run(learned, tokens, {}, bad), "cache_kv with learned absolute positions");
}

}  // namespace
}  // namespace txl::models
