// Incremental decoding gives, token by token, the log-probabilities of the model's own forward
// pass: memory mode those of evaluation in memory mode (segments of tgt_len, memory mem_len,
// which for a memory longer than the text is one long pass), sliding mode those of one forward
// over the last tgt_len tokens. fp64, so that any difference is a bug, not rounding.
#include "txl/generation/incremental.h"

#include <gtest/gtest.h>

#include <iostream>

#include "support/family.h"
#include "support/reference_decoding.h"
#include "support/test_support.h"
#include "support/tiny_model.h"

namespace txl::generation {
namespace {

using config::AttnType;
using txl::test::decoded;
using txl::test::tensor_near;

constexpr int64_t kVocab = 13;

config::ModelConfig tiny(AttnType attn_type, int tgt_len, int mem_len) {
  auto c = txl::test::tiny_model_config(attn_type, tgt_len, mem_len);
  c.dropatt = 0.0;
  c.allow_abs_with_memory = true;
  return c;
}

models::TransformerLM make(const config::ModelConfig& c, uint64_t seed) {
  torch::manual_seed(seed);
  models::TransformerLM model(c, kVocab);
  model->to(torch::kDouble);
  model->eval();
  return model;
}

torch::Tensor random_tokens(int64_t batch, int64_t len, uint64_t seed) {
  torch::manual_seed(seed);
  return torch::randint(kVocab, {batch, len}, torch::kLong);
}

struct Case {
  std::string name;
  AttnType attn_type;
  int mem_len;
  bool same_length = false;
  int clamp_len = -1;
  bool pre_norm = false;
  bool adaptive = false;     // adaptive input and softmax, untied u and v per layer
  bool zero_memory = false;  // rows start from mem_len zero vectors (model.mem_init: zeros)
};

// Layer norms with non-zero biases: a pre-norm layer's zero memory then has keys and values
// that are not zero (LN(0) = its bias), so a decoder that skipped them would differ.
void shift_layer_norms(models::TransformerLM& model, uint64_t seed) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(seed);
  for (auto layer : model->layer_list()) {
    for (auto* norm : {&layer->attn_norm, &layer->ff_norm}) (*norm)->bias.normal_(0, 0.5);
  }
}

TEST(IncrementalDecoder, EqualsTheModelsForwardTokenByToken) {
  const int q = 5;
  const std::vector<Case> cases = {
      {"xl, memory shorter than the text", AttnType::kXl, 4},
      {"xl, memory longer than the text", AttnType::kXl, 64},
      {"xl, memory of 2 segments", AttnType::kXl, 10},
      {"xl, same_length", AttnType::kXl, 6, true},
      {"xl, clamp_len", AttnType::kXl, 7, false, 3},
      {"xl, pre_norm", AttnType::kXl, 4, false, -1, true},
      {"xl, adaptive softmax, untie_r", AttnType::kXl, 4, false, -1, false, true},
      {"shaw", AttnType::kShaw, 7},
      {"xl without memory: sliding", AttnType::kXl, 0},
      {"vanilla: sliding", AttnType::kVanilla, 0},
      {"vanilla_learned: sliding", AttnType::kVanillaLearned, 0},
      {"xl, zero memory", AttnType::kXl, 4, false, -1, false, false, true},
      {"xl, zero memory longer than a segment", AttnType::kXl, 12, false, -1, false, false, true},
      {"xl, zero memory, same_length", AttnType::kXl, 6, true, -1, false, false, true},
      {"xl, zero memory, pre_norm", AttnType::kXl, 4, false, -1, true, false, true},
      {"shaw, zero memory", AttnType::kShaw, 7, false, -1, false, false, true},
      {"rope", AttnType::kRope, 4},
      {"rope, memory of 2 segments, pre_norm", AttnType::kRope, 10, false, -1, true},
      {"rope, same_length, zero memory", AttnType::kRope, 6, true, -1, true, false, true},
      {"rope without memory: sliding", AttnType::kRope, 0},
      {"alibi", AttnType::kAlibi, 4},
      {"alibi, clamp_len, adaptive softmax", AttnType::kAlibi, 7, false, 3, false, true},
      {"alibi, memory longer than the text", AttnType::kAlibi, 64},
      {"alibi, zero memory, pre_norm", AttnType::kAlibi, 4, false, -1, true, false, true},
      {"t5", AttnType::kT5, 4},
      {"t5, clamp_len, zero memory, pre_norm", AttnType::kT5, 9, false, 5, true, false, true},
      {"t5, memory longer than the text", AttnType::kT5, 64},
  };
  const auto tokens = random_tokens(1, 31, 3);
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto config = tiny(c.attn_type, q, c.mem_len);
    config.pre_norm = c.pre_norm;
    if (c.adaptive) {
      config.cutoffs = {4, 9};
      config.div_val = 2;
      config.untie_r = true;
    }
    auto model = make(config, 11);
    shift_layer_norms(model, 19);
    DecodeOptions o{q, c.mem_len, c.clamp_len, c.same_length, c.zero_memory};
    auto expected = txl::test::reference_log_probs(model, tokens, o);
    if (c.zero_memory) {
      // The zeros change what the model gives: a decoder that ignored them would fail.
      DecodeOptions empty = o;
      empty.zero_memory = false;
      ASSERT_FALSE(
          tensor_near(expected, txl::test::reference_log_probs(model, tokens, empty), 1e-6, 1e-6));
    }
    if (c.mem_len >= tokens.size(1)) {
      // A memory longer than the text is one long pass.
      ASSERT_TRUE(
          tensor_near(expected, txl::test::one_pass_log_probs(model, tokens), 1e-10, 1e-10));
    }
    for (int64_t prompt : {1, 3, 7, 12}) {
      SCOPED_TRACE("prompt of " + std::to_string(prompt));
      auto got = decoded(model, tokens, prompt, o);
      EXPECT_TRUE(tensor_near(got, expected.narrow(1, prompt - 1, tokens.size(1) - prompt + 1),
                              1e-10, 1e-10));
    }
  }
}

