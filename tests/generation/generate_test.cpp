// generate(): greedy decoding is the argmax of the model's forward pass over the growing text,
// a batch gives what each prompt gives alone, seeded sampling repeats, and rows stop where they
// should. Tiny fp64 models, so that a difference is a bug, not rounding.
#include "txl/generation/generate.h"

#include <gtest/gtest.h>

#include "support/reference_decoding.h"
#include "support/test_support.h"
#include "support/tiny_experiment.h"

namespace txl::generation {
namespace {

using config::AttnType;

constexpr int64_t kVocab = 30;  // the tiny word tokenizer's

models::TransformerLM tiny_model(AttnType attn_type, int mem_len, uint64_t seed = 21) {
  config::ModelConfig c;
  c.attn_type = attn_type;
  c.n_layer = 2;
  c.d_model = 16;
  c.n_head = 2;
  c.d_head = 8;
  c.d_inner = 32;
  c.tgt_len = 6;
  c.mem_len = mem_len;
  c.max_rel_dist = 8;
  c.init_std = 0.3;  // sharp distributions: the argmax is far from ties
  c.proj_init_std = 0.3;
  torch::manual_seed(seed);
  models::TransformerLM model(c, kVocab);
  model->to(torch::kDouble);
  model->eval();
  return model;
}

GenerateOptions greedy(int64_t tgt_len, int64_t mem_len, int64_t max_new = 20) {
  GenerateOptions o;
  o.temperature = 0;
  o.max_new_tokens = max_new;
  o.lengths.tgt_len = tgt_len;
  o.lengths.mem_len = mem_len;
  return o;
}

std::vector<std::vector<int64_t>> random_prompts(const std::vector<int64_t>& lengths,
                                                 uint64_t seed) {
  torch::manual_seed(seed);
  std::vector<std::vector<int64_t>> prompts;
  for (auto n : lengths) {
    auto t = torch::randint(kVocab, {n}, torch::kLong);
    prompts.emplace_back(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + n);
  }
  return prompts;
}

// The ways of decoding the tests go through: memory shorter and longer than the text (the
// context and prompt), shaw, and a sliding window.
struct DecodingCase {
  const char* name;
  AttnType attn_type;
  int mem_len;
};
const DecodingCase kDecodingCases[] = {{"xl, memory shorter than the text", AttnType::kXl, 5},
                                       {"xl, memory longer than the text", AttnType::kXl, 64},
                                       {"shaw", AttnType::kShaw, 5},
                                       {"vanilla (window of tgt_len)", AttnType::kVanilla, 0}};

TEST(Generate, GreedyIsTheArgmaxOfTheForwardPassTokenByToken) {
  const auto prompts = random_prompts({8}, 1);
  for (const auto& c : kDecodingCases) {
    SCOPED_TRACE(c.name);
    auto model = tiny_model(c.attn_type, c.mem_len);
    const auto o = greedy(6, c.mem_len, 25);
    const auto r = generate(model, prompts, o);
    ASSERT_EQ(r.rows.size(), 1u);
    const auto& g = r.rows[0];
    ASSERT_EQ(g.tokens.size(), 25u);
    EXPECT_EQ(g.finish, "length");
    // The model's log-probabilities over prompt + continuation, all positions in one pass (one
    // long pass, or segments with memory / windows as the model reads them).
    auto text = prompts[0];
    text.insert(text.end(), g.tokens.begin(), g.tokens.end());
    const auto tokens = torch::tensor(text, torch::kLong).unsqueeze(0);  // [1, N]
    auto expected = c.mem_len >= 64 ? txl::test::one_pass_log_probs(model, tokens)
                                    : txl::test::reference_log_probs(model, tokens, o.lengths);
    double log_prob = 0;
    const int64_t p = static_cast<int64_t>(prompts[0].size());
    for (size_t i = 0; i < g.tokens.size(); ++i) {
      auto row = expected[0][p - 1 + static_cast<int64_t>(i)];  // [V]
      EXPECT_EQ(g.tokens[i], row.argmax().item<int64_t>()) << "token " << i;
      log_prob += row[g.tokens[i]].item<double>();
    }
    EXPECT_NEAR(g.log_prob, log_prob, 1e-9);
    EXPECT_EQ(r.new_tokens, 25);
    EXPECT_EQ(r.read_tokens, p);
  }
}

TEST(Generate, ABatchGivesWhatEachPromptGivesAlone) {
  for (auto attn_type : {AttnType::kXl, AttnType::kVanilla}) {
    SCOPED_TRACE(config::to_string(attn_type));
    const int mem_len = attn_type == AttnType::kXl ? 4 : 0;
    auto model = tiny_model(attn_type, mem_len);
    const auto prompts = random_prompts({1, 9, 4, 13, 2}, 2);
    auto o = greedy(6, mem_len, 15);
    o.eos_id = 3;  // rows stop at different steps and leave the batch
    o.batch_size = 5;
    const auto batch = generate(model, prompts, o);
    for (size_t i = 0; i < prompts.size(); ++i) {
      const auto alone = generate(model, {prompts[i]}, o).rows[0];
      EXPECT_EQ(batch.rows[i].tokens, alone.tokens) << "prompt " << i;
      EXPECT_NEAR(batch.rows[i].log_prob, alone.log_prob, 1e-9) << "prompt " << i;
      EXPECT_EQ(batch.rows[i].finish, alone.finish) << "prompt " << i;
    }
    // Keeping finished rows in the batch changes nothing but the work.
    o.drop_finished = false;
    const auto kept = generate(model, prompts, o);
    for (size_t i = 0; i < prompts.size(); ++i)
      EXPECT_EQ(kept.rows[i].tokens, batch.rows[i].tokens);
  }
}

// A context read once for every prompt gives what the context before each prompt gives: with
// memory shorter and longer than the context (xl), shaw, and a sliding window (vanilla), for
// batches of every size, an empty prompt, and rows that stop at different steps.
TEST(Generate, AContextReadOnceGivesWhatItGivesBeforeEachPrompt) {
  const auto context = random_prompts({17}, 4)[0];
  const auto prompts = random_prompts({3, 0, 8, 1}, 5);
  for (const auto& c : kDecodingCases) {
    SCOPED_TRACE(c.name);
    auto model = tiny_model(c.attn_type, c.mem_len);
    auto o = greedy(6, c.mem_len, 12);
    o.eos_id = 3;
    auto joined = prompts;
    for (auto& p : joined) p.insert(p.begin(), context.begin(), context.end());
    const auto expected = generate(model, joined, o);
    o.context = context;
    for (int64_t batch : {1, 4}) {
      o.batch_size = batch;
      const auto r = generate(model, prompts, o);
      for (size_t i = 0; i < prompts.size(); ++i) {
        EXPECT_EQ(r.rows[i].tokens, expected.rows[i].tokens)
            << "prompt " << i << ", batch " << batch;
        EXPECT_NEAR(r.rows[i].log_prob, expected.rows[i].log_prob, 1e-9) << "prompt " << i;
        EXPECT_EQ(r.rows[i].finish, expected.rows[i].finish) << "prompt " << i;
      }
      EXPECT_EQ(r.context_tokens, 17);
      if (c.mem_len > 0) {  // read once: only the prompts' tokens after it
        EXPECT_EQ(r.read_tokens, 3 + 0 + 8 + 1);
        EXPECT_TRUE(r.context_once);
        EXPECT_GT(r.context_seconds, 0.0);
      } else {  // the window reads its last tokens before each prompt
        EXPECT_FALSE(r.context_once);
        EXPECT_EQ(r.read_tokens, 4 * 17 + 3 + 0 + 8 + 1);
      }
    }
  }
  // An empty prompt needs a context; ids of the context are checked as a prompt's.
  auto model = tiny_model(AttnType::kXl, 4);
  auto o = greedy(6, 4, 3);
  TXL_EXPECT_THROW_WITH(generate(model, {{}}, o), "prompt 0 has no token");
  o.context = {1, kVocab};
  TXL_EXPECT_THROW_WITH(generate(model, {{1}}, o), "the context holds token id 30");
}

TEST(Generate, SeededSamplingRepeatsAndTopKOneIsGreedy) {
  auto model = tiny_model(AttnType::kXl, 6);
  const auto prompts = random_prompts({3, 7, 5}, 3);
  auto o = greedy(6, 6, 30);
  const auto argmax = generate(model, prompts, o);
  o.temperature = 1.0;
  o.seed = 42;
  const auto a = generate(model, prompts, o);
  const auto b = generate(model, prompts, o);
  o.batch_size = 1;  // the draws are per prompt: another batching draws the same
  const auto c = generate(model, prompts, o);
  o.seed = 43;
  const auto d = generate(model, prompts, o);
  int differs = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(a.rows[i].tokens, b.rows[i].tokens);
    EXPECT_EQ(a.rows[i].tokens, c.rows[i].tokens);
    differs += a.rows[i].tokens != d.rows[i].tokens;
    differs += a.rows[i].tokens != argmax.rows[i].tokens;
  }
  EXPECT_EQ(differs, 6);  // another seed, or no sampling, gives other texts
  o.top_k = 1;
  o.temperature = 0.7;
  const auto top1 = generate(model, prompts, o);
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(top1.rows[i].tokens, argmax.rows[i].tokens);
  o.top_k = 0;
  o.top_p = 1e-9;  // only the most probable token has mass >= p
  const auto nucleus = generate(model, prompts, o);
  for (size_t i = 0; i < prompts.size(); ++i)
    EXPECT_EQ(nucleus.rows[i].tokens, argmax.rows[i].tokens);
}

TEST(Generate, EosAndStopStringsEndARow) {
  auto model = tiny_model(AttnType::kXl, 6);
  const auto tokenizer = txl::test::word_tokenizer(kVocab);
  const auto prompts = random_prompts({4, 6}, 4);
  auto o = greedy(6, 6, 12);
  const auto free = generate(model, prompts, o, tokenizer.get());
  // <eos> = the fourth token of prompt 0: it stops there, <eos> included in the tokens only.
  o.eos_id = free.rows[0].tokens[3];
  const auto eos = generate(model, prompts, o, tokenizer.get());
  const auto first = std::find(free.rows[0].tokens.begin(), free.rows[0].tokens.end(), o.eos_id);
  const std::vector<int64_t> until(free.rows[0].tokens.begin(), first + 1);
  EXPECT_EQ(eos.rows[0].tokens, until);
  EXPECT_EQ(eos.rows[0].finish, "eos");
  EXPECT_EQ(eos.rows[0].text, tokenizer->decode({until.begin(), until.end() - 1}));
  // A stop string: the text ends before it.
  o.eos_id = -1;
  const std::string full = free.rows[1].text;
  // A word the row generates from its third token on (ids 0-2 are pad, <unk>, <eos>).
  size_t at = 2;
  while (at < free.rows[1].tokens.size() && free.rows[1].tokens[at] < 3) ++at;
  ASSERT_LT(at, free.rows[1].tokens.size()) << full;
  o.stop = {" " + tokenizer->piece(free.rows[1].tokens[at]) + " "};
  ASSERT_NE(full.find(o.stop[0]), std::string::npos) << full;
  const auto stop = generate(model, prompts, o, tokenizer.get());
  EXPECT_EQ(stop.rows[1].finish, "stop");
  EXPECT_EQ(stop.rows[1].text, full.substr(0, full.find(o.stop[0]))) << full;
  EXPECT_LE(stop.rows[1].tokens.size(), at + 2);
}

TEST(Generate, EdgeCasesHaveDefinedResults) {
  auto model = tiny_model(AttnType::kXl, 4);
  auto o = greedy(6, 4, 0);
  const auto none = generate(model, random_prompts({3, 2}, 5), o);
  ASSERT_EQ(none.rows.size(), 2u);
  EXPECT_TRUE(none.rows[0].tokens.empty());
  EXPECT_EQ(none.rows[0].finish, "length");
  EXPECT_TRUE(generate(model, {}, greedy(6, 4)).rows.empty());
  // A prompt far longer than the memory is read in segments.
  const auto long_prompt = generate(model, random_prompts({100}, 6), greedy(6, 4, 3));
  EXPECT_EQ(long_prompt.rows[0].tokens.size(), 3u);
  TXL_EXPECT_THROW_WITH(generate(model, {{}}, greedy(6, 4)), "prompt 0 has no token");
  TXL_EXPECT_THROW_WITH(generate(model, {{1, 30}}, greedy(6, 4)),
                        "token id 30 outside the model's vocabulary [0, 30)");
  o = greedy(6, 4);
  o.temperature = -1;
  TXL_EXPECT_THROW_WITH(generate(model, {{1}}, o), "temperature = -1 must be >= 0");
  o = greedy(6, 4);
  o.top_p = 1.5;
  TXL_EXPECT_THROW_WITH(generate(model, {{1}}, o), "top_p = 1.5 must be in (0, 1]");
  o = greedy(6, 4);
  o.stop = {"x"};
  TXL_EXPECT_THROW_WITH(generate(model, {{1}}, o), "stop strings need the tokenizer");
}

TEST(Generate, DrawsAreUniformAndIndependentOfTheBatch) {
  // The uniforms are a function of (seed, prompt, step): spread over [0, 1) and all different.
  std::vector<double> u;
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t s = 0; s < 250; ++s) u.push_back(draw_uniform(7, i, s));
  auto t = torch::tensor(u, torch::kDouble);
  EXPECT_GE(t.min().item<double>(), 0.0);
  EXPECT_LT(t.max().item<double>(), 1.0);
  EXPECT_NEAR(t.mean().item<double>(), 0.5, 0.03);
  auto sorted = std::get<0>(t.sort());
  EXPECT_TRUE(
      (sorted.narrow(0, 1, t.numel() - 1) > sorted.narrow(0, 0, t.numel() - 1)).all().item<bool>());
  EXPECT_EQ(draw_uniform(7, 2, 9), draw_uniform(7, 2, 9));
  EXPECT_NE(draw_uniform(7, 2, 9), draw_uniform(8, 2, 9));
}

}  // namespace
}  // namespace txl::generation
