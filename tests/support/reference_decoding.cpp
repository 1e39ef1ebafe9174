#include "support/reference_decoding.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <vector>

namespace txl::test {

torch::Tensor segmented_log_probs(models::TransformerLM& model, const torch::Tensor& tokens,
                                  const generation::DecodeOptions& o) {
  torch::NoGradGuard no_grad;
  models::Lookback ctx;
  ctx.mem_len = o.mem_len;
  ctx.clamp_len = o.clamp_len;
  ctx.same_length = o.same_length;
  ctx.zero_memory = o.zero_memory;
  models::Memory memory;
  std::vector<torch::Tensor> out;
  for (int64_t b = 0; b < tokens.size(1); b += o.tgt_len) {
    models::Inputs in;
    in.tokens = tokens.narrow(1, b, std::min(o.tgt_len, tokens.size(1) - b));  // [1, Q]
    auto r = model->forward(in, memory, ctx, /*want_logits=*/true);
    memory = r.memory;
    out.push_back(r.logits);  // [1, Q, V]
  }
  return torch::cat(out, 1);  // [1, N, V]
}

torch::Tensor windowed_log_probs(models::TransformerLM& model, const torch::Tensor& tokens,
                                 int64_t window, int64_t clamp_len) {
  torch::NoGradGuard no_grad;
  models::Lookback ctx;
  ctx.clamp_len = clamp_len;
  std::vector<torch::Tensor> out;
  for (int64_t t = 0; t < tokens.size(1); ++t) {
    const int64_t begin = std::max<int64_t>(0, t + 1 - window);
    models::Inputs in;
    in.tokens = tokens.narrow(1, begin, t + 1 - begin);  // [1, <= window]
    out.push_back(model->forward(in, {}, ctx, true).logits.narrow(1, t - begin, 1));  // [1, 1, V]
  }
  return torch::cat(out, 1);  // [1, N, V]
}

torch::Tensor one_pass_log_probs(models::TransformerLM& model, const torch::Tensor& tokens) {
  torch::NoGradGuard no_grad;
  models::Inputs in;
  in.tokens = tokens;
  return model->forward(in, {}, models::Lookback{}, true).logits;  // [1, N, V]
}

torch::Tensor reference_log_probs(models::TransformerLM& model, const torch::Tensor& tokens,
                                  const generation::DecodeOptions& o) {
  // A model that carries no state from segment to segment slides a window; memory tokens and a
  // kNN store carry state without memory positions.
  const bool sliding = models::memory_state_rows(model->config(), o.mem_len) == 0 ||
                       config::uses_absolute_positions(model->config().attn_type);
  return sliding ? windowed_log_probs(model, tokens, o.tgt_len, o.clamp_len)
                 : segmented_log_probs(model, tokens, o);
}

torch::Tensor decoded(models::TransformerLM& model, const torch::Tensor& tokens, int64_t prompt_len,
                      const generation::DecodeOptions& o) {
  generation::IncrementalDecoder decoder(model, o, tokens.size(0));
  std::vector<torch::Tensor> out{decoder.read(tokens.narrow(1, 0, prompt_len)).unsqueeze(1)};
  for (int64_t t = prompt_len; t < tokens.size(1); ++t)
    out.push_back(decoder.read(tokens.narrow(1, t, 1)).unsqueeze(1));
  return torch::cat(out, 1).to(torch::kCPU);  // [B, N - prompt_len + 1, V]
}

const std::vector<SizedDecodingCase>& sized_decoding_cases() {
  static const std::vector<SizedDecodingCase> cases = {
      {"xl, memory shorter than a segment", config::AttnType::kXl, 8},
      {"xl, memory longer than a segment", config::AttnType::kXl, 40},
      {"xl, adaptive softmax", config::AttnType::kXl, 24, true},
      {"shaw", config::AttnType::kShaw, 24},
      {"vanilla", config::AttnType::kVanilla, 0},
      {"vanilla_learned", config::AttnType::kVanillaLearned, 0},
      {"rope, memory longer than a segment", config::AttnType::kRope, 24},
      {"alibi, memory shorter than a segment", config::AttnType::kAlibi, 8},
      {"xl, compressive memory", config::AttnType::kXl, 8, false, 6},
      {"xl, memory tokens and memory", config::AttnType::kXl, 8, false, 0, 4},
      {"rope, memory tokens alone", config::AttnType::kRope, 0, false, 0, 4},
  };
  return cases;
}

namespace {

double max_difference(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kCPU) - b.to(torch::kCPU)).abs().max().item<double>();
}

}  // namespace

