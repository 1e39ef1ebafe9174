#include "txl/eval/evaluator.h"

#include <cmath>

#include "support/family.h"
#include "support/test_support.h"
#include "support/tiny_experiment.h"
#include "txl/config/load.h"

namespace {

using txl::config::AttnType;
using txl::eval::evaluate;
using txl::eval::Extras;
using txl::eval::Mode;
using txl::eval::Settings;

constexpr int64_t kVocab = 50;

struct Fixture {
  txl::models::TransformerLM model{nullptr};
  torch::Tensor ids;
};

Fixture make(const txl::test::MemoryMember& member, int64_t n_tokens) {
  torch::manual_seed(3);
  txl::test::TempDir dir;
  auto config = txl::test::tiny_experiment(dir.path());
  member.apply(config.model);
  if (txl::config::uses_absolute_positions(member.attn_type)) config.model.mem_len = 0;
  Fixture f;
  f.model = txl::models::TransformerLM(config.model, kVocab);
  f.ids = torch::randint(kVocab, {n_tokens}, torch::kInt64);
  return f;
}

Fixture make(txl::config::AttnType attn_type, int64_t n_tokens) {
  return make(txl::test::MemoryMember{txl::config::to_string(attn_type), attn_type}, n_tokens);
}

Settings options(Mode mode, int q, int m, int batch) {
  Settings o;
  o.mode = mode;
  o.tgt_len = q;
  o.mem_len = m;
  o.window = q;
  o.stride = q;
  o.batch_size = batch;
  return o;
}

// Token ids as a split's text, with its size in bytes (0 = not reported).
txl::data::EncodedSplit text(const torch::Tensor& ids, std::int64_t n_bytes = 0) {
  txl::data::EncodedSplit split;
  split.ids = ids;
  split.n_bytes = n_bytes;
  return split;
}

// The per-token losses of an evaluation (and its result in `result` when given).
torch::Tensor losses_of(txl::models::TransformerLM& model, const torch::Tensor& ids,
                        const Settings& o, txl::eval::EvalResult* result = nullptr) {
  Extras extras;
  extras.token_losses = true;
  auto r = evaluate(model, text(ids), o, extras);
  if (result) *result = r;
  return r.token_losses;
}

// For every member of the family that carries memory (support/family.h).
TEST(Evaluator, EveryTargetIsScoredOnceInEveryMode) {
  for (const auto& member : txl::test::memory_members()) {
    SCOPED_TRACE(member.name);
    auto f = make(member, 203);
    for (auto o : {options(Mode::kMemory, 16, 16, 3), options(Mode::kSegments, 16, 0, 3),
                   options(Mode::kSliding, 16, 0, 3)}) {
      o.stride = 5;
      Extras extras;
      extras.token_losses = true;
      auto r = evaluate(f.model, text(f.ids, /*n_bytes=*/1000), o, extras);
      const torch::Tensor losses = r.token_losses;
      EXPECT_EQ(r.tokens, 202) << o.mode;
      ASSERT_EQ(losses.numel(), 202) << o.mode;
      EXPECT_NEAR(losses.to(torch::kDouble).mean().item<double>(), r.loss, 1e-6) << o.mode;
      EXPECT_NEAR(r.ppl, std::exp(r.loss), 1e-9);
      EXPECT_NEAR(r.bits_per_byte, r.loss * 202 / std::log(2.0) / 1000, 1e-9);
    }
  }
}

// Memory mode with mem_len 0 keeps no positions: segments alone, except that what is not
// positions (memory tokens, a kNN store) still passes from each segment to the next.
TEST(Evaluator, MemoryModeWithoutMemoryEqualsSegments) {
  for (const auto& member : txl::test::memory_members()) {
    SCOPED_TRACE(member.name);
    auto f = make(member, 150);
    auto a = evaluate(f.model, text(f.ids), options(Mode::kMemory, 16, 0, 4));
    auto b = evaluate(f.model, text(f.ids), options(Mode::kSegments, 16, 0, 4));
    EXPECT_EQ(a.tokens, b.tokens);
    if (txl::models::memory_state_rows(f.model->config(), 0) > 0) {
      EXPECT_GT(std::abs(a.loss - b.loss), 1e-6);
    } else {
      EXPECT_DOUBLE_EQ(a.loss, b.loss);
    }
    // Memory does change the result (otherwise the comparison above proves nothing).
    auto c = evaluate(f.model, text(f.ids), options(Mode::kMemory, 16, 16, 4));
    EXPECT_NE(a.loss, c.loss);
  }
}

TEST(Evaluator, SlidingWithWindowAndStrideQEqualsSegments) {
  for (AttnType attn : {AttnType::kVanilla, AttnType::kXl}) {
    auto f = make(attn, 16 * 7 + 1);  // N - 1 a multiple of Q: the windows are the segments
    txl::eval::EvalResult a, b;
    const torch::Tensor sl = losses_of(f.model, f.ids, options(Mode::kSliding, 16, 0, 1), &a);
    const torch::Tensor sg = losses_of(f.model, f.ids, options(Mode::kSegments, 16, 0, 1), &b);
    EXPECT_EQ(a.tokens, b.tokens);
    EXPECT_TRUE(txl::test::tensor_near(sl, sg, 1e-5, 1e-5)) << attn;
  }
}

TEST(Evaluator, SlidingDoesNotDependOnBatchingAndTokenLossesAreInTextOrder) {
  auto f = make(AttnType::kVanilla, 97);
  auto o1 = options(Mode::kSliding, 12, 0, 1);
  o1.stride = 1;
  auto o7 = o1;
  o7.batch_size = 7;
  const torch::Tensor l1 = losses_of(f.model, f.ids, o1);
  const torch::Tensor l7 = losses_of(f.model, f.ids, o7);
  EXPECT_TRUE(txl::test::tensor_near(l1, l7, 1e-5, 1e-5));
  // Token 1's loss has one token of context in both sliding and segment evaluation.
  const torch::Tensor seg = losses_of(f.model, f.ids, options(Mode::kSegments, 12, 0, 1));
  EXPECT_NEAR(l1[0].item<float>(), seg[0].item<float>(), 1e-5);
}

TEST(Evaluator, MemoryModeTokenLossesFollowTheText) {
  // One stream (batch 1) against three: the first stream's first segment sees the same
  // context either way, so its losses lead both token-loss tensors.
  auto f = make(AttnType::kXl, 121);
  const torch::Tensor a = losses_of(f.model, f.ids, options(Mode::kMemory, 10, 10, 1));
  const torch::Tensor b = losses_of(f.model, f.ids, options(Mode::kMemory, 10, 10, 3));
  EXPECT_TRUE(txl::test::tensor_near(a.narrow(0, 0, 10), b.narrow(0, 0, 10), 1e-5, 1e-5));
}

// Memory mode carries the memory's keys and values between segments by default; projecting
// them anew gives the same per-token losses (fp32: the same products over fewer rows), with
// warm-up and with a memory longer than the segment.
TEST(Evaluator, CachedKeysAndValuesGiveTheLossesOfRecomputingThem) {
  for (const auto& member : txl::test::memory_members()) {
    SCOPED_TRACE(member.name);
    auto f = make(member, 241);
    for (int m : {10, 25}) {
      auto o = options(Mode::kMemory, 10, m, 3);
      o.warmup = 7;
      txl::eval::EvalResult a, b;
      const torch::Tensor cached = losses_of(f.model, f.ids, o, &a);
      o.cache_kv = false;
      const torch::Tensor fresh = losses_of(f.model, f.ids, o, &b);
      EXPECT_EQ(a.tokens, b.tokens);
      EXPECT_NEAR(a.loss, b.loss, 1e-6 * b.loss) << "mem_len " << m;
      EXPECT_TRUE(txl::test::tensor_near(cached, fresh, 1e-5, 1e-5)) << "mem_len " << m;
    }
  }
}

TEST(Evaluator, MaxTokensScoresTheSamePrefixInEveryMode) {
  auto f = make(AttnType::kXl, 400);
  for (auto o : {options(Mode::kMemory, 16, 16, 2), options(Mode::kSegments, 16, 0, 3),
                 options(Mode::kSliding, 16, 0, 2)}) {
    o.max_tokens = 64;
    Extras extras;
    extras.token_losses = true;
    auto r = evaluate(f.model, text(f.ids, 399), o, extras);
    EXPECT_EQ(r.tokens, 64) << o.mode;
    // The prefix alone gives the same result; bytes are prorated (64 of 399 targets).
    auto prefix = evaluate(f.model, text(f.ids.narrow(0, 0, 65)), o);
    EXPECT_DOUBLE_EQ(r.loss, prefix.loss) << o.mode;
    EXPECT_NEAR(r.bits_per_byte, r.loss / std::log(2.0), 1e-9) << o.mode;
  }
}

// Word-level perplexity by hand: exp(the summed per-token losses / the text's words), the same
// sum that per-token perplexity divides by the tokens; a prefix prorates the words.
TEST(Evaluator, WordPerplexityIsTheSummedLossOverTheWords) {
  auto f = make(AttnType::kXl, 201);
  txl::data::EncodedSplit split = text(f.ids);
  split.n_words = 120;  // 200 targets: 1.67 tokens a word
  Extras extras;
  extras.token_losses = true;
  const auto r = evaluate(f.model, split, options(Mode::kMemory, 16, 16, 2), extras);
  const double sum = r.token_losses.to(torch::kDouble).sum().item<double>();
  EXPECT_EQ(r.words, 120);
  EXPECT_NEAR(r.word_ppl, std::exp(sum / 120.0), 1e-6 * r.word_ppl);
  EXPECT_NEAR(std::log(r.word_ppl), std::log(r.ppl) * 200.0 / 120.0, 1e-9 * 200);
  auto o = options(Mode::kMemory, 16, 16, 2);
  o.max_tokens = 50;  // a quarter of the targets: 30 words
  const auto prefix = evaluate(f.model, split, o, extras);
  EXPECT_EQ(prefix.words, 30);
  EXPECT_NEAR(prefix.word_ppl,
              std::exp(prefix.token_losses.to(torch::kDouble).sum().item<double>() / 30.0),
              1e-6 * prefix.word_ppl);
  split.n_words = 0;  // no word count: not reported
  EXPECT_EQ(evaluate(f.model, split, options(Mode::kSegments, 16, 0, 2)).word_ppl, 0.0);
}

TEST(Evaluator, ResolveInheritsFromTheModel) {
  txl::test::TempDir dir;
  auto c = txl::test::tiny_experiment(dir.path());
  c.model.clamp_len = 40;
  auto o = txl::eval::resolve_settings(c);
  EXPECT_EQ(o.tgt_len, 16);
  EXPECT_EQ(o.mem_len, 16);
  EXPECT_EQ(o.clamp_len, 40);
  EXPECT_EQ(o.window, 16);
  c.eval.tgt_len = 8;
  c.eval.mem_len = 64;
  c.eval.clamp_len = -1;
  c.eval.same_length = 1;
  o = txl::eval::resolve_settings(c);
  EXPECT_EQ(o.tgt_len, 8);
  EXPECT_EQ(o.mem_len, 64);
  EXPECT_EQ(o.clamp_len, -1);
  EXPECT_TRUE(o.same_length);
  c.eval.mode = txl::config::EvalMode::kSegments;
  EXPECT_EQ(txl::eval::resolve_settings(c).mem_len, 0);
}

TEST(Evaluator, BadInputIsAClearError) {
  auto f = make(AttnType::kXl, 50);
  TXL_EXPECT_THROW_WITH(
      evaluate(f.model, text(f.ids.narrow(0, 0, 1)), options(Mode::kMemory, 8, 8, 1)),
      "at least 2 tokens");
  // A mode is one of the table's names, checked where the experiment is read.
  TXL_EXPECT_THROW_WITH(txl::config::parse_experiment_string("eval: {mode: beam}\n", "x.yaml"),
                        "memory | segments | sliding");
}

}  // namespace

