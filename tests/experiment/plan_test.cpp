// The evaluation plan of ablation variants (src/experiment/plan.cpp).
#include <gtest/gtest.h>

#include "support/test_support.h"
#include "txl/experiment/ablation.h"

namespace {

using txl::experiment::PlannedEval;

using txl::config::AttnType;

txl::config::ExperimentConfig variant(AttnType attn, int tgt_len, int mem_len) {
  txl::config::ExperimentConfig c;
  c.run.name = "toy/" + txl::config::to_string(attn);
  c.model.attn_type = attn;
  c.model.tgt_len = tgt_len;
  c.model.mem_len = mem_len;
  c.eval.splits = {"valid", "test"};
  return c;
}

std::vector<std::string> keys(const std::vector<PlannedEval>& plan) {
  std::vector<std::string> out;
  for (const auto& p : plan) out.push_back(p.key());
  return out;
}

TEST(EvaluationPlan, VanillaGetsSegmentsAndSlidingOnEverySplit) {
  auto c = variant(AttnType::kVanilla, 32, 0);
  c.eval.stride = 8;
  EXPECT_EQ(keys(txl::experiment::evaluation_plan(c)),
            (std::vector<std::string>{"valid/segments/Q32/M0/L0/s0", "valid/sliding/Q32/M0/L32/s8",
                                      "test/segments/Q32/M0/L0/s0", "test/sliding/Q32/M0/L32/s8"}));
  // vanilla_learned alike, with an explicit window and evaluation segment length.
  auto l = variant(AttnType::kVanillaLearned, 32, 0);
  l.eval.tgt_len = 16;
  l.eval.window = 48;
  l.eval.splits = {"test"};
  EXPECT_EQ(keys(txl::experiment::evaluation_plan(l)),
            (std::vector<std::string>{"test/segments/Q16/M0/L0/s0", "test/sliding/Q16/M0/L48/s1"}));
}

TEST(EvaluationPlan, RelativeModelsGetMemoryAtTrainingAndLongerLengthsPlusSegments) {
  auto xl = variant(AttnType::kXl, 32, 64);
  xl.eval.splits = {"test"};
  EXPECT_EQ(keys(txl::experiment::evaluation_plan(xl)),
            (std::vector<std::string>{"test/memory/Q32/M64/L0/s0", "test/memory/Q32/M128/L0/s0",
                                      "test/memory/Q32/M256/L0/s0", "test/segments/Q32/M0/L0/s0"}));
  // eval.mem_len overrides the training memory as the base length; other multiples on request.
  xl.eval.mem_len = 10;
  EXPECT_EQ(keys(txl::experiment::evaluation_plan(xl, {1, 3})),
            (std::vector<std::string>{"test/memory/Q32/M10/L0/s0", "test/memory/Q32/M30/L0/s0",
                                      "test/segments/Q32/M0/L0/s0"}));
  // shaw is relative too.
  auto shaw = variant(AttnType::kShaw, 32, 32);
  shaw.eval.splits = {"valid"};
  EXPECT_EQ(txl::experiment::evaluation_plan(shaw).front().key(), "valid/memory/Q32/M32/L0/s0");
}

TEST(EvaluationPlan, NoMemoryVariantIsEvaluatedOnceWithoutMemory) {
  auto rel = variant(AttnType::kXl, 32, 0);
  rel.eval.splits = {"test"};
  EXPECT_EQ(keys(txl::experiment::evaluation_plan(rel)),
            (std::vector<std::string>{"test/memory/Q32/M0/L0/s0", "test/segments/Q32/M0/L0/s0"}));
}

TEST(EvaluationPlan, BadSettingsAreErrorsNamingTheKey) {
  auto c = variant(AttnType::kVanilla, 32, 0);
  c.eval.stride = 64;
  TXL_EXPECT_THROW_WITH(txl::experiment::evaluation_plan(c), "eval.stride = 64");
  c.eval.stride = 0;
  TXL_EXPECT_THROW_WITH(txl::experiment::evaluation_plan(c), "eval.stride = 0");
  auto x = variant(AttnType::kXl, 32, 32);
  x.eval.splits.clear();
  TXL_EXPECT_THROW_WITH(txl::experiment::evaluation_plan(x), "eval.splits is empty");
  TXL_EXPECT_THROW_WITH(txl::experiment::evaluation_plan(variant(AttnType::kXl, 8, 8), {0}),
                        "memory multiples must be >= 1");
}

TEST(AblationDir, OutputDirElseRunsName) {
  txl::config::AblationConfig a;
  a.name = "kjv_ablation";
  EXPECT_EQ(txl::experiment::ablation_dir(a), std::filesystem::path("runs/kjv_ablation"));
  a.output_dir = "/tmp/x";
  EXPECT_EQ(txl::experiment::ablation_dir(a), std::filesystem::path("/tmp/x"));
}

}  // namespace