// Rows of different prompt lengths, left-padded into one batch, each give what they give alone,
// also after rows leave the batch. Segments of one token (tgt_len 1) read even the padded prompt
// one query per row, as a generated token is read.
TEST(IncrementalDecoder, LeftPaddedRowsEqualRowsAlone) {
  for (int tgt_len : {5, 1}) {
    for (auto [attn_type, zero_memory] :
         std::vector<std::pair<AttnType, bool>>{{AttnType::kXl, false},
                                                {AttnType::kXl, true},
                                                {AttnType::kShaw, false},
                                                {AttnType::kShaw, true},
                                                {AttnType::kVanilla, false},
                                                {AttnType::kRope, false},
                                                {AttnType::kRope, true},
                                                {AttnType::kAlibi, false},
                                                {AttnType::kAlibi, true}}) {
      SCOPED_TRACE(config::to_string(attn_type) + (zero_memory ? ", zero memory" : "") +
                   ", tgt_len " + std::to_string(tgt_len));
      const int mem_len = attn_type == AttnType::kVanilla ? 0 : 4;
      auto config = tiny(attn_type, tgt_len, mem_len);
      config.pre_norm = zero_memory;  // zero memory's keys and values are then not zero
      auto model = make(config, 12);
      shift_layer_norms(model, 20);
      DecodeOptions o{tgt_len, mem_len, -1, false, zero_memory};
      const auto text = random_tokens(3, 20, 4);
      const std::vector<int64_t> prompt_len = {9, 2, 6};
      const int64_t longest = 9, steps = 8;
      auto padded = torch::zeros({3, longest}, torch::kLong);
      auto real = torch::zeros({3, longest}, torch::kBool);
      for (int64_t b = 0; b < 3; ++b) {
        const int64_t pad = longest - prompt_len[b];
        padded[b].narrow(0, pad, prompt_len[b]).copy_(text[b].narrow(0, 0, prompt_len[b]));
        real[b].narrow(0, pad, prompt_len[b]).fill_(true);
      }
      std::vector<torch::Tensor> alone;  // [1, steps + 1, V] each
      for (int64_t b = 0; b < 3; ++b) {
        alone.push_back(decoded(model, text[b].narrow(0, 0, prompt_len[b] + steps).unsqueeze(0),
                                prompt_len[b], o));
      }
      IncrementalDecoder decoder(model, o, 3);
      auto lp = decoder.read(padded, real);  // [3, V]
      std::vector<int64_t> rows = {0, 1, 2};
      for (int64_t s = 0; s <= steps; ++s) {
        for (size_t i = 0; i < rows.size(); ++i) {
          EXPECT_TRUE(tensor_near(lp[i], alone[rows[i]][0][s], 1e-10, 1e-10))
              << "row " << rows[i] << " step " << s;
        }
        if (s == steps) break;
        if (s == 3) {  // row 1 leaves
          decoder.keep_rows(torch::tensor(std::vector<int64_t>{0, 2}));
          rows = {0, 2};
        }
        auto next = torch::empty({static_cast<int64_t>(rows.size()), 1}, torch::kLong);
        for (size_t i = 0; i < rows.size(); ++i)
          next[i][0] = text[rows[i]][prompt_len[rows[i]] + s];
        lp = decoder.read(next);
      }
    }
  }
}

