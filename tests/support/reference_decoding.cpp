#include "support/reference_decoding.h"

#include <algorithm>
#include <vector>

namespace txl::test {

torch::Tensor segmented_log_probs(models::TransformerLM& model, const torch::Tensor& tokens,
                                  const models::DecodeOptions& o) {
  torch::NoGradGuard no_grad;
  models::Context ctx;
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
  models::Context ctx;
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
  return model->forward(in, {}, models::Context{}, true).logits;  // [1, N, V]
}

torch::Tensor reference_log_probs(models::TransformerLM& model, const torch::Tensor& tokens,
                                  const models::DecodeOptions& o) {
  const bool sliding =
      o.mem_len == 0 || config::uses_absolute_positions(model->config().attn_type);
  return sliding ? windowed_log_probs(model, tokens, o.tgt_len, o.clamp_len)
                 : segmented_log_probs(model, tokens, o);
}

}  // namespace txl::test
