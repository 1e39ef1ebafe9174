// Compressive memory (model.cmem_len, Rae et al. 2020), what is its own: the compressed rows
// are the compression of exactly the rows that left the memory, attention reads them as far as
// their mask allows, resets hide them, gradients stop where declared (the language-model loss
// never reaches a compressor, the reconstruction loss reaches nothing else), and the memory's
// named tensors round-trip. The family's contract (causality, rows and padding, resets,
// gradient through k segments, decoding) runs over it in family_contract_test.cpp.
#include <gtest/gtest.h>

#include <iostream>

#include "support/test_support.h"
#include "support/tiny_model.h"
#include "txl/models/memory/compressive.h"
#include "txl/models/transformer_lm.h"
#include "txl/modules/decoder_layer.h"
#include "txl/util/fs.h"
#include "txl/util/process.h"
#include "txl/util/safetensors.h"

namespace txl::models {
namespace {

using config::AttnType;
using config::Compression;
using txl::test::tensor_equal;
using txl::test::tensor_near;

// The compressed memory's part of a memory (models/memory/compressive.cpp); empty when absent.
const MemoryPart& compressed_of(const Memory& memory) { return memory.part("compressed"); }

constexpr int64_t kVocab = 11, kSeg = 4;

// mem_len 4, segments of 4, groups of 2, 3 compressed rows: the second segment compresses the
// first one's 4 rows into 2, the third adds 2 more and keeps the last 3.
config::ModelConfig tiny(AttnType attn_type, Compression compress, int rate = 2) {
  auto c = txl::test::tiny_model_config(attn_type, kSeg, /*mem_len=*/4);
  c.dropatt = 0.0;
  c.max_rel_dist = 12;
  c.cmem_len = 3;
  c.cmem_rate = rate;
  c.cmem_compress = compress;
  return c;
}

struct Member {
  AttnType attn_type;
  Compression compress;
};
// Each position scheme that carries memory, with each compression function somewhere.
const std::vector<Member> kMembers = {{AttnType::kXl, Compression::kConv},
                                      {AttnType::kRope, Compression::kMean},
                                      {AttnType::kAlibi, Compression::kMax},
                                      {AttnType::kShaw, Compression::kConv}};

std::string name_of(const Member& m) {
  return config::to_string(m.attn_type) + "+" + config::to_string(m.compress);
}

TransformerLM make(const config::ModelConfig& c, torch::ScalarType dtype = torch::kDouble) {
  return txl::test::tiny_model(c, kVocab, dtype);
}

LMOutput run(TransformerLM& model, const torch::Tensor& tokens, const Memory& memory,
             const torch::Tensor& input_mask = {}, const torch::Tensor& reset = {}) {
  return txl::test::run_segment(model, tokens, memory, kVocab, input_mask, reset);
}

torch::Tensor tokens_of(int64_t rows, int64_t segments, uint64_t seed) {
  return txl::test::random_tokens(rows, segments * kSeg, kVocab, seed);
}

// The outputs of each segment of `tokens` read in order; memories[i] is the memory after
// segment i.
struct Pass {
  std::vector<LMOutput> outs;
};
Pass read(TransformerLM& model, const torch::Tensor& tokens, int64_t segments) {
  Pass p;
  Memory memory;
  for (int64_t s = 0; s < segments; ++s) {
    p.outs.push_back(run(model, tokens.narrow(1, s * kSeg, kSeg), memory));
    memory = p.outs.back().memory;
  }
  return p;
}

// `memory` with its compressed rows removed.
Memory without_compressed(Memory memory) {
  memory.parts.erase("compressed");
  return memory;
}

// Mean of each group of `rate` consecutive rows: [B, G r, d] -> [B, G, d].
torch::Tensor pooled(const torch::Tensor& rows, int64_t rate) {
  return rows.view({rows.size(0), rows.size(1) / rate, rate, rows.size(2)}).mean(2);
}

TEST(Compressor, PoolsTheRealRowsOfEachGroupAndTheConvolutionStartsAsTheirMean) {
  torch::manual_seed(1);
  auto rows = torch::randn({2, 6, 8}, torch::kDouble);  // [B, G c, d], c = 3
  auto mask = torch::ones({2, 6}, torch::kBool);
  models::memory::Compressor mean(models::memory::CompressorOptions{8, 3, "mean"});
  models::memory::Compressor max(models::memory::CompressorOptions{8, 3, "max"});
  models::memory::Compressor conv(models::memory::CompressorOptions{8, 3, "conv"});
  conv->to(torch::kDouble);
  EXPECT_TRUE(conv->trains());
  EXPECT_FALSE(mean->trains());
  auto [all_mean, all_mask] = mean(rows, mask);
  EXPECT_TRUE(tensor_near(all_mean, pooled(rows, 3), 1e-12, 1e-12));
  // (its weights 1/c were set in float)
  EXPECT_TRUE(tensor_near(conv(rows, mask).first, all_mean, 1e-6, 1e-6));
  EXPECT_TRUE(tensor_equal(all_mask, torch::ones({2, 2}, torch::kBool)));
  // Row 0's first group has one real row, row 1's second group none.
  mask[0][0] = false;
  mask[0][1] = false;
  mask[1].narrow(0, 3, 3).fill_(false);
  auto [m, m_mask] = mean(rows, mask);
  EXPECT_TRUE(tensor_near(m[0][0], rows[0][2], 1e-12, 1e-12));
  EXPECT_TRUE(tensor_equal(m_mask, torch::tensor({true, true, true, false}).view({2, 2})));
  auto [x, x_mask] = max(rows, mask);
  EXPECT_TRUE(tensor_near(x[0][0], rows[0][2], 1e-12, 1e-12));
  EXPECT_TRUE(tensor_near(x[1][0], std::get<0>(rows[1].narrow(0, 0, 3).max(0)), 1e-12, 1e-12));
  // The convolution, any weights: compressed row g = sum over taps k and inputs i of
  // W[o, i, k] rows[g c + k, i] + b[o], padding rows as zeros.
  {
    torch::NoGradGuard no_grad;
    conv->conv->weight.normal_();
    conv->conv->bias.normal_();
  }
  auto zeroed = rows.masked_fill(mask.logical_not().unsqueeze(2), 0).view({2, 2, 3, 8});
  auto expected = torch::einsum("oik,bgki->bgo", {conv->conv->weight, zeroed}) + conv->conv->bias;
  EXPECT_TRUE(tensor_near(conv(rows, mask).first, expected, 1e-12, 1e-12));
  TXL_EXPECT_THROW_WITH(mean(rows.narrow(1, 0, 5), mask.narrow(1, 0, 5)), "whole groups of 3");
}

// Whether the compressed rows after segments 2, 3 and 4 of `p` (mean pooling in groups of 2,
// memory of 4 = a segment, 3 compressed rows kept) are the means of groups of exactly the layer
// inputs that left the memory, oldest first: segment 2 compresses segment 1's memory, segment 3
// adds segment 2's and keeps the last 3 rows, and so on.
::testing::AssertionResult written_from_what_left(const Pass& p) {
  if (!compressed_of(p.outs[0].memory).layers.empty())
    return ::testing::AssertionFailure() << "written early";
  for (int s = 1; s < 4; ++s) {
    if (compressed_of(p.outs[s].memory).layers.size() != 2)
      return ::testing::AssertionFailure() << "segment " << s + 1 << ": no compressed memory";
  }
  for (int l = 0; l < 2; ++l) {
    const auto first = pooled(p.outs[0].memory.layers[l], 2);   // [B, 2, d]
    const auto second = pooled(p.outs[1].memory.layers[l], 2);  // [B, 2, d]
    const auto third = pooled(p.outs[2].memory.layers[l], 2);   // [B, 2, d]
    const std::vector<torch::Tensor> expected = {first,
                                                 torch::cat({first.narrow(1, 1, 1), second}, 1),
                                                 torch::cat({second.narrow(1, 1, 1), third}, 1)};
    for (int s = 1; s < 4; ++s) {
      auto r =
          tensor_near(compressed_of(p.outs[s].memory).layers[l], expected[s - 1], 1e-12, 1e-12);
      if (!r) return r << " (segment " << s + 1 << ", layer " << l << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

// The memory never written is the failure this catches: every compressed row is the mean of a
// group of exactly the layer inputs that left the memory; controls: a memory never written
// (its rows left at zero) and one written from the rows that stayed fail the same check.
TEST(CompressiveMemory, CompressedRowsAreTheRowsThatLeftTheMemory) {
  torch::NoGradGuard no_grad;
  auto model = make(tiny(AttnType::kXl, Compression::kMean));
  auto p = read(model, tokens_of(2, 4, 5), 4);
  EXPECT_TRUE(written_from_what_left(p));
  EXPECT_TRUE(
      tensor_equal(compressed_of(p.outs[3].memory).mask, torch::ones({2, 3}, torch::kBool)));
  EXPECT_EQ(p.outs[3].memory.length(), 4);
  Pass never = p;
  for (auto& out : never.outs) {
    if (!out.memory.has("compressed")) continue;
    for (auto& rows : out.memory.parts.at("compressed").layers) rows = torch::zeros_like(rows);
  }
  EXPECT_FALSE(written_from_what_left(never));
  Pass stayed = p;
  for (int l = 0; l < 2; ++l) {
    stayed.outs[1].memory.parts.at("compressed").layers[l] = pooled(p.outs[1].memory.layers[l], 2);
  }
  EXPECT_FALSE(written_from_what_left(stayed));
}

// A memory shorter than a segment: rows leave from the segment itself, the first one included.
TEST(CompressiveMemory, RowsLeaveFromTheSegmentWhenTheMemoryIsShorter) {
  torch::NoGradGuard no_grad;
  auto c = tiny(AttnType::kXl, Compression::kMean);
  c.mem_len = 2;
  auto model = make(c);
  auto tokens = tokens_of(2, 2, 15);
  auto first = run(model, tokens.narrow(1, 0, kSeg), {});
  // The same segment's layer inputs, all kept: a context with a longer memory and no compression.
  auto ctx = model->default_lookback();
  ctx.mem_len = kSeg;
  Inputs in;
  in.tokens = tokens.narrow(1, 0, kSeg);
  auto all = model->forward(in, {}, ctx).memory;
  ASSERT_EQ(compressed_of(first.memory).layers.size(), 2u);
  for (int l = 0; l < 2; ++l) {
    EXPECT_TRUE(tensor_near(first.memory.layers[l], all.layers[l].narrow(1, 2, 2), 1e-12, 1e-12));
    EXPECT_TRUE(tensor_near(compressed_of(first.memory).layers[l],
                            pooled(all.layers[l].narrow(1, 0, 2), 2), 1e-12, 1e-12));
  }
  // The next segment: the memory's 2 rows and the segment's first 2 leave, 2 compressed rows
  // more; 3 kept.
  auto second = run(model, tokens.narrow(1, kSeg, kSeg), first.memory);
  EXPECT_EQ(compressed_of(second.memory).length(), 3);
  EXPECT_EQ(second.memory.length(), 2);
}

// Attention reads the compressed rows (a segment's outputs change without them), and their mask
// hides them exactly (all hidden equals none given).
TEST(CompressiveMemory, AttentionReadsTheCompressedRowsTheMaskAllows) {
  torch::NoGradGuard no_grad;
  for (const auto& member : kMembers) {
    SCOPED_TRACE(name_of(member));
    auto model = make(tiny(member.attn_type, member.compress));
    auto tokens = tokens_of(2, 4, 6);
    auto memory = read(model, tokens, 3).outs.back().memory;
    ASSERT_EQ(compressed_of(memory).length(), 3);
    ASSERT_EQ(compressed_of(memory).layers.size(), 2u);
    auto next = tokens.narrow(1, 3 * kSeg, kSeg);
    auto with = run(model, next, memory);
    const Memory without = without_compressed(memory);
    auto plain = run(model, next, without);
    EXPECT_GT((with.logits - plain.logits).abs().max().item<double>(), 1e-4);
    Memory hidden = memory;
    hidden.parts.at("compressed").mask = torch::zeros_like(compressed_of(memory).mask);
    EXPECT_TRUE(tensor_near(run(model, next, hidden).logits, plain.logits, 1e-12, 1e-12));
  }
}

// A reset row forgets its compressed memory with the rest: it gives what a fresh start gives,
// and its old compressed rows stay hidden as they move on.
TEST(CompressiveMemory, ResetForgetsTheCompressedMemoryOfThatRowOnly) {
  torch::NoGradGuard no_grad;
  auto model = make(tiny(AttnType::kXl, Compression::kConv));
  auto tokens = tokens_of(2, 4, 9);
  auto memory = read(model, tokens, 3).outs.back().memory;
  auto next = tokens.narrow(1, 3 * kSeg, kSeg);
  auto out = run(model, next, memory, {}, torch::tensor({true, false}));
  auto fresh = run(model, next, {});
  auto kept = run(model, next, memory);
  EXPECT_TRUE(tensor_near(out.logits[0], fresh.logits[0], 1e-10, 1e-10));
  EXPECT_TRUE(tensor_near(out.logits[1], kept.logits[1], 1e-10, 1e-10));
  EXPECT_TRUE(tensor_equal(compressed_of(out.memory).mask[0], torch::zeros({3}, torch::kBool)));
  EXPECT_TRUE(tensor_equal(compressed_of(out.memory).mask[1], torch::ones({3}, torch::kBool)));
}

// The compressors' parameters, or (compressors = false) every other one.
std::vector<torch::Tensor> compressor_parameters(TransformerLM& model, bool compressors = true) {
  std::vector<torch::Tensor> out;
  for (const auto& p : model->named_parameters()) {
    if ((p.key().rfind("compressors.", 0) == 0) == compressors) out.push_back(p.value());
  }
  return out;
}

// Whether any of `params` gets a non-zero gradient from `loss`.
bool reaches(const torch::Tensor& loss, const std::vector<torch::Tensor>& params) {
  auto grads = torch::autograd::grad({loss}, params, {}, /*retain_graph=*/true,
                                     /*create_graph=*/false, /*allow_unused=*/true);
  for (const auto& g : grads) {
    if (g.defined() && g.abs().sum().item<double>() > 0) return true;
  }
  return false;
}

// Rae et al.'s stop-gradients: the language-model loss never reaches a compressor (the
// compressed memory is a constant to it), the reconstruction loss reaches the compressors and
// nothing else.
TEST(CompressiveMemory, GradientsStopWhereDeclared) {
  for (AttnType attn : {AttnType::kXl, AttnType::kRope}) {
    SCOPED_TRACE(config::to_string(attn));
    auto c = tiny(attn, Compression::kConv);
    c.pre_norm = attn == AttnType::kRope;  // the norm's weights are constants to it too
    auto model = make(c, torch::kFloat);
    model->train();
    auto tokens = tokens_of(2, 3, 10);
    const auto out = read(model, tokens, 3).outs.back();
    for (const auto& t : compressed_of(out.memory).layers) EXPECT_FALSE(t.requires_grad());
    ASSERT_TRUE(out.aux_loss.defined());
    EXPECT_GT(out.aux_loss.item<double>(), 0.0);
    const auto compressors = compressor_parameters(model);
    ASSERT_EQ(compressors.size(), 4u);  // 2 layers x (weight, bias)
    const auto others = compressor_parameters(model, /*compressors=*/false);
    EXPECT_FALSE(reaches(out.nll.mean(), compressors));
    EXPECT_TRUE(reaches(out.nll.mean(), others));
    EXPECT_TRUE(reaches(out.aux_loss, compressors));
    EXPECT_FALSE(reaches(out.aux_loss, others));
    // Pooling has nothing to train: no reconstruction loss.
    auto pooling = make(tiny(attn, Compression::kMean), torch::kFloat);
    pooling->train();
    const auto m = read(pooling, tokens, 3).outs.back().memory;
    EXPECT_FALSE(run(pooling, tokens.narrow(1, 0, kSeg), m).aux_loss.defined());
  }
}

// A compressor that loses nothing (rate 1, the convolution's identity start) reconstructs the
// attention exactly; one that changes the rows does not.
TEST(CompressiveMemory, ReconstructionLossIsZeroOnlyForALosslessCompressor) {
  auto model = make(tiny(AttnType::kXl, Compression::kConv, /*rate=*/1));
  model->train();
  auto tokens = tokens_of(2, 2, 11);
  auto first = run(model, tokens.narrow(1, 0, kSeg), {});
  auto second = run(model, tokens.narrow(1, kSeg, kSeg), first.memory);
  ASSERT_TRUE(second.aux_loss.defined());
  EXPECT_LT(second.aux_loss.item<double>(), 1e-20);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : compressor_parameters(model)) p.add_(0.05);
  }
  EXPECT_GT(run(model, tokens.narrow(1, kSeg, kSeg), first.memory).aux_loss.item<double>(), 1e-6);
}

TEST(CompressiveMemory, NamedTensorsAndRowOperationsKeepTheCompressedMemory) {
  torch::NoGradGuard no_grad;
  auto model = make(tiny(AttnType::kXl, Compression::kConv));
  auto memory = read(model, tokens_of(4, 3, 12), 3).outs.back().memory;
  auto tensors = memory.to_tensors("memory.");
  auto back = Memory::from_tensors(tensors, "memory.", 2, 8, torch::kCPU, "test");
  ASSERT_EQ(compressed_of(back).layers.size(), 2u);
  for (int l = 0; l < 2; ++l)
    EXPECT_TRUE(tensor_equal(compressed_of(back).layers[l], compressed_of(memory).layers[l]));
  EXPECT_TRUE(tensor_equal(compressed_of(back).mask, compressed_of(memory).mask));
  auto joined = Memory::join_rows({memory.narrow_rows(0, 1), memory.narrow_rows(1, 3)});
  EXPECT_TRUE(tensor_equal(compressed_of(joined).layers[1], compressed_of(memory).layers[1]));
  EXPECT_TRUE(tensor_equal(compressed_of(joined).mask, compressed_of(memory).mask));
  // A compressed memory without its mask, or with a missing layer, is refused by name.
  std::vector<std::pair<std::string, torch::Tensor>> no_mask;
  for (const auto& [name, t] : tensors) {
    if (name != "memory.compressed_mask") no_mask.emplace_back(name, t);
  }
  TXL_EXPECT_THROW_WITH(Memory::from_tensors(no_mask, "memory.", 2, 8, torch::kCPU, "ckpt"),
                        "ckpt: a compressed memory needs both its layers and its mask");
  std::vector<std::pair<std::string, torch::Tensor>> one_layer;
  for (const auto& [name, t] : tensors) {
    if (name != "memory.compressed.1") one_layer.emplace_back(name, t);
  }
  TXL_EXPECT_THROW_WITH(Memory::from_tensors(one_layer, "memory.", 2, 8, torch::kCPU, "ckpt"),
                        "the compressed memory has 1 layers");
}

TEST(CompressiveMemory, SettingsThatCannotWorkAreClearErrorsAndSameLengthKeepsTheCompressedRows) {
  auto c = tiny(AttnType::kXl, Compression::kConv);
  c.mem_len = 0;
  TXL_EXPECT_THROW_WITH(TransformerLM(c, kVocab), "needs mem_len > 0");
  c = tiny(AttnType::kXl, static_cast<Compression>(7));  // outside the table: only a cast makes one
  TXL_EXPECT_THROW_WITH(TransformerLM(c, kVocab), "model.cmem_compress: unknown value \"7\"");
  auto model = make(tiny(AttnType::kXl, Compression::kConv));
  auto memory = read(model, tokens_of(2, 3, 13), 3).outs.back().memory;
  // same_length windows the memory and the segment; the compressed rows stay visible.
  auto ctx = model->default_lookback();
  ctx.same_length = true;
  Inputs in;
  in.tokens = tokens_of(2, 1, 14);
  const Memory without = without_compressed(memory);
  EXPECT_GT((model->forward(in, memory, ctx).hidden - model->forward(in, without, ctx).hidden)
                .abs()
                .max()
                .item<double>(),
            1e-4);
  EXPECT_FALSE(model->can_cache_kv());
}

// The compression and the attention-reconstruction loss against PyPI's
// compressive-transformer-pytorch on the same weights (tests/models/compressive_reference.py,
// which names what differs): the compressed rows, the loss and its gradient with respect to the
// convolution, with a control that one changed weight fails.
TEST(CompressiveMemory, CompressionAndReconstructionEqualPyPIsReference) {
  const std::string python = txl::test::python();
  if (!txl::process::run_program({python, "-c", "import compressive_transformer_pytorch"}).ok())
    GTEST_SKIP() << "no compressive-transformer-pytorch in " << python
                 << " (TXL_TORCH=pip tools/setup.sh installs it)";
  constexpr int64_t kRows = 2, kQ = 4, kD = 8, kHeads = 2, kRate = 2;
  torch::manual_seed(17);
  modules::DecoderLayerOptions o;
  o.attention.d_model = kD;
  o.attention.n_head = kHeads;
  o.attention.d_head = kD / kHeads;
  o.d_inner = 16;
  o.dropout = 0;
  modules::DecoderLayer layer(o);
  models::memory::Compressor compressor(models::memory::CompressorOptions{kD, kRate, "conv"});
  layer->to(torch::kDouble);
  compressor->to(torch::kDouble);
  {
    torch::NoGradGuard no_grad;
    layer->attn->qkv->weight.normal_(0, 0.5);
    compressor->conv->weight.normal_(0, 0.3);
    compressor->conv->bias.normal_(0, 0.1);
  }
  auto x = torch::randn({kRows, kQ, kD}, torch::kDouble);    // the segment (queries)
  auto mem = torch::randn({kRows, kQ, kD}, torch::kDouble);  // the memory, which leaves whole
  auto cmem = torch::randn({kRows, 2, kD}, torch::kDouble);  // the compressed memory before
  auto all = torch::ones({kRows, kQ}, torch::kBool);
  auto [made, made_mask] = compressor(mem, all);  // [B, 2, d]
  auto loss = layer->reconstruction_loss(x, mem, all, made, made_mask, all);
  loss.backward();
  txl::safetensors::NamedTensors dump = {
      {"x", x},
      {"mem", mem},
      {"cmem", cmem},
      {"qkv", layer->attn->qkv->weight.detach()},
      {"conv.weight", compressor->conv->weight.detach()},
      {"conv.bias", compressor->conv->bias.detach()},
      {"n_head", torch::tensor(kHeads)},
      {"rate", torch::tensor(kRate)},
      {"cmem_len", torch::tensor(3)},
      {"txl.new_cmem", torch::cat({cmem, made.detach()}, 1).narrow(1, 1, 3)},  // cmem_len 3
      {"txl.aux", loss.detach().reshape({1})},
      {"txl.conv.weight.grad", compressor->conv->weight.grad()},
      {"txl.conv.bias.grad", compressor->conv->bias.grad()}};
  txl::test::TempDir dir;
  txl::fs::write_atomic(dir / "dump.safetensors", txl::safetensors::serialize(dump));
  const auto script = txl::test::source_dir() / "tests" / "models" / "compressive_reference.py";
  const auto r =
      txl::process::run_program({python, script.string(), (dir / "dump.safetensors").string()});
  EXPECT_TRUE(r.ok()) << r.status() << "\n" << r.out << r.stderr_tail;
  std::cout << r.out;
}

}  // namespace
// What the rest of txl reads of the mechanism: no cached keys and values, decoding by the
// forward while there is a memory to compress; a compressed memory handed to a model without
// compressive memory is refused, naming the setting that would give it one.
TEST(CompressiveMemory, TheModelSaysWhatItsMechanismsAllow) {
  torch::NoGradGuard no_grad;
  auto model = make(tiny(AttnType::kXl, Compression::kMean));
  EXPECT_FALSE(model->can_cache_kv());
  EXPECT_TRUE(model->decodes_by_step(0));
  EXPECT_FALSE(model->decodes_by_step(4));
  auto plain = make(txl::test::tiny_model_config(AttnType::kXl, kSeg, kSeg));
  EXPECT_TRUE(plain->can_cache_kv());
  EXPECT_TRUE(plain->decodes_by_step(4));
  auto memory = read(model, tokens_of(2, 3, 5), 3).outs.back().memory;
  ASSERT_GT(compressed_of(memory).length(), 0);
  Inputs in;
  in.tokens = tokens_of(2, 1, 6);
  TXL_EXPECT_THROW_WITH(plain->forward(in, memory, plain->default_lookback()),
                        "holds compressed memory but the model has model.cmem_len 0");
}

}  // namespace txl::models
