// A tiny model of every variant learns a short repeated sequence to near-zero loss, trained
// with the trainer's own step (train::Step).

#include <gtest/gtest.h>

#include "support/test_support.h"
#include "txl/models/transformer_lm.h"
#include "txl/train/step.h"

namespace txl::models {
namespace {

double train_on_repeated_sequence(config::AttnType attn_type, int mem_len) {
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
  data::Batch batch;  // the same segment every step: memory holds the previous period
  batch.tokens = tokens;
  batch.targets = targets;
  batch.input_mask = torch::ones({2, q}, torch::kBool);   // [2, Q]
  batch.target_mask = torch::ones({2, q}, torch::kBool);  // [2, Q]
  batch.reset = torch::zeros({2}, torch::kBool);          // [2]
  batch.n_scored = 2 * q;
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(3e-3));
  train::Step step(model, opt, train::StepSettings{}, dist::RowRange{0, 2});
  double loss_value = 0;
  for (int i = 0; i < 200; ++i) loss_value = step.run(batch, 3e-3).mean_loss();
  return loss_value;
}

TEST(Learning, EveryVariantLearnsARepeatedSequence) {
  using config::AttnType;
  for (auto [attn, mem] : std::vector<std::pair<AttnType, int>>{{AttnType::kXl, 16},
                                                                {AttnType::kXl, 0},
                                                                {AttnType::kShaw, 16},
                                                                {AttnType::kVanilla, 0},
                                                                {AttnType::kVanillaLearned, 0},
                                                                {AttnType::kRope, 16},
                                                                {AttnType::kAlibi, 16}}) {
    const double loss = train_on_repeated_sequence(attn, mem);
    EXPECT_LT(loss, 0.05) << attn << " mem_len " << mem;
  }
}

}  // namespace
}  // namespace txl::models