// The segment mode (memory tokens, compressive memory): token by token it gives evaluation's
// log-probabilities in memory mode (which differ from a model without its memory: the check can
// fail), and rows left-padded in a batch, leaving it (mid-segment, from a batch of one prompt
// length too), or read after a context copied and stacked give what they give alone.
TEST(IncrementalDecoder, MemoryTokensAndCompressiveMemoryDecodeSegmentBySegment) {
  struct Member {
    std::string name;
    AttnType attn_type;
    int mem_len, mem_tokens, cmem_len;
    bool zero_memory = false, same_length = false;
    int clamp_len = -1;
    bool pre_norm = false;
    int knn_layer = 0;  // a kNN memory in that layer (top 2 of 8 stored positions)
  };
  const std::vector<Member> members = {
      {"xl, memory tokens alone", AttnType::kXl, 0, 2, 0},
      {"alibi, memory tokens and memory", AttnType::kAlibi, 4, 2, 0},
      {"rope, compressive", AttnType::kRope, 4, 0, 3},
      {"xl, compressive, zero memory", AttnType::kXl, 4, 0, 3, true},
      {"xl, compressive and memory tokens, same_length", AttnType::kXl, 4, 2, 3, false, true},
      {"shaw, compressive, clamp_len 2, pre-norm", AttnType::kShaw, 4, 0, 3, false, false, 2, true},
      {"xl, knn memory", AttnType::kXl, 4, 0, 0, false, false, -1, false, 2},
      {"rope, knn memory and memory tokens, no memory", AttnType::kRope, 0, 2, 0, false, false, -1,
       false, 1}};
  const int q = 5;
  for (const auto& m : members) {
    SCOPED_TRACE(m.name);
    auto config = tiny(m.attn_type, q, m.mem_len);
    config.mem_tokens = m.mem_tokens;
    config.cmem_len = m.cmem_len;
    config.cmem_rate = 2;
    config.cmem_compress = config::Compression::kConv;
    config.pre_norm = m.pre_norm;
    config.knn_layer = m.knn_layer;
    config.knn_topk = 2;
    config.knn_size = 8;
    auto model = make(config, 21);
    DecodeOptions o{q, m.mem_len, m.clamp_len, m.same_length, m.zero_memory};
    ASSERT_TRUE(prepare_decoder(model, o).segments);
    const auto text = random_tokens(3, 26, 6);
    const auto expected = txl::test::reference_log_probs(model, text.narrow(0, 0, 1), o);
    ASSERT_FALSE(tensor_near(
        expected, txl::test::windowed_log_probs(model, text.narrow(0, 0, 1), q), 1e-6, 1e-6));
    for (int64_t prompt : {1, 7, 12}) {
      EXPECT_TRUE(tensor_near(decoded(model, text.narrow(0, 0, 1), prompt, o),
                              expected.narrow(1, prompt - 1, 26 - prompt + 1), 1e-10, 1e-10))
          << "prompt of " << prompt;
    }
    // Rows of prompts 9, 2 and 6 left-padded; row 1 leaves after 3 steps.
    const std::vector<int64_t> prompt_len = {9, 2, 6};
    const int64_t steps = 8;
    auto padded = torch::zeros({3, 9}, torch::kLong);
    auto real = torch::zeros({3, 9}, torch::kBool);
    std::vector<torch::Tensor> alone;  // [1, steps + 1, V] each
    for (int64_t b = 0; b < 3; ++b) {
      padded[b]
          .narrow(0, 9 - prompt_len[b], prompt_len[b])
          .copy_(text[b].narrow(0, 0, prompt_len[b]));
      real[b].narrow(0, 9 - prompt_len[b], prompt_len[b]).fill_(true);
      alone.push_back(decoded(model, text[b].narrow(0, 0, prompt_len[b] + steps).unsqueeze(0),
                              prompt_len[b], o));
    }
    IncrementalDecoder decoder(model, o, 3);
    auto lp = decoder.read(padded, real);  // [3, V]
    std::vector<int64_t> rows = {0, 1, 2};
    for (int64_t s = 0;; ++s) {
      for (size_t i = 0; i < rows.size(); ++i)
        EXPECT_TRUE(tensor_near(lp[i], alone[rows[i]][0][s], 1e-10, 1e-10)) << rows[i] << " " << s;
      if (s == steps) break;
      if (s == 3) {
        decoder.keep_rows(torch::tensor(std::vector<int64_t>{0, 2}));
        rows = {0, 2};
      }
      auto next = torch::empty({static_cast<int64_t>(rows.size()), 1}, torch::kLong);
      for (size_t i = 0; i < rows.size(); ++i) next[i][0] = text[rows[i]][prompt_len[rows[i]] + s];
      lp = decoder.read(next);
    }
    // Row 0's first 6 tokens read once, copied, each copy reading on: rows 0 and 0 again.
    IncrementalDecoder primed(model, o, 1);
    primed.read(text.narrow(0, 0, 1).narrow(1, 0, 6));
    std::vector<IncrementalDecoder> parts = {primed.clone(), primed.clone()};
    parts[0].read(text.narrow(0, 0, 1).narrow(1, 6, 2));
    parts[1].read(text.narrow(0, 0, 1).narrow(1, 6, 1));
    auto stacked = IncrementalDecoder::stack(parts);
    auto both = stacked.read(torch::stack({text[0].narrow(0, 8, 1), text[0].narrow(0, 7, 1)}));
    EXPECT_TRUE(tensor_near(both[0], expected[0][8], 1e-10, 1e-10));
    EXPECT_TRUE(tensor_near(both[1], expected[0][7], 1e-10, 1e-10));
    // Copies that read as much run as one batch after the stack.
    std::vector<IncrementalDecoder> even = {primed.clone(), primed.clone()};
    for (auto& part : even) part.read(text.narrow(0, 0, 1).narrow(1, 6, 1));
    auto one = IncrementalDecoder::stack(even);
    auto twice = one.read(torch::stack({text[0].narrow(0, 7, 1), text[0].narrow(0, 7, 1)}));
    EXPECT_TRUE(tensor_near(twice[0], expected[0][7], 1e-10, 1e-10));
    EXPECT_TRUE(tensor_near(twice[1], expected[0][7], 1e-10, 1e-10));
    // Three rows of one prompt length (one batch); row 1 leaves in the middle of a segment.
    IncrementalDecoder group(model, o, 3);
    auto glp = group.read(text.narrow(1, 0, 7));  // [3, V]
    std::vector<torch::Tensor> solo;              // [1, 7, V] each
    for (int64_t b = 0; b < 3; ++b) {
      solo.push_back(decoded(model, text[b].narrow(0, 0, 13).unsqueeze(0), 7, o));
    }
    rows = {0, 1, 2};
    for (int64_t s = 0;; ++s) {
      for (size_t i = 0; i < rows.size(); ++i)
        EXPECT_TRUE(tensor_near(glp[i], solo[rows[i]][0][s], 1e-10, 1e-10)) << rows[i] << " " << s;
      if (s == 6) break;
      if (s == 1) {
        group.keep_rows(torch::tensor(std::vector<int64_t>{0, 2}));
        rows = {0, 2};
      }
      auto next = torch::empty({static_cast<int64_t>(rows.size()), 1}, torch::kLong);
      for (size_t i = 0; i < rows.size(); ++i) next[i][0] = text[rows[i]][7 + s];
      glp = group.read(next);
    }
  }
}

