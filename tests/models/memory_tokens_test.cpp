// Recurrent memory tokens (model.mem_tokens, Bulatov et al. 2022), what is their own: the
// visibility of [tokens read, segment, tokens written] written out, the memory written at a
// segment's end is the one read at the next start (and nothing else carries across without
// memory positions), memory positions and compressed rows hold the segment only, the gradient
// reaches the tokens' parameters through later segments only, and the memory's named tensors
// round-trip and are checked. The family's contract (causality, rows and padding, resets,
// gradient through k segments, decoding) runs over them in family_contract_test.cpp.
#include <gtest/gtest.h>

#include <iostream>

#include "support/test_support.h"
#include "support/tiny_model.h"
#include "txl/models/transformer_lm.h"
#include "txl/util/fs.h"
#include "txl/util/process.h"
#include "txl/util/safetensors.h"

namespace txl::models {
namespace {

using config::AttnType;
using txl::test::tensor_equal;
using txl::test::tensor_near;

// The memory tokens of a memory (models/memory/memory_tokens.cpp); undefined when absent.
torch::Tensor tokens_of_memory(const Memory& memory) {
  const auto& part = memory.part("tokens");
  return part.layers.empty() ? torch::Tensor() : part.layers.front();
}

constexpr int64_t kVocab = 11, kSeg = 4, kTokens = 2;

// Segments of 4, 2 memory tokens, and mem_len memory positions beside them (0 = tokens alone).
config::ModelConfig tiny(AttnType attn_type, int mem_len = 0) {
  auto c = txl::test::tiny_model_config(attn_type, kSeg, mem_len);
  c.dropatt = 0.0;
  c.max_rel_dist = 16;
  c.mem_tokens = kTokens;
  return c;
}

const std::vector<AttnType> kSchemes = {AttnType::kXl, AttnType::kShaw, AttnType::kRope,
                                        AttnType::kAlibi};

TransformerLM make(const config::ModelConfig& c) { return txl::test::tiny_model(c, kVocab); }

LMOutput run(TransformerLM& model, const torch::Tensor& tokens, const Memory& memory,
             const torch::Tensor& input_mask = {}, const torch::Tensor& reset = {},
             bool memory_grad = false) {
  return txl::test::run_segment(model, tokens, memory, kVocab, input_mask, reset, memory_grad);
}

torch::Tensor tokens_of(int64_t rows, int64_t segments, uint64_t seed) {
  return txl::test::random_tokens(rows, segments * kSeg, kVocab, seed);
}

// Each segment's logits, the memory passed on (or, with carry false, every segment from an
// empty memory).
std::vector<torch::Tensor> read(TransformerLM& model, const torch::Tensor& tokens, int64_t segments,
                                bool carry = true) {
  std::vector<torch::Tensor> logits;
  Memory memory;
  for (int64_t s = 0; s < segments; ++s) {
    auto out = run(model, tokens.narrow(1, s * kSeg, kSeg), carry ? memory : Memory());
    logits.push_back(out.logits);
    memory = out.memory;
  }
  return logits;
}

// The visibility written out for M = 2 memory positions (the second one padding), Q = 3, m = 1:
// keys [mem0, mem1, read, s0, s1, s2, written], queries [read, s0, s1, s2, written].
TEST(MemoryTokens, TheMaskIsCausalOverTokensReadSegmentAndTokensWritten) {
  auto c = tiny(AttnType::kXl, 2);
  c.mem_tokens = 1;
  auto model = make(c);
  auto key_mask = torch::tensor({true, false, true, true, true}).view({1, 5});
  auto ctx = model->default_lookback();
  auto in = model->segment_inputs(3, 2, key_mask, ctx, torch::kDouble, torch::kCPU);
  const auto visible = in.blocked.logical_not().squeeze(0).squeeze(0).to(torch::kLong);  // [5, 7]
  const auto expected = torch::tensor({{1, 0, 1, 0, 0, 0, 0},                            // read
                                       {1, 0, 1, 1, 0, 0, 0},                            // s0
                                       {1, 0, 1, 1, 1, 0, 0},                            // s1
                                       {1, 0, 1, 1, 1, 1, 0},                            // s2
                                       {1, 0, 1, 1, 1, 1, 1}});                          // written
  EXPECT_TRUE(tensor_equal(visible, expected)) << visible;
  // same_length's window (mem_len 2) applies to the memory and the segment; the token read
  // stays visible to every query of the segment.
  ctx.same_length = true;
  auto windowed = model->segment_inputs(3, 2, torch::ones({1, 5}, torch::kBool), ctx,
                                        torch::kDouble, torch::kCPU);
  const auto w = windowed.blocked.logical_not().squeeze(0).squeeze(0).to(torch::kLong);
  EXPECT_TRUE(tensor_equal(w.select(0, 3), torch::tensor({0, 0, 1, 0, 1, 1, 0}))) << w;
}

// Without memory positions only the tokens carry anything: the second segment depends on the
// first one's tokens exactly through the memory's `tokens` (the same segment read after a
// different first segment differs; read from an empty memory it equals a reset row); a control
// that drops the memory shows the check can fail.
TEST(MemoryTokens, TheTokensWrittenAreTheOnesReadNext) {
  torch::NoGradGuard no_grad;
  for (auto scheme : kSchemes) {
    SCOPED_TRACE(config::to_string(scheme));
    auto model = make(tiny(scheme));
    auto tokens = tokens_of(2, 2, 5);
    auto first = run(model, tokens.narrow(1, 0, kSeg), {});
    ASSERT_TRUE(tokens_of_memory(first.memory).defined());
    EXPECT_TRUE(first.memory.layers.empty());
    EXPECT_EQ(tokens_of_memory(first.memory).sizes(), torch::IntArrayRef({2, kTokens, 8}));
    auto second = tokens.narrow(1, kSeg, kSeg);
    auto carried = run(model, second, first.memory);
    auto fresh = run(model, second, {});
    EXPECT_GT((carried.logits - fresh.logits).abs().max().item<double>(), 1e-4);
    auto reset = run(model, second, first.memory, {}, torch::tensor({true, false}));
    EXPECT_TRUE(tensor_near(reset.logits[0], fresh.logits[0], 1e-12, 1e-12));
    EXPECT_TRUE(tensor_near(reset.logits[1], carried.logits[1], 1e-12, 1e-12));
    // Changing the first segment's last token changes the second segment through the tokens.
    auto changed = tokens.clone();
    changed.select(1, kSeg - 1).add_(1).remainder_(kVocab);
    EXPECT_GT((read(model, changed, 2)[1] - read(model, tokens, 2)[1]).abs().max().item<double>(),
              1e-6);
    EXPECT_TRUE(tensor_equal(read(model, changed, 2, false)[1], read(model, tokens, 2, false)[1]));
  }
}

// Memory positions beside the tokens hold the segment's rows only: layer 0's memory is the
// segment's embedding (its input, in evaluation mode), not the tokens'.
TEST(MemoryTokens, MemoryPositionsHoldTheSegmentOnly) {
  torch::NoGradGuard no_grad;
  auto model = make(tiny(AttnType::kRope, /*mem_len=*/kSeg));
  auto tokens = tokens_of(2, 1, 6);
  auto out = run(model, tokens, {});
  ASSERT_EQ(out.memory.length(), kSeg);
  EXPECT_TRUE(tensor_near(out.memory.layers[0], model->word_emb(tokens), 1e-12, 1e-12));
  ASSERT_TRUE(tokens_of_memory(out.memory).defined());
}

// Beside compressive memory too: the rows compressed are the segment's, never the tokens'
// (mean pooling of layer 0's input, the embeddings in evaluation mode, in groups of 2).
TEST(MemoryTokens, CompressedRowsHoldTheSegmentOnly) {
  torch::NoGradGuard no_grad;
  auto c = tiny(AttnType::kAlibi, /*mem_len=*/kSeg);
  c.cmem_len = 3;
  c.cmem_rate = 2;
  c.cmem_compress = config::Compression::kMean;
  auto model = make(c);
  auto tokens = tokens_of(2, 2, 16);
  auto first = run(model, tokens.narrow(1, 0, kSeg), {});
  auto second = run(model, tokens.narrow(1, kSeg, kSeg), first.memory);
  ASSERT_EQ(second.memory.part("compressed").length(), 2);
  auto emb = model->word_emb(tokens.narrow(1, 0, kSeg));  // [2, 4, d]
  EXPECT_TRUE(tensor_near(second.memory.part("compressed").layers[0],
                          emb.view({2, 2, 2, 8}).mean(2), 1e-12, 1e-12));
  ASSERT_TRUE(tokens_of_memory(second.memory).defined());
}

// Whether `loss` gives a non-zero gradient to `t` (a parameter or a tensor of the graph).
bool reaches(const torch::Tensor& loss, const torch::Tensor& t) {
  auto grads = torch::autograd::grad({loss}, {t}, {}, /*retain_graph=*/true, false, true);
  return grads[0].defined() && grads[0].abs().sum().item<double>() > 0;
}

// Back-propagation through segments: the third segment's loss reaches the tokens the second
// segment wrote, and the parameters of the tokens written and read, when the memory keeps its
// graph from the second segment; it stops where the memory is detached: not the tokens the
// first segment wrote. Controls: without the detach it reaches them; with a detached memory the
// tokens written get no gradient at all (which is why the configuration asks for
// train.bptt_segments >= 1).
TEST(MemoryTokens, TheGradientFlowsAsFarBackAsTheMemoryKeepsItsGraph) {
  for (auto scheme : {AttnType::kXl, AttnType::kAlibi}) {
    for (int mem_len : {0, int(kSeg)}) {
      SCOPED_TRACE(config::to_string(scheme) + " mem_len " + std::to_string(mem_len));
      auto model = make(tiny(scheme, mem_len));
      model->train();  // dropout 0.1: gradients in training mode
      auto tokens = tokens_of(2, 3, 9);
      auto seg = [&](int64_t s) { return tokens.narrow(1, s * kSeg, kSeg); };
      auto first = run(model, seg(0), {}, {}, {}, /*memory_grad=*/true);
      auto second = run(model, seg(1), first.memory.detached(), {}, {}, true);
      auto third = run(model, seg(2), second.memory, {}, {}, true);
      const auto loss = third.nll.sum();
      EXPECT_TRUE(reaches(loss, tokens_of_memory(second.memory)));
      EXPECT_TRUE(reaches(loss, model->named_parameters()["memory_write_emb"]));
      EXPECT_TRUE(reaches(loss, model->named_parameters()["memory_read_emb"]));
      EXPECT_FALSE(reaches(loss, tokens_of_memory(first.memory)));
      auto whole = run(model, seg(1), first.memory, {}, {}, true);
      EXPECT_TRUE(reaches(run(model, seg(2), whole.memory, {}, {}, true).nll.sum(),
                          tokens_of_memory(first.memory)));
      auto cut = run(model, seg(2), second.memory.detached(), {}, {}, true);
      EXPECT_FALSE(reaches(cut.nll.sum(), model->named_parameters()["memory_write_emb"]));
      EXPECT_TRUE(reaches(cut.nll.sum(), model->named_parameters()["memory_read_emb"]));
    }
  }
}

TEST(MemoryTokens, TheMemoryRoundTripsThroughNamedTensorsAndIsChecked) {
  torch::NoGradGuard no_grad;
  auto model = make(tiny(AttnType::kXl, /*mem_len=*/kSeg));
  auto memory = run(model, tokens_of(3, 1, 4), {}).memory;
  const auto named = memory.to_tensors("memory/");
  auto back = Memory::from_tensors(named, "memory/", 2, 8, torch::kCPU, "ckpt");
  EXPECT_TRUE(tensor_equal(tokens_of_memory(back), tokens_of_memory(memory)));
  EXPECT_EQ(back.length(), kSeg);
  auto tokens_model = make(tiny(AttnType::kXl));
  auto alone = run(tokens_model, tokens_of(3, 1, 4), {}).memory;  // tokens only
  auto tokens_only = Memory::from_tensors(alone.to_tensors("m/"), "m/", 2, 8, torch::kCPU, "c");
  EXPECT_EQ(tokens_only.rows(), 3);
  EXPECT_TRUE(tensor_equal(tokens_of_memory(tokens_only), tokens_of_memory(alone)));
  // Rows split and joined again; the wrong width, or tokens in a model without them, refused.
  auto joined = Memory::join_rows({memory.narrow_rows(0, 1), memory.narrow_rows(1, 2)});
  EXPECT_TRUE(tensor_equal(tokens_of_memory(joined), tokens_of_memory(memory)));
  TXL_EXPECT_THROW_WITH(
      Memory::from_tensors({{"m/tokens", torch::zeros({3, 2, 5})}}, "m/", 2, 8, torch::kCPU, "c"),
      "c: the memory tokens are");
  auto plain = make(txl::test::tiny_model_config(AttnType::kXl, kSeg, kSeg));
  Inputs in;
  in.tokens = tokens_of(3, 1, 4);
  TXL_EXPECT_THROW_WITH(plain->forward(in, memory, plain->default_lookback()),
                        "holds memory tokens but the model has model.mem_tokens 0");
}

// The recurrence against PyPI's recurrent-memory-transformer-pytorch on the same weights
// (tests/models/memory_tokens_reference.py): the package's embedding, read and written tokens,
// layer loop with residuals, final norm, output layer and segment-to-segment memory, with its
// layers' insides (RMSNorm, GEGLU, a null key, value residuals, its positions) replaced by txl's
// pre-norm ALiBi layer, give txl's per-token losses and tokens written, segment after segment;
// a control that carries no memory differs.
TEST(MemoryTokens, ThePyPIPackagesRecurrenceEqualsTxlsOnTheSameWeights) {
  const std::string python = txl::test::python();
  if (!txl::process::run_program(
           {python, "-c", "import recurrent_memory_transformer_pytorch, x_transformers"})
           .ok())
    GTEST_SKIP() << "no recurrent-memory-transformer-pytorch in " << python
                 << " (TXL_TORCH=pip tools/setup.sh installs it)";
  torch::NoGradGuard no_grad;
  auto c = tiny(AttnType::kAlibi);
  c.pre_norm = true;
  c.final_norm = true;
  c.dropout = 0.0;
  auto model = make(c);
  auto tokens = tokens_of(2, 3, 31);
  std::vector<torch::Tensor> nll, written;
  Memory memory;
  for (int64_t s = 0; s < 3; ++s) {
    auto out = run(model, tokens.narrow(1, s * kSeg, kSeg), memory);
    nll.push_back(out.nll);                           // [B, Q]
    written.push_back(tokens_of_memory(out.memory));  // [B, m, d]
    memory = out.memory;
  }
  txl::safetensors::NamedTensors dump = {{"tokens", tokens},
                                         {"targets", (tokens * 3 + 1).remainder(kVocab)},
                                         {"n_head", torch::tensor(c.n_head)},
                                         {"seg", torch::tensor(kSeg)},
                                         {"txl.nll", torch::stack(nll)},
                                         {"txl.written", torch::stack(written)}};
  for (const auto& p : model->named_parameters()) dump.emplace_back("p." + p.key(), p.value());
  txl::test::TempDir dir;
  txl::fs::write_atomic(dir / "dump.safetensors", txl::safetensors::serialize(dump));
  const auto script = txl::test::source_dir() / "tests" / "models" / "memory_tokens_reference.py";
  const auto r =
      txl::process::run_program({python, script.string(), (dir / "dump.safetensors").string()});
  EXPECT_TRUE(r.ok()) << r.status() << "\n" << r.out << r.stderr_tail;
  std::cout << r.out;
}

TEST(MemoryTokens, AbsolutePositionsAreRefused) {
  TXL_EXPECT_THROW_WITH(TransformerLM(tiny(AttnType::kVanilla), kVocab), "need relative positions");
}

}  // namespace
}  // namespace txl::models
