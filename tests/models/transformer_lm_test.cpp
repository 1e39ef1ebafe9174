// TransformerLM as a whole: causality, the paper cross-check, parameters, options and errors.
#include "txl/models/transformer_lm.h"

#include <gtest/gtest.h>

#include "support/family.h"
#include "support/test_support.h"
#include "transformer_lm_test_support.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

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
                                        {"alibi", AttnType::kAlibi, 4},
                                        {"t5", AttnType::kT5, 4}};

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
                        "vanilla_learned | rope | alibi | t5)");
  c = tiny(AttnType::kRope, 4);
  c.clamp_len = 3;
  TXL_EXPECT_THROW_WITH(TransformerLM(c, kVocab),
                        "attn_type rope: its positions have no distances to clamp");
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

}  // namespace
}  // namespace txl::models
