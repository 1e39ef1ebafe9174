// The contract every member of Transformer-XL's family meets (docs/model.md, "The contract every
// member meets"), one property per test, each run over every member of
// txl::test::contract_members(): every position scheme that carries memory with every memory
// mechanism. A new member enters by joining that list and passing this suite.
//
// Properties: no token sees a later one; the memory is written and read (a later segment
// depends on an earlier one through it); the rows of a batch are independent and trailing
// padding is invisible; a reset row starts afresh and only that row; the gradient flows
// exactly k segments back when the memory keeps its graph and stops at a detached memory; the
// memory round-trips through its named tensors (a resumed run continues exactly); decoding
// equals the forward. The controls at the end show that the checks fail on a memory never
// written and on a gradient that leaks past k.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

#include "support/family.h"
#include "support/reference_decoding.h"
#include "support/test_support.h"
#include "support/tiny_model.h"
#include "txl/generation/incremental.h"
#include "txl/models/transformer_lm.h"

namespace txl::models {
namespace {

using txl::test::MemoryMember;
using txl::test::tensor_equal;
using txl::test::tensor_near;

constexpr int64_t kVocab = 11, kSeg = 4;

TransformerLM make(const MemoryMember& member) {
  auto c = txl::test::tiny_model_config(member.attn_type, kSeg, /*mem_len=*/kSeg);
  c.dropatt = 0.0;
  c.max_rel_dist = 16;
  member.apply(c);
  return txl::test::tiny_model(c, kVocab);
}

torch::Tensor tokens_of(int64_t rows, int64_t segments, uint64_t seed) {
  return txl::test::random_tokens(rows, segments * kSeg, kVocab, seed);
}

LMOutput run(TransformerLM& model, const torch::Tensor& tokens, const Memory& memory,
             const torch::Tensor& input_mask = {}, const torch::Tensor& reset = {},
             bool memory_grad = false) {
  return txl::test::run_segment(model, tokens, memory, kVocab, input_mask, reset, memory_grad);
}

// What passes from one segment to the next: the identity, or a deliberately broken memory.
using Carry = std::function<Memory(const Memory&)>;
Memory as_is(const Memory& m) { return m; }

// Each segment's log-probabilities [B, kSeg, V], the memory carried between them.
std::vector<torch::Tensor> read(TransformerLM& model, const torch::Tensor& tokens,
                                const Carry& carry = as_is) {
  std::vector<torch::Tensor> out;
  Memory memory;
  for (int64_t s = 0; s < tokens.size(1) / kSeg; ++s) {
    auto r = run(model, tokens.narrow(1, s * kSeg, kSeg), memory);
    out.push_back(r.logits);
    memory = carry(r.memory);
  }
  return out;
}

// The memory after the first two segments of `tokens`.
Memory after_two_segments(TransformerLM& model, const torch::Tensor& tokens) {
  Memory memory;
  for (int64_t s = 0; s < 2; ++s)
    memory = run(model, tokens.narrow(1, s * kSeg, kSeg), memory).memory;
  return memory;
}

double max_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

// The memory is written and read: changing the second segment's last token changes the third
// segment (through whatever the member's memory holds).
::testing::AssertionResult memory_is_read(TransformerLM& model, const Carry& carry) {
  auto tokens = tokens_of(2, 3, 5);
  auto changed = tokens.clone();
  changed.select(1, 2 * kSeg - 1).add_(1).remainder_(kVocab);
  const double d = max_diff(read(model, tokens, carry)[2], read(model, changed, carry)[2]);
  if (d > 1e-6) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "the third segment ignores the second (" << d << ")";
}

// The tensors of a memory that hold a graph: of the memory positions and of every other part
// (memory tokens; the compressed rows are always detached).
std::vector<torch::Tensor> state_of(const Memory& m) {
  std::vector<torch::Tensor> out;
  for (const auto& t : m.layers)
    if (t.requires_grad()) out.push_back(t);
  for (const auto& [name, part] : m.parts) {
    for (const auto& t : part.layers)
      if (t.requires_grad()) out.push_back(t);
  }
  return out;
}

bool reaches(const torch::Tensor& loss, const std::vector<torch::Tensor>& tensors) {
  if (tensors.empty()) return false;
  auto grads = torch::autograd::grad({loss}, tensors, {}, /*retain_graph=*/true, false, true);
  for (const auto& g : grads)
    if (g.defined() && g.abs().sum().item<double>() > 0) return true;
  return false;
}

// Back-propagation through one segment (k = 1): segment 2 starts from segment 1's memory
// detached (`cut` says how to pass it), segment 3 from segment 2's with its graph; segment 3's
// loss must reach segment 2's memory and not segment 1's.
::testing::AssertionResult gradient_flows_one_segment_back(TransformerLM& model, const Carry& cut) {
  model->train();
  auto tokens = tokens_of(2, 3, 9);
  auto seg = [&](int64_t s) { return tokens.narrow(1, s * kSeg, kSeg); };
  auto first = run(model, seg(0), {}, {}, {}, /*memory_grad=*/true);
  auto second = run(model, seg(1), cut(first.memory), {}, {}, true);
  auto third = run(model, seg(2), second.memory, {}, {}, true);
  const auto loss = third.nll.sum();
  const bool one_back = reaches(loss, state_of(second.memory));
  const bool two_back = reaches(loss, state_of(first.memory));
  model->eval();
  if (one_back && !two_back) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "one segment back: " << one_back << ", two segments back: " << two_back;
}

TEST(FamilyContract, NoTokenSeesALaterOne) {
  torch::NoGradGuard no_grad;
  for (const auto& member : txl::test::contract_members()) {
    SCOPED_TRACE(member.name);
    auto model = make(member);
    auto tokens = tokens_of(2, 3, 7);
    auto base = read(model, tokens);
    for (int64_t t : {1, 6, 11}) {
      auto changed = tokens.clone();
      changed.select(1, t).add_(1).remainder_(kVocab);
      auto other = read(model, changed);
      for (int64_t s = 0; s < 3; ++s) {
        const int64_t before = std::clamp<int64_t>(t - s * kSeg, 0, kSeg);
        EXPECT_TRUE(tensor_equal(other[s].narrow(1, 0, before), base[s].narrow(1, 0, before)))
            << "token " << t << ", segment " << s;
      }
      EXPECT_GT(max_diff(other[t / kSeg].select(1, t % kSeg), base[t / kSeg].select(1, t % kSeg)),
                1e-6)
          << "token " << t;
    }
  }
}

TEST(FamilyContract, TheMemoryIsWrittenAndRead) {
  torch::NoGradGuard no_grad;
  for (const auto& member : txl::test::contract_members()) {
    SCOPED_TRACE(member.name);
    auto model = make(member);
    EXPECT_TRUE(memory_is_read(model, as_is));
  }
}

// A row of a batch gives what it gives alone; padding at the end of a row's last segment (its
// document ended) changes none of its real positions.
TEST(FamilyContract, RowsAreIndependentAndPaddingIsInvisible) {
  torch::NoGradGuard no_grad;
  for (const auto& member : txl::test::contract_members()) {
    SCOPED_TRACE(member.name);
    auto model = make(member);
    auto tokens = tokens_of(2, 3, 8);
    auto mask = torch::ones({2, 3 * kSeg}, torch::kBool);
    mask[0].narrow(0, 3 * kSeg - 2, 2).fill_(false);
    Memory together, alone;
    for (int64_t s = 0; s < 3; ++s) {
      auto seg = tokens.narrow(1, s * kSeg, kSeg);
      auto both = run(model, seg, together, mask.narrow(1, s * kSeg, kSeg));
      const int64_t real = s == 2 ? kSeg - 2 : kSeg;
      auto one = run(model, seg.narrow(0, 0, 1).narrow(1, 0, real), alone);
      EXPECT_TRUE(tensor_near(both.logits[0].narrow(0, 0, real), one.logits[0], 1e-10, 1e-10))
          << "segment " << s;
      together = both.memory;
      alone = one.memory;
    }
  }
}

TEST(FamilyContract, AResetRowStartsAfreshAndOnlyThatRow) {
  torch::NoGradGuard no_grad;
  for (const auto& member : txl::test::contract_members()) {
    SCOPED_TRACE(member.name);
    auto model = make(member);
    auto tokens = tokens_of(2, 3, 10);
    const Memory memory = after_two_segments(model, tokens);
    auto next = tokens.narrow(1, 2 * kSeg, kSeg);
    auto out = run(model, next, memory, {}, torch::tensor({true, false}));
    EXPECT_TRUE(tensor_near(out.logits[0], run(model, next, {}).logits[0], 1e-10, 1e-10));
    EXPECT_TRUE(tensor_near(out.logits[1], run(model, next, memory).logits[1], 1e-10, 1e-10));
  }
}

// k = 0 (the paper): the memory carries no graph. k = 1: the gradient reaches one segment back
// and stops at the detached memory; a state that takes no gradient (a kNN store alone) carries
// no graph even then.
TEST(FamilyContract, TheGradientStopsWhereDeclaredAndFlowsKSegmentsBack) {
  for (const auto& member : txl::test::contract_members()) {
    SCOPED_TRACE(member.name);
    auto model = make(member);
    model->train();
    auto out = run(model, tokens_of(2, 1, 4), {});
    EXPECT_TRUE(state_of(out.memory).empty()) << "a memory with a graph under the stop-gradient";
    if (!member.gradient_through_state) {
      auto with_grad = run(model, tokens_of(2, 1, 4), out.memory, {}, {}, /*memory_grad=*/true);
      EXPECT_TRUE(state_of(with_grad.memory).empty()) << "a graph through a state without one";
      continue;
    }
    EXPECT_TRUE(
        gradient_flows_one_segment_back(model, [](const Memory& m) { return m.detached(); }));
  }
}

// What a checkpoint saves of the memory (its named tensors) continues exactly.
TEST(FamilyContract, TheMemoryRoundTripsThroughItsNamedTensors) {
  torch::NoGradGuard no_grad;
  for (const auto& member : txl::test::contract_members()) {
    SCOPED_TRACE(member.name);
    auto model = make(member);
    auto tokens = tokens_of(2, 3, 11);
    const Memory memory = after_two_segments(model, tokens);
    auto back = Memory::from_tensors(memory.to_tensors("memory/"), "memory/", 2, 8, torch::kCPU,
                                     "checkpoint");
    auto next = tokens.narrow(1, 2 * kSeg, kSeg);
    EXPECT_TRUE(tensor_equal(run(model, next, back).logits, run(model, next, memory).logits));
  }
}

// Token by token, the decoder gives evaluation's log-probabilities in memory mode.
TEST(FamilyContract, DecodingEqualsTheForward) {
  for (const auto& member : txl::test::contract_members()) {
    SCOPED_TRACE(member.name);
    auto model = make(member);
    generation::DecodeOptions o{kSeg, model->config().mem_len, -1, false, false};
    const auto text = tokens_of(1, 4, 12);
    const auto expected = txl::test::reference_log_probs(model, text, o);
    for (int64_t prompt : {1, 6}) {
      EXPECT_TRUE(tensor_near(txl::test::decoded(model, text, prompt, o),
                              expected.narrow(1, prompt - 1, text.size(1) - prompt + 1), 1e-10,
                              1e-10))
          << "prompt of " << prompt;
    }
  }
}

// The controls: the checks above fail on a memory never written (each segment handed an empty
// memory) and on a gradient that leaks past k (the memory not detached between the first and
// the second segment).
TEST(FamilyContract, TheChecksFailOnAMemoryNeverWrittenAndOnALeakingGradient) {
  for (const auto& member : txl::test::contract_members()) {
    SCOPED_TRACE(member.name);
    auto model = make(member);
    {
      torch::NoGradGuard no_grad;
      EXPECT_FALSE(memory_is_read(model, [](const Memory&) { return Memory(); }));
    }
    EXPECT_FALSE(gradient_flows_one_segment_back(model, as_is));
  }
}

}  // namespace
}  // namespace txl::models