SizedDecodingErrors sized_decoding_errors(const SizedDecodingCase& c, const torch::Device& device) {
  constexpr int64_t kBigVocab = 10000, kRows = 16, kLen = 56, kPrompt = 21, kTgt = 16;
  config::ModelConfig config;
  config.attn_type = c.attn_type;
  config.n_layer = 2;
  config.d_model = 256;
  config.n_head = 4;
  config.d_head = 64;
  config.d_inner = 512;
  config.tgt_len = kTgt;
  config.mem_len = c.mem_len;
  config.max_rel_dist = 32;
  config.max_positions = 64;
  config.init_std = 0.05;  // outputs far from uniform: log-probabilities spread over 6 nats
  config.allow_abs_with_memory = true;
  config.cmem_len = c.cmem_len;
  config.cmem_rate = 2;
  config.cmem_compress = config::Compression::kConv;
  config.mem_tokens = c.mem_tokens;
  if (c.adaptive) {
    config.cutoffs = {1000, 4000};
    config.div_val = 2;
  }
  torch::manual_seed(21);
  models::TransformerLM model(config, kBigVocab);
  model->eval();
  torch::manual_seed(22);
  const auto text = torch::randint(kBigVocab, {kRows, kLen}, torch::kLong);  // [16, N]
  const generation::DecodeOptions o{kTgt, c.mem_len, -1, false};
  // The exact values: the fp64 forward on the CPU of a copy with the same weights.
  models::TransformerLM exact(config, kBigVocab);
  exact->to(torch::kDouble);
  exact->eval();
  {
    torch::NoGradGuard no_grad;
    auto from = model->named_parameters();
    for (auto& p : exact->named_parameters()) p.value().copy_(from[p.key()]);
  }
  model->to(device);
  const auto expected = reference_log_probs(exact, text.narrow(0, 0, 1), o)
                            .narrow(1, kPrompt - 1, kLen - kPrompt + 1)
                            .to(torch::kFloat);  // [1, steps + 1, V]
  SizedDecodingErrors e;
  e.spread = expected.std(2).min().item<double>();
  const auto alone = decoded(model, text.narrow(0, 0, 1), kPrompt, o);  // [1, steps + 1, V]
  e.alone = max_difference(alone, expected);
  // Row 0 in a batch of 16 whose other rows have longer prompts (left padding before row 0).
  generation::IncrementalDecoder batch(model, o, kRows);
  e.device = batch.weights().slots.device();
  const int64_t longest = kPrompt + kRows - 1;
  auto padded = torch::zeros({kRows, longest}, torch::kLong);
  auto real = torch::zeros({kRows, longest}, torch::kBool);
  for (int64_t b = 0; b < kRows; ++b) {
    padded[b]
        .narrow(0, longest - kPrompt - b, kPrompt + b)
        .copy_(text[b].narrow(0, 0, kPrompt + b));
    real[b].narrow(0, longest - kPrompt - b, kPrompt + b).fill_(true);
  }
  auto lp = batch.read(padded.to(device), real.to(device));  // [16, V]
  e.batch = max_difference(lp[0], alone[0][0]);
  for (int64_t t = kPrompt; t < kLen - kRows + 1; ++t) {
    auto next = torch::empty({kRows, 1}, torch::kLong);
    for (int64_t b = 0; b < kRows; ++b) next[b][0] = text[b][t + b];
    lp = batch.read(next.to(device));
    e.batch = std::max(e.batch, max_difference(lp[0], alone[0][t - kPrompt + 1]));
  }
  // The control: one more memory row (or a window one longer) is another computation.
  generation::DecodeOptions other = o;
  (c.mem_len > 0 ? other.mem_len : other.tgt_len) += 1;
  e.control = max_difference(decoded(model, text.narrow(0, 0, 1), kPrompt, other), expected);
  return e;
}

void expect_sized_decoding(const torch::Device& device, const std::string& tag) {
  for (const auto& c : sized_decoding_cases()) {
    SCOPED_TRACE(c.name);
    const auto e = sized_decoding_errors(c, device);
    ASSERT_EQ(e.device.type(), device.type()) << e.device;
    ASSERT_GT(e.spread, 0.3);  // not near uniform
    EXPECT_LT(e.alone, kSizedDecodingTolerance);
    EXPECT_LT(e.batch, kSizedDecodingTolerance);
    EXPECT_GT(e.control, 20 * kSizedDecodingTolerance);
    std::cout << tag << c.name << ": decoding against the fp64 forward " << e.alone
              << ", a row in a batch of 16 against alone " << e.batch << ", the control "
              << e.control << "\n";
  }
}

}  // namespace txl::test
