// A kNN memory (model.knn_layer, Memorizing Transformers, Wu et al. 2022), what is its own: the
// store holds its layer's inputs at the positions that left the memory of positions (the whole
// segment without one), the latest knn_size of them; a closed gate is the model without it
// exactly, an open one reads the store; retrieving more keys than are stored is retrieving all
// of them; the gate trains and the store takes no gradient; its settings are checked. The
// family's contract (causality, rows and padding, resets, gradient through k segments, the
// named tensors, decoding) runs over it in family_contract_test.cpp.
#include <gtest/gtest.h>

#include "support/test_support.h"
#include "support/tiny_model.h"
#include "txl/models/transformer_lm.h"

namespace txl::models {
namespace {

using config::AttnType;
using txl::test::tensor_near;

constexpr int64_t kVocab = 11, kSeg = 4;

// Segments of 4, a kNN memory in `layer` reading the top 2 of 6 stored positions.
config::ModelConfig tiny(int mem_len, int layer) {
  auto c = txl::test::tiny_model_config(AttnType::kXl, kSeg, mem_len);
  c.dropatt = 0.0;
  c.knn_layer = layer;
  c.knn_topk = 2;
  c.knn_size = 6;
  return c;
}

TransformerLM make(const config::ModelConfig& c) {
  auto model = txl::test::tiny_model(c, kVocab);
  model->eval();
  return model;
}

LMOutput run(TransformerLM& model, const torch::Tensor& tokens, const Memory& memory) {
  return txl::test::run_segment(model, tokens, memory, kVocab);
}

torch::Tensor store_of(const Memory& memory) {
  const auto& part = memory.part("knn");
  return part.layers.empty() ? torch::Tensor() : part.layers.front();
}

// Each segment's logits, the memory passed on.
std::vector<LMOutput> read(TransformerLM& model, const torch::Tensor& tokens, int64_t segments) {
  std::vector<LMOutput> out;
  Memory memory;
  for (int64_t s = 0; s < segments; ++s) {
    out.push_back(run(model, tokens.narrow(1, s * kSeg, kSeg), memory));
    memory = out.back().memory;
  }
  return out;
}

// The first layer's input is the embedding: without memory positions every segment's enters
// the store; with 4 of them, the positions that left; 6 kept, the latest.
TEST(KnnMemory, TheStoreHoldsTheLatestPositionsThatLeftTheMemory) {
  torch::NoGradGuard no_grad;
  const auto tokens = txl::test::random_tokens(2, 4 * kSeg, kVocab, 3);
  for (int mem_len : {0, 4}) {
    SCOPED_TRACE("mem_len " + std::to_string(mem_len));
    auto model = make(tiny(mem_len, 1));
    const auto embedded = model->word_emb(tokens);  // [2, 16, d]
    const auto out = read(model, tokens, 4);
    for (int64_t s = 0; s < 4; ++s) {
      const int64_t left = mem_len == 0 ? (s + 1) * kSeg : s * kSeg;  // positions that left
      const int64_t kept = std::min<int64_t>(6, left);
      const auto store = store_of(out[static_cast<size_t>(s)].memory);
      if (kept == 0) {
        EXPECT_FALSE(store.defined()) << s;
        continue;
      }
      ASSERT_TRUE(store.defined()) << s;
      EXPECT_TRUE(tensor_near(store, embedded.narrow(1, left - kept, kept), 1e-12, 1e-12)) << s;
      EXPECT_FALSE(store.requires_grad());
      EXPECT_TRUE(out[static_cast<size_t>(s)].memory.part("knn").mask.all().item<bool>());
    }
  }
}

// A gate shut (sigmoid(-1e4) is 0 in fp64) gives the model without a kNN memory exactly, on the
// same weights; open (its initial 0: g = 1/2) the segments after the first read the store.
TEST(KnnMemory, AShutGateIsTheModelWithoutItAndAnOpenOneReadsTheStore) {
  torch::NoGradGuard no_grad;
  const auto tokens = txl::test::random_tokens(2, 3 * kSeg, kVocab, 5);
  for (int layer : {1, 2}) {
    SCOPED_TRACE("layer " + std::to_string(layer));
    auto with = make(tiny(0, layer));
    auto without = make(tiny(0, 0));
    auto params = with->named_parameters();
    for (auto& p : without->named_parameters()) p.value().copy_(params[p.key()]);
    const auto plain = read(without, tokens, 3);
    const auto open = read(with, tokens, 3);
    EXPECT_TRUE(tensor_near(open[0].logits, plain[0].logits, 1e-12, 1e-12));  // nothing stored
    EXPECT_FALSE(tensor_near(open[2].logits, plain[2].logits, 1e-4, 1e-4));
    params["knn_gate"].fill_(-1e4);
    const auto shut = read(with, tokens, 3);
    for (size_t s = 0; s < 3; ++s) {
      EXPECT_TRUE(tensor_near(shut[s].logits, plain[s].logits, 1e-12, 1e-12)) << s;
    }
  }
}

// Retrieving at least as many keys as are stored is attending to all of them: the same
// numbers for k = 6 and k = 20 (6 stored); k = 1 reads fewer and differs.
TEST(KnnMemory, RetrievingMoreKeysThanStoredIsRetrievingAll) {
  torch::NoGradGuard no_grad;
  const auto tokens = txl::test::random_tokens(2, 3 * kSeg, kVocab, 7);
  auto c = tiny(0, 2);
  auto logits = [&](int topk) {
    auto model_config = c;
    model_config.knn_topk = topk;
    model_config.knn_size = std::max(6, topk);
    auto model = make(model_config);
    auto memory = read(model, tokens.narrow(1, 0, 2 * kSeg), 2).back().memory;
    // The store of 6 (knn_size 20 keeps 8 otherwise): its latest 6 rows.
    auto& part = memory.parts.at("knn");
    const int64_t n = part.layers.front().size(1);
    part.layers.front() = part.layers.front().narrow(1, n - 6, 6);
    part.mask = part.mask.narrow(1, n - 6, 6);
    return run(model, tokens.narrow(1, 2 * kSeg, kSeg), memory).logits;
  };
  const auto all = logits(6);
  EXPECT_TRUE(tensor_near(logits(20), all, 1e-12, 1e-12));
  EXPECT_FALSE(tensor_near(logits(1), all, 1e-6, 1e-6));
}

// Training: the gate learns from a segment that reads the store; the store is a constant.
TEST(KnnMemory, TheGateTrainsAndTheStoreTakesNoGradient) {
  auto model = txl::test::tiny_model(tiny(0, 2), kVocab);
  model->train();
  const auto tokens = txl::test::random_tokens(2, 2 * kSeg, kVocab, 9);
  Memory memory;
  {
    torch::NoGradGuard no_grad;
    memory = run(model, tokens.narrow(1, 0, kSeg), {}).memory;
  }
  ASSERT_TRUE(store_of(memory).defined());
  auto out = run(model, tokens.narrow(1, kSeg, kSeg), memory);
  out.nll.mean().backward();
  const auto gate = model->named_parameters()["knn_gate"];
  ASSERT_TRUE(gate.grad().defined());
  EXPECT_GT(gate.grad().abs().sum().item<double>(), 0.0);
  EXPECT_FALSE(store_of(out.memory).requires_grad());
}

TEST(KnnMemory, BadSettingsAreClearErrors) {
  auto c = tiny(0, 3);  // 2 layers
  TXL_EXPECT_THROW_WITH(TransformerLM(c, kVocab), "model.knn_layer = 3 must name a layer");
  c = tiny(0, 1);
  c.knn_topk = 0;
  TXL_EXPECT_THROW_WITH(TransformerLM(c, kVocab), "model.knn_topk = 0 must be >= 1");
  c = tiny(0, 1);
  c.knn_size = 1;
  TXL_EXPECT_THROW_WITH(TransformerLM(c, kVocab), "model.knn_size = 1 must be >= model.knn_topk");
  c = tiny(0, 1);
  c.attn_type = AttnType::kVanilla;
  TXL_EXPECT_THROW_WITH(TransformerLM(c, kVocab), "needs relative positions");
}

}  // namespace
}  // namespace txl::models