// The buffer never grows: a long generation compacts it in place.
TEST(IncrementalDecoder, TheKeyValueBufferHasAFixedCapacity) {
  auto model = make(tiny(AttnType::kXl, 4, 6), 13);
  DecodeOptions o{4, 6, -1, false};
  IncrementalDecoder decoder(model, o, 2);
  EXPECT_EQ(decoder.capacity(), 6 + 2 * 4);
  EXPECT_FALSE(decoder.sliding());
  const auto tokens = random_tokens(2, 60, 5);
  const auto expected = txl::test::segmented_log_probs(model, tokens.narrow(0, 1, 1), o);
  decoder.read(tokens.narrow(1, 0, 1));
  for (int64_t t = 1; t < 60; ++t) {
    auto lp = decoder.read(tokens.narrow(1, t, 1));  // [2, V]
    ASSERT_TRUE(tensor_near(lp[1], expected[0][t], 1e-10, 1e-10)) << t;
  }
  EXPECT_EQ(decoder.steps(), 60);
}

// Decoders made from one preparation of the weights share only the weights: interleaved, each
// gives exactly what a decoder made alone gives.
TEST(IncrementalDecoder, DecodersFromOnePreparationAreIndependent) {
  for (auto attn_type : {AttnType::kXl, AttnType::kVanilla}) {
    SCOPED_TRACE(config::to_string(attn_type));
    const int mem_len = attn_type == AttnType::kVanilla ? 0 : 4;
    auto model = make(tiny(attn_type, 5, mem_len), 15);
    DecodeOptions o{5, mem_len, -1, false};
    const auto tokens = random_tokens(3, 14, 6);
    const auto weights = prepare_decoder(model, o);
    IncrementalDecoder one(weights, 1), two(weights, 2);
    const auto alone_one = decoded(model, tokens.narrow(0, 0, 1), 3, o);  // [1, 12, V]
    const auto alone_two = decoded(model, tokens.narrow(0, 1, 2), 3, o);  // [2, 12, V]
    auto a = one.read(tokens.narrow(0, 0, 1).narrow(1, 0, 3));            // [1, V]
    auto b = two.read(tokens.narrow(0, 1, 2).narrow(1, 0, 3));            // [2, V]
    for (int64_t t = 3;; ++t) {
      EXPECT_TRUE(torch::equal(a, alone_one.select(1, t - 3))) << t;
      EXPECT_TRUE(torch::equal(b, alone_two.select(1, t - 3))) << t;
      if (t == tokens.size(1)) break;
      a = one.read(tokens.narrow(0, 0, 1).narrow(1, t, 1));
      b = two.read(tokens.narrow(0, 1, 2).narrow(1, t, 1));
    }
  }
}