namespace {

TEST(Evaluator, RecallLossAveragesTheMaskedTargets) {
  auto f = make(AttnType::kXl, 101);
  auto mask = torch::zeros({101}, torch::kBool);
  mask[5] = true;
  mask[50] = true;
  Extras extras;
  extras.token_losses = true;
  extras.recall_mask = mask;
  auto r = evaluate(f.model, text(f.ids), options(Mode::kMemory, 16, 16, 2), extras);
  const torch::Tensor losses = r.token_losses;
  EXPECT_EQ(r.recall_tokens, 2);
  // Target t is token t, predicted at index t - 1 of the text-order losses.
  EXPECT_NEAR(r.recall_loss, (losses[4].item<double>() + losses[49].item<double>()) / 2, 1e-6);
}

}  // namespace

namespace {

// ext_len (paper 3.2, as training uses it): every segment also reads the E tokens before it as
// unscored input, and the memory ends E positions before the segment's end, where the next
// segment's context begins. The evaluator's memory mode equals that computation written out
// segment by segment for one stream.
TEST(Evaluator, ExtLenEqualsSegmentsReadWithTheirPrecedingTokens) {
  auto f = make(AttnType::kXl, 97);
  const int64_t q = 10, m = 12, e = 4;
  auto o = options(Mode::kMemory, q, m, 1);
  o.ext_len = e;
  const torch::Tensor losses = losses_of(f.model, f.ids, o);

  torch::NoGradGuard no_grad;
  f.model->eval();
  txl::models::Lookback lookback;
  lookback.mem_len = m;
  lookback.ext_len = e;
  txl::models::Memory memory;
  std::vector<torch::Tensor> direct;
  for (int64_t s = 0; s < f.ids.size(0) - 1; s += q) {
    const int64_t n = std::min(q, f.ids.size(0) - 1 - s), c = std::min(e, s);
    auto tokens = f.ids.narrow(0, s - c, c + n).unsqueeze(0);       // [1, C + n]
    auto targets = f.ids.narrow(0, s - c + 1, c + n).unsqueeze(0);  // [1, C + n]
    txl::models::Inputs inputs;
    inputs.tokens = tokens;
    inputs.targets = targets;
    inputs.reset = torch::full({1}, s == 0, torch::kBool);  // bool [1]
    auto out = f.model->forward(inputs, memory, lookback);
    memory = std::move(out.memory);
    direct.push_back(out.nll[0].narrow(0, c, n));  // [n]: the context is not scored
  }
  EXPECT_TRUE(txl::test::tensor_near(losses, torch::cat(direct), 1e-5, 1e-5));
  // The context matters (otherwise the comparison above proves little).
  EXPECT_FALSE(txl::test::tensor_near(
      losses, losses_of(f.model, f.ids, options(Mode::kMemory, q, m, 1)), 1e-4, 1e-4));
}

// Without memory, segments of Q that also read the Q tokens before them are windows of 2Q
// scoring their last Q targets: segments mode with ext_len = Q equals sliding with L = 2Q,
// s = Q (N - 1 a multiple of Q, so the windows end where the segments do).
TEST(Evaluator, SegmentsWithExtLenQEqualSlidingWindowsOfTwoQ) {
  for (AttnType attn : {AttnType::kVanilla, AttnType::kXl}) {
    auto f = make(attn, 8 * 7 + 1);
    auto segments = options(Mode::kSegments, 8, 0, 1);
    segments.ext_len = 8;
    auto sliding = options(Mode::kSliding, 8, 0, 3);
    sliding.window = 16;
    sliding.stride = 8;
    EXPECT_TRUE(txl::test::tensor_near(losses_of(f.model, f.ids, segments),
                                       losses_of(f.model, f.ids, sliding), 1e-5, 1e-5))
        << attn;
  }
}

// Document mode: each document on its own (memory reset at its start, its first token never a
// target) is the sum of evaluating every document as a text of its own.
TEST(Evaluator, DocumentsEvaluateAsIfEachWereItsOwnText) {
  for (const auto& member : txl::test::memory_members()) {
    SCOPED_TRACE(member.name);
    auto f = make(member, 241);
    const std::vector<int64_t> starts = {0, 37, 50, 121, 130, 200};
    txl::data::EncodedSplit split = text(f.ids);
    split.doc_starts = torch::tensor(starts, torch::kInt64);
    for (auto o : {options(Mode::kMemory, 10, 10, 3), options(Mode::kSegments, 10, 0, 3)}) {
      SCOPED_TRACE(txl::config::to_string(o.mode));
      auto alone = o;
      alone.batch_size = 1;
      double sum = 0.0;
      int64_t tokens = 0;
      Extras keep;
      keep.token_losses = true;
      std::vector<torch::Tensor> each;  // every document's per-token losses, alone
      for (size_t d = 0; d < starts.size(); ++d) {
        const int64_t end = d + 1 < starts.size() ? starts[d + 1] : f.ids.size(0);
        auto r = evaluate(f.model, text(f.ids.narrow(0, starts[d], end - starts[d])), alone, keep);
        sum += r.loss * static_cast<double>(r.tokens);
        tokens += r.tokens;
        each.push_back(r.token_losses);
      }
      o.documents = true;
      const auto together = evaluate(f.model, split, o, keep);
      EXPECT_EQ(together.tokens, f.ids.size(0) - static_cast<int64_t>(starts.size()));
      EXPECT_EQ(together.tokens, tokens);
      EXPECT_NEAR(together.loss, sum / static_cast<double>(tokens), 1e-6 * together.loss);
      // Per-token losses come back in text order (rows read documents out of order), each
      // document's first token left out: the documents' own losses, one after another.
      EXPECT_TRUE(txl::test::tensor_near(together.token_losses, torch::cat(each), 1e-5, 1e-5));
      // The control: the concatenation in another order differs.
      std::vector<torch::Tensor> shuffled = {each[1], each[0]};
      for (size_t d = 2; d < each.size(); ++d) shuffled.push_back(each[d]);
      EXPECT_FALSE(txl::test::tensor_near(together.token_losses, torch::cat(shuffled), 1e-5, 1e-5));
      // The documents change the result (otherwise the comparison above proves little).
      auto plain = o;
      plain.documents = false;
      EXPECT_GT(std::abs(together.loss - evaluate(f.model, split, plain).loss), 1e-4);
    }
  }
}

TEST(Evaluator, DocumentModeRefusesWhatItCannotGive) {
  auto f = make(AttnType::kXl, 120);
  txl::data::EncodedSplit split = text(f.ids);
  split.doc_starts = torch::tensor({0, 50}, torch::kInt64);
  auto o = options(Mode::kSliding, 10, 0, 2);
  o.documents = true;
  TXL_EXPECT_THROW_WITH(evaluate(f.model, split, o), "data.document_mode");
  o = options(Mode::kMemory, 10, 10, 2);
  o.documents = true;
  Extras extras;
  extras.recall_mask = torch::ones({120}, torch::kBool);
  TXL_EXPECT_THROW_WITH(evaluate(f.model, split, o, extras), "recall");
  TXL_EXPECT_THROW_WITH(evaluate(f.model, text(f.ids), o), "no document starts");
}

// The scored prefix, one rounding for every caller: bytes and characters prorated by targets to
// the nearest, documents cut to the prefix; all of the text when max_tokens is 0 or too large.
TEST(Evaluator, ScoredPrefixProratesBytesToTheNearest) {
  txl::data::EncodedSplit split;
  split.ids = torch::arange(400, torch::kInt64);  // 399 targets
  split.n_bytes = 1000;                           // x 64 / 399 = 160.4
  split.n_chars = 999;                            // x 64 / 399 = 160.2
  split.doc_starts = torch::tensor({0, 10, 63, 64, 300}, torch::kInt64);
  const auto prefix = txl::eval::scored_prefix(split, 64);
  EXPECT_EQ(prefix.ids.numel(), 65);
  EXPECT_EQ(prefix.n_bytes, 160);
  EXPECT_EQ(prefix.n_chars, 160);
  EXPECT_TRUE(
      txl::test::tensor_equal(prefix.doc_starts, torch::tensor({0, 10, 63}, torch::kInt64)));
  split.n_bytes = 1001;  // x 64 / 399 = 160.56
  EXPECT_EQ(txl::eval::scored_prefix(split, 64).n_bytes, 161);
  for (int64_t all : {0, 399, 1000})
    EXPECT_EQ(txl::eval::scored_prefix(split, all).ids.numel(), 400);
  // The evaluator's bits per byte divide by the prefix's bytes.
  auto f = make(AttnType::kXl, 400);
  auto o = options(Mode::kSegments, 16, 0, 3);
  o.max_tokens = 64;
  const auto r = evaluate(f.model, text(f.ids, 1000), o);
  EXPECT_NEAR(r.bits_per_byte, r.loss * 64 / std::log(2.0) / 160, 1e-12);
}

// run.precision: bf16 runs the forward under bf16 autocast: close to fp32, not the same numbers.
TEST(Evaluator, Bf16RunsUnderAutocast) {
  auto f = make(AttnType::kXl, 150);
  auto o = options(Mode::kMemory, 16, 16, 3);
  const double fp32 = evaluate(f.model, text(f.ids), o).loss;
  o.bf16 = true;
  const double bf16 = evaluate(f.model, text(f.ids), o).loss;
  EXPECT_NE(bf16, fp32);
  EXPECT_NEAR(bf16, fp32, 0.02 * fp32);
}

TEST(Evaluator, RunsWhereTheModelIs) {
  auto f = make(AttnType::kXl, 50);
  auto o = options(Mode::kMemory, 8, 8, 1);
  o.device = torch::Device(torch::kCUDA, 0);
  TXL_EXPECT_THROW_WITH(evaluate(f.model, text(f.ids), o), "evaluation runs where the model is");
}

}  // namespace

