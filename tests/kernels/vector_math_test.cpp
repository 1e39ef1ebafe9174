// The vector loops' exp (txl/kernels/vector_math.h) equals std::exp to 2e-7 relative over the
// floats a softmax gives it, and is defined for every float: NaN gives NaN, +inf gives +inf,
// -inf the documented floor exp(-87). This file is built with UndefinedBehaviorSanitizer
// (float-cast-overflow and shifts included, no recovery): an infinity or a NaN converted to an
// integer, as the exp did before it clamped, stops the test.
#include "txl/kernels/vector_math.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace txl::kernels {
namespace {

// Through a volatile, so the compiler cannot fold the calls at compile time.
float exp_of(float x) {
  volatile float v = x;
  return exp_nonpositive(static_cast<float>(v));
}

TEST(VectorExp, EqualsStdExpOnItsRange) {
  for (float x = -87.0f; x <= 88.0f; x += 0.0137f) {
    const double exact = std::exp(static_cast<double>(x));
    EXPECT_NEAR(exp_of(x) / exact, 1.0, 2e-7) << x;
  }
  EXPECT_EQ(exp_of(0.0f), 1.0f);
  EXPECT_EQ(exp_of(-1000.0f), exp_of(-87.0f));  // the floor: a normal float
  EXPECT_GT(exp_of(-87.0f), 0.0f);
}

TEST(VectorExp, NonFiniteInputsGiveWhatStdExpGives) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(std::isnan(exp_of(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isnan(exp_of(-std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(exp_of(kInf), kInf);
  EXPECT_EQ(exp_of(89.0f), kInf);
  EXPECT_EQ(exp_of(std::numeric_limits<float>::max()), kInf);
  EXPECT_EQ(exp_of(-kInf), exp_of(-87.0f));
  EXPECT_EQ(exp_of(std::numeric_limits<float>::lowest()), exp_of(-87.0f));
}

// A loop over a row as the softmax runs it (vectorised where the build allows), with NaNs and
// infinities among the scores.
TEST(VectorExp, ALoopOverNonFiniteScoresKeepsThemApart) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  std::vector<float> x(64, -1.0f), y(64);
  x[3] = std::numeric_limits<float>::quiet_NaN();
  x[17] = kInf;
  x[40] = -kInf;
  volatile int n = 64;
#pragma omp simd
  for (int i = 0; i < n; ++i) y[i] = exp_nonpositive(x[i]);
  for (int i = 0; i < 64; ++i) {
    if (i == 3) {
      EXPECT_TRUE(std::isnan(y[i]));
    } else if (i == 17) {
      EXPECT_EQ(y[i], kInf);
    } else if (i == 40) {
      EXPECT_EQ(y[i], exp_of(-87.0f));
    } else {
      EXPECT_NEAR(y[i], std::exp(-1.0), 1e-7) << i;
    }
  }
}

}  // namespace
}  // namespace txl::kernels