// A context read once, copied per row, each copy reading a prompt of its own length, the copies
// stacked: each row gives, step by step, what the context and its prompt give read alone, and
// the original copy reads on unchanged.
TEST(IncrementalDecoder, ClonedAndStackedRowsEqualRowsAlone) {
  for (auto attn_type : txl::test::memory_attn_types()) {
    for (auto [same_length, zero_memory] : {std::pair{false, false}, std::pair{true, false},
                                            std::pair{false, true}, std::pair{true, true}}) {
      SCOPED_TRACE(config::to_string(attn_type) + (same_length ? ", same_length" : "") +
                   (zero_memory ? ", zero memory" : ""));
      auto model = make(tiny(attn_type, 5, 4), 17);
      DecodeOptions o{5, 4, -1, same_length, zero_memory};
      const int64_t context = 12, steps = 9;
      const std::vector<int64_t> prompt_len = {3, 0, 7};  // the second row: the context alone
      const auto text = random_tokens(3, context + 7 + steps, 8);
      for (int64_t b = 1; b < 3; ++b)
        text[b].narrow(0, 0, context).copy_(text[0].narrow(0, 0, context));
      const auto weights = prepare_decoder(model, o);
      IncrementalDecoder primed(weights, 1);
      const auto after_context = primed.read(text.narrow(0, 0, 1).narrow(1, 0, context));  // [1, V]
      std::vector<IncrementalDecoder> parts;
      std::vector<torch::Tensor> alone, first;  // [1, steps + 1, V]; [1, V]
      for (int64_t b = 0; b < 3; ++b) {
        const int64_t n = context + prompt_len[b];
        alone.push_back(decoded(model, text[b].narrow(0, 0, n + steps).unsqueeze(0), n, o));
        parts.push_back(primed.clone());
        first.push_back(
            prompt_len[b] == 0
                ? after_context
                : parts.back().read(text[b].narrow(0, context, prompt_len[b]).unsqueeze(0)));
      }
      auto decoder = IncrementalDecoder::stack(parts);
      ASSERT_EQ(decoder.rows(), 3);
      auto lp = torch::cat(first, 0);  // [3, V]
      for (int64_t s = 0;; ++s) {
        for (int64_t b = 0; b < 3; ++b) {
          EXPECT_TRUE(tensor_near(lp[b], alone[b][0][s], 1e-10, 1e-10))
              << "row " << b << " step " << s;
        }
        if (s == steps) break;
        auto next = torch::empty({3, 1}, torch::kLong);
        for (int64_t b = 0; b < 3; ++b) next[b][0] = text[b][context + prompt_len[b] + s];
        lp = decoder.read(next);
      }
      // The primed decoder was only copied: it reads row 1's continuation as before.
      EXPECT_TRUE(tensor_near(primed.read(text.narrow(0, 1, 1).narrow(1, context, 1)),
                              alone[1][0][1].unsqueeze(0), 1e-10, 1e-10));
    }
  }
}

