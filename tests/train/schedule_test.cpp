#include "txl/train/schedule.h"

#include <cmath>

#include "support/test_support.h"

namespace {

using txl::config::Schedule;

txl::config::TrainConfig base(Schedule schedule) {
  txl::config::TrainConfig t;
  t.schedule = schedule;
  t.lr = 1e-3;
  t.lr_min = 1e-5;
  t.warmup_steps = 10;
  t.max_steps = 110;
  return t;
}

TEST(Schedule, WarmupIsLinearFromZero) {
  for (Schedule s :
       {Schedule::kCosine, Schedule::kInvSqrt, Schedule::kConstant, Schedule::kPlateau}) {
    auto t = base(s);
    EXPECT_DOUBLE_EQ(txl::train::learning_rate(t, 1), 1e-4) << s;
    EXPECT_DOUBLE_EQ(txl::train::learning_rate(t, 5), 5e-4) << s;
    EXPECT_DOUBLE_EQ(txl::train::learning_rate(t, 10), 1e-3) << s;
  }
}

TEST(Schedule, CosineReachesTheFloorAtMaxSteps) {
  auto t = base(Schedule::kCosine);
  EXPECT_NEAR(txl::train::learning_rate(t, 60), 1e-5 + 0.5 * (1e-3 - 1e-5), 1e-12);  // half way
  EXPECT_NEAR(txl::train::learning_rate(t, 110), 1e-5, 1e-12);
  EXPECT_NEAR(txl::train::learning_rate(t, 500), 1e-5, 1e-12);
  for (int s = 11; s < 110; ++s)
    EXPECT_GT(txl::train::learning_rate(t, s), txl::train::learning_rate(t, s + 1));
}

TEST(Schedule, InvSqrtIsContinuousAndDecays) {
  auto t = base(Schedule::kInvSqrt);
  EXPECT_NEAR(txl::train::learning_rate(t, 40), 1e-3 * std::sqrt(10.0 / 40.0), 1e-12);
  t.lr_min = 4e-4;
  EXPECT_NEAR(txl::train::learning_rate(t, 1000), 4e-4, 1e-12);
}

TEST(Schedule, PlateauScalesAndConstantStays) {
  EXPECT_DOUBLE_EQ(txl::train::learning_rate(base(Schedule::kPlateau), 50, 0.25), 2.5e-4);
  EXPECT_DOUBLE_EQ(txl::train::learning_rate(base(Schedule::kPlateau), 50, 1e-6), 1e-5);  // floor
  EXPECT_DOUBLE_EQ(txl::train::learning_rate(base(Schedule::kConstant), 500), 1e-3);
}

}  // namespace
