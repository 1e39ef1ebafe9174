// Decoding at every CPU level this machine runs (util::KernelLevelScope: the same process, the
// same weights and tokens) gives the log-probabilities of the model's own forward in fp64, to
// fp32's precision (1e-4), at odd sizes (heads of 12 and 41, d_model 48 and 410, d_inner 96,
// vocabularies of 120 and 10,000), weights of std 0.02 and 0.3 with every bias non-zero, memory
// shorter and longer than the text, both norms and every attention type.
//
// Until 2026-12-06 the AVX-512 level added the output layer's bias twice: log_softmax_linear
// multiplied by packed panels that carry the bias and then added it again in the log-softmax
// (0d89bdf). The biases start at zero, so every decoding test, whose models were fresh, passed;
// trained models were 0.02-2 nats off. The control: a decoder whose output bias counts twice
// lands far outside the bound.
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "support/reference_decoding.h"
#include "txl/util/cpu.h"

namespace txl::test {
namespace {

using config::AttnType;

constexpr double kTolerance = 1e-4;  // fp32 against the fp64 forward, on log-probabilities

struct LevelCase {
  std::string name;
  AttnType attn_type;
  int d_model, n_head, d_head, d_inner, vocab;
  double std;
  int mem_len;  // 0: sliding window
  bool pre_norm = false;
  bool adaptive = false;  // adaptive softmax (cutoffs at a quarter and a half of the vocabulary)
};

const std::vector<LevelCase>& level_cases() {
  static const std::vector<LevelCase> kCases = {
      {"xl, widths of 16", AttnType::kXl, 64, 4, 16, 128, 128, 0.3, 6},
      {"xl, d_head 12", AttnType::kXl, 48, 4, 12, 128, 120, 0.3, 6},
      {"xl, d_inner 96, pre-norm", AttnType::kXl, 64, 4, 16, 96, 128, 0.3, 6, true},
      {"xl, the paper's heads of 41", AttnType::kXl, 410, 10, 41, 96, 120, 0.3, 6},
      {"xl, memory longer than the text", AttnType::kXl, 48, 4, 12, 96, 10000, 0.02, 64},
      {"xl, adaptive softmax", AttnType::kXl, 48, 2, 24, 96, 10000, 0.3, 6, false, true},
      {"shaw, d_head 41", AttnType::kShaw, 82, 2, 41, 96, 120, 0.3, 6, true},
      {"rope, d_head 12", AttnType::kRope, 48, 4, 12, 96, 120, 0.3, 64},
      {"alibi, pre-norm", AttnType::kAlibi, 48, 4, 12, 96, 10000, 0.02, 6, true},
      {"vanilla, sliding", AttnType::kVanilla, 48, 4, 12, 96, 120, 0.3, 0},
      {"vanilla_learned, sliding", AttnType::kVanillaLearned, 410, 10, 41, 96, 120, 0.3, 0},
      {"xl without memory, sliding", AttnType::kXl, 48, 4, 12, 96, 120, 0.3, 0, true},
  };
  return kCases;
}

config::ModelConfig config_of(const LevelCase& c) {
  config::ModelConfig config;
  config.attn_type = c.attn_type;
  config.n_layer = 2;
  config.d_model = c.d_model;
  config.n_head = c.n_head;
  config.d_head = c.d_head;
  config.d_inner = c.d_inner;
  config.tgt_len = 4;
  config.mem_len = c.mem_len;
  config.max_rel_dist = 32;
  config.max_positions = 64;
  config.pre_norm = c.pre_norm;
  config.allow_abs_with_memory = true;
  if (c.adaptive) {
    config.cutoffs = {c.vocab / 4, c.vocab / 2};
    config.div_val = 2;
  }
  return config;
}

// Every parameter drawn from N(0, std), biases and norms included (a fresh model's biases are
// zero, which hid the bias counted twice).
models::TransformerLM random_model(const LevelCase& c, uint64_t seed) {
  torch::manual_seed(seed);
  models::TransformerLM model(config_of(c), c.vocab);
  model->eval();
  torch::NoGradGuard no_grad;
  for (auto& p : model->parameters()) p.normal_(0, c.std);
  return model;
}

// The same weights in fp64.
models::TransformerLM exact_copy(const models::TransformerLM& model, const LevelCase& c) {
  models::TransformerLM exact(config_of(c), c.vocab);
  exact->to(torch::kDouble);
  exact->eval();
  torch::NoGradGuard no_grad;
  const auto from = model->named_parameters();
  for (auto& p : exact->named_parameters()) p.value().copy_(from[p.key()]);
  return exact;
}

// Each row's log-probabilities by the model's forward: [B, N - prompt + 1, V].
torch::Tensor forward_log_probs(models::TransformerLM& model, const torch::Tensor& tokens,
                                int64_t prompt, const generation::DecodeOptions& o) {
  std::vector<torch::Tensor> rows;
  for (int64_t r = 0; r < tokens.size(0); ++r) {
    auto all = reference_log_probs(model, tokens.narrow(0, r, 1), o);  // [1, N, V]
    rows.push_back(all.narrow(1, prompt - 1, tokens.size(1) - prompt + 1));
  }
  return torch::cat(rows, 0);
}

// The reference: the fp64 forward at the baseline level.
torch::Tensor expected_log_probs(models::TransformerLM& exact, const torch::Tensor& tokens,
                                 int64_t prompt, const generation::DecodeOptions& o) {
  util::KernelLevelScope baseline(util::CpuLevel::kBaseline);
  return forward_log_probs(exact, tokens, prompt, o);
}

// The output layer's biases, each added once more: what decoding computed before the fix.
void count_output_bias_twice(models::TransformerLM& model) {
  torch::NoGradGuard no_grad;
  for (auto& p : model->named_parameters()) {
    const auto& name = p.key();
    if (name.find("crit.") == 0 && name.size() >= 4 && name.substr(name.size() - 4) == "bias") {
      p.value().mul_(2);
    }
  }
}

double max_difference(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

TEST(CrossLevelDecoding, DecodingEqualsTheForwardAtEveryLevel) {
  constexpr int64_t kRows = 3, kLen = 24, kPrompt = 5;
  for (const auto& c : level_cases()) {
    SCOPED_TRACE(c.name);
    auto model = random_model(c, 21);
    auto exact = exact_copy(model, c);
    torch::manual_seed(22);
    const auto tokens = torch::randint(c.vocab, {kRows, kLen}, torch::kLong);  // [B, N]
    const generation::DecodeOptions o{4, c.mem_len, -1, false};
    const auto expected = expected_log_probs(exact, tokens, kPrompt, o);
    // The model's own fp32 forward is this far from fp64 (7e-5 at d_model 410 with weights of
    // std 0.3, 1e-6 elsewhere): decoding, also fp32, may add twice that to the bound.
    const double forward_error =
        max_difference(forward_log_probs(model, tokens, kPrompt, o), expected);
    const double bound = kTolerance + 2 * forward_error;
    for (auto level : util::levels_available()) {
      SCOPED_TRACE(std::string("level ") + util::to_string(level));
      util::KernelLevelScope scope(level);
      const double error = max_difference(decoded(model, tokens, kPrompt, o), expected);
      std::cout << c.name << ", " << util::to_string(level) << ": decoding " << error
                << " from the fp64 forward (the fp32 forward: " << forward_error << ")\n";
      EXPECT_LT(error, bound);
    }
  }
}

// The control: the bound sees the bug it was written for, at every level and both weight scales.
TEST(CrossLevelDecoding, ABiasCountedTwiceFailsTheBound) {
  constexpr int64_t kLen = 16, kPrompt = 5;
  for (const auto* name : {"xl, d_head 12", "xl, memory longer than the text"}) {
    SCOPED_TRACE(name);
    const auto& c = *std::find_if(level_cases().begin(), level_cases().end(),
                                  [&](const LevelCase& x) { return x.name == name; });
    auto model = random_model(c, 21);
    auto exact = exact_copy(model, c);
    count_output_bias_twice(model);
    torch::manual_seed(22);
    const auto tokens = torch::randint(c.vocab, {1, kLen}, torch::kLong);  // [1, N]
    const generation::DecodeOptions o{4, c.mem_len, -1, false};
    const auto expected = expected_log_probs(exact, tokens, kPrompt, o);
    for (auto level : util::levels_available()) {
      SCOPED_TRACE(std::string("level ") + util::to_string(level));
      util::KernelLevelScope scope(level);
      EXPECT_GT(max_difference(decoded(model, tokens, kPrompt, o), expected), 10 * kTolerance);
    }
  }
}

}  // namespace
}  // namespace txl::test