TEST(IncrementalDecoder, StackRefusesWhatItCannotAlign) {
  auto model = make(tiny(AttnType::kXl, 4, 4), 18);
  DecodeOptions o{4, 4, -1, false};
  const auto tokens = random_tokens(1, 3, 9);
  IncrementalDecoder read(model, o, 1), unread(model, o, 1),
      other(model, DecodeOptions{4, 5, -1, false}, 1);
  read.read(tokens);
  other.read(tokens);
  TXL_EXPECT_THROW_WITH(IncrementalDecoder::stack({}), "at least one decoder");
  TXL_EXPECT_THROW_WITH(IncrementalDecoder::stack({read, unread}), "have read a token");
  TXL_EXPECT_THROW_WITH(IncrementalDecoder::stack({read, other}), "one set of lengths");
  IncrementalDecoder window(model, DecodeOptions{4, 0, -1, false}, 1);
  window.read(tokens);
  TXL_EXPECT_THROW_WITH(IncrementalDecoder::stack({window}), "memory decoders");
}

// More rows than the packed products take (64): every product and the vocabulary step through
// LibTorch's, and the same log-probabilities.
TEST(IncrementalDecoder, ManyRowsEqualTheModelsForward) {
  auto model = make(tiny(AttnType::kXl, 4, 6), 16);
  DecodeOptions o{4, 6, -1, false};
  const int64_t rows = 70;
  const auto tokens = random_tokens(rows, 12, 7);
  IncrementalDecoder decoder(model, o, rows);
  const auto expected = txl::test::segmented_log_probs(model, tokens.narrow(0, 69, 1), o);
  auto lp = decoder.read(tokens.narrow(1, 0, 5));  // [70, V]
  for (int64_t t = 5;; ++t) {
    ASSERT_TRUE(tensor_near(lp[69], expected[0][t - 1], 1e-10, 1e-10)) << t;
    if (t == tokens.size(1)) break;
    lp = decoder.read(tokens.narrow(1, t, 1));
  }
}

// At the sizes users run, in fp32: d_model 256, heads of 64, a vocabulary of 10,000, every
// attention type, memory shorter and longer than a segment (txl::test::sized_decoding_cases).
// Decoding equals the fp64 forward of the same weights to what fp32 allows, and a row of a
// left-padded batch of 16 equals the row alone to the same bound: not bit for bit, because a
// product's summation order depends on its number of rows (one row goes through a
// matrix-vector product, 16 through a matrix product). The control: the decoder with another
// memory length misses the bound by far. models/gpu_decoding_test runs the same on CUDA.
TEST(IncrementalDecoder, Fp32AtUsersSizesEqualsTheFp64Forward) {
  txl::test::expect_sized_decoding(torch::kCPU, "[ fp32     ] ");
}

TEST(IncrementalDecoder, BadInputsAreClearErrors) {
  auto model = make(tiny(AttnType::kXl, 4, 4), 14);
  DecodeOptions o{4, 4, -1, false};
  TXL_EXPECT_THROW_WITH(IncrementalDecoder(model, DecodeOptions{0, 4, -1, false}, 1),
                        "tgt_len = 0 must be >= 1");
  IncrementalDecoder decoder(model, o, 2);
  TXL_EXPECT_THROW_WITH(decoder.read(torch::zeros({3, 2}, torch::kLong)),
                        "tokens must be int64 [B = 2, T >= 1]");
  auto real = torch::tensor({true, false, true, true}).view({2, 2});
  TXL_EXPECT_THROW_WITH(decoder.read(torch::zeros({2, 2}, torch::kLong), real),
                        "padding goes before a row's first token");
  TXL_EXPECT_THROW_WITH(IncrementalDecoder(DecoderWeights{}, 1), "not prepared");
  TXL_EXPECT_THROW_WITH(IncrementalDecoder(prepare_decoder(model, o), 0), "rows = 0");
  model->train();
  TXL_EXPECT_THROW_WITH(IncrementalDecoder(model, o, 1), "evaluation mode");
  TXL_EXPECT_THROW_WITH(prepare_decoder(model, o), "evaluation mode");
}

}  // namespace
}  // namespace txl::generation
