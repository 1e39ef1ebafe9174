// Tests of config::effective_eval: each "inherit" value of the eval section takes the model's
// setting, any other value is kept, and the memory length is 0 outside memory mode (the
// requested one kept beside it).

#include "txl/config/effective_eval.h"

#include <gtest/gtest.h>

namespace txl::config {
namespace {

TEST(EffectiveEval, TheDefaultsInheritTheModelsSettings) {
  ExperimentConfig c;
  c.model.tgt_len = 96;
  c.model.mem_len = 48;
  c.model.clamp_len = 200;
  c.model.same_length = true;
  c.model.mem_init = MemInit::kZeros;
  const EffectiveEval ev = effective_eval(c);
  EXPECT_EQ(ev.mode, EvalMode::kMemory);
  EXPECT_EQ(ev.tgt_len, 96);
  EXPECT_EQ(ev.mem_len, 48);
  EXPECT_EQ(ev.requested_mem_len, 48);
  EXPECT_EQ(ev.clamp_len, 200);
  EXPECT_TRUE(ev.same_length);
  EXPECT_EQ(ev.mem_init, MemInit::kZeros);
  EXPECT_EQ(ev.window, 96);
}

TEST(EffectiveEval, ExplicitValuesOverrideTheModels) {
  ExperimentConfig c;
  c.model.clamp_len = 200;
  c.model.same_length = true;
  c.model.mem_init = MemInit::kZeros;
  c.eval.tgt_len = 32;
  c.eval.mem_len = 0;
  c.eval.clamp_len = -1;
  c.eval.same_length = 0;
  c.eval.mem_init = EvalMemInit::kEmpty;
  EffectiveEval ev = effective_eval(c);
  EXPECT_EQ(ev.tgt_len, 32);
  EXPECT_EQ(ev.mem_len, 0);
  EXPECT_EQ(ev.clamp_len, -1);
  EXPECT_FALSE(ev.same_length);
  EXPECT_EQ(ev.mem_init, MemInit::kEmpty);
  EXPECT_EQ(ev.window, 32);  // 0 = the effective tgt_len
  c.model.mem_init = MemInit::kEmpty;
  c.eval.mem_init = EvalMemInit::kZeros;
  c.eval.mem_len = 64;
  c.eval.clamp_len = 16;
  c.eval.same_length = 1;
  c.eval.window = 24;
  ev = effective_eval(c);
  EXPECT_EQ(ev.mem_len, 64);
  EXPECT_EQ(ev.clamp_len, 16);
  EXPECT_TRUE(ev.same_length);
  EXPECT_EQ(ev.mem_init, MemInit::kZeros);
  EXPECT_EQ(ev.window, 24);
}

TEST(EffectiveEval, OnlyMemoryModeCarriesAMemory) {
  ExperimentConfig c;
  c.model.mem_len = 48;
  for (EvalMode mode : {EvalMode::kSegments, EvalMode::kSliding}) {
    c.eval.mode = mode;
    const EffectiveEval ev = effective_eval(c);
    EXPECT_EQ(ev.mode, mode);
    EXPECT_EQ(ev.mem_len, 0) << to_string(mode);
    EXPECT_EQ(ev.requested_mem_len, 48) << to_string(mode);
  }
}

}  // namespace
}  // namespace txl::config
