// Test 11: a tiny model of every variant learns a short repeated sequence to near-zero loss.

#include <gtest/gtest.h>

#include "support/test_support.h"
#include "txl/models/transformer_lm.h"

namespace txl::models {
namespace {

double train_on_repeated_sequence(const std::string& attn_type, int mem_len) {
  config::ModelConfig c;
  c.attn_type = attn_type;
  c.n_layer = 2;
  c.d_model = 32;
  c.n_head = 2;
  c.d_head = 16;
  c.d_inner = 64;
  c.dropout = 0.0;
  c.mem_len = mem_len;
  c.max_positions = 32;
  c.max_rel_dist = 16;
  torch::manual_seed(21);
  const int64_t vocab = 10, q = 16;
  TransformerLM model(c, vocab);
  model->train();
  // Period 8 with repeated ids, so the next token depends on more than the current one.
  auto pattern = torch::tensor({3, 1, 4, 1, 5, 9, 2, 6}, torch::kLong);
  auto stream = pattern.repeat({5});                                  // [40]
  auto tokens = stream.narrow(0, 0, q).unsqueeze(0).repeat({2, 1});   // [2, Q]
  auto targets = stream.narrow(0, 1, q).unsqueeze(0).repeat({2, 1});  // [2, Q]
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(3e-3));
  Context ctx = model->default_context();
  Memory memory;
  double loss_value = 0;
  for (int step = 0; step < 200; ++step) {
    auto out = model->forward(tokens, targets, {}, memory, {}, ctx);
    memory = out.memory;  // the same segment again: memory holds the previous period
    auto loss = out.nll.mean();
    opt.zero_grad();
    loss.backward();
    opt.step();
    loss_value = loss.item<double>();
  }
  return loss_value;
}

TEST(Learning, EveryVariantLearnsARepeatedSequence) {
  for (auto [attn, mem] : std::vector<std::pair<std::string, int>>{
           {"xl", 16}, {"xl", 0}, {"shaw", 16}, {"vanilla", 0}, {"vanilla_learned", 0}}) {
    const double loss = train_on_repeated_sequence(attn, mem);
    EXPECT_LT(loss, 0.05) << attn << " mem_len " << mem;
  }
}

}  // namespace
}  // namespace txl::models