namespace {

// One stream (batch 1) in memory mode: target t sits at position t mod Q of its segment, so the
// mean loss at position p is the mean of every Q-th token loss from p; the counts add up to the
// tokens, and the weighted means to the loss. Segments mode gives its own, larger first losses.
TEST(Evaluator, LossByPositionIsTheMeanOfEveryQthTokenLoss) {
  auto f = make(AttnType::kXl, 203);
  for (auto o : {options(Mode::kMemory, 16, 16, 1), options(Mode::kSegments, 16, 0, 1)}) {
    Extras extras;
    extras.token_losses = true;
    extras.by_position = true;
    const auto r = evaluate(f.model, text(f.ids), o, extras);
    ASSERT_EQ(r.loss_by_position.size(), 16u);
    std::int64_t tokens = 0;
    double sum = 0.0;
    for (std::int64_t p = 0; p < 16; ++p) {
      const auto every_qth =
          r.token_losses.slice(0, p, r.token_losses.size(0), 16).to(torch::kDouble);  // [~N / Q]
      EXPECT_EQ(r.tokens_by_position[p], every_qth.numel()) << p;
      EXPECT_NEAR(r.loss_by_position[p], every_qth.mean().item<double>(), 1e-6) << p;
      tokens += r.tokens_by_position[p];
      sum += r.loss_by_position[p] * static_cast<double>(r.tokens_by_position[p]);
    }
    EXPECT_EQ(tokens, r.tokens);
    EXPECT_NEAR(sum / static_cast<double>(tokens), r.loss, 1e-6);
  }
  Extras sliding;
  sliding.by_position = true;
  TXL_EXPECT_THROW_WITH(evaluate(f.model, text(f.ids), options(Mode::kSliding, 16, 0, 1), sliding),
                        "not sliding windows");
}

}  // namespace
