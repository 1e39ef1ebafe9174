#include "txl/util/log.h"

#include <stdexcept>

#include "support/test_support.h"

namespace {

using txl::log::Level;
using txl::log::ScopedLevel;

// A guard restores the level it found, not a fixed one: start from each level in turn.
TEST(Log, ScopedLevelRestoresTheLevelItFound) {
  for (Level found : {Level::kQuiet, Level::kInfo, Level::kDebug}) {
    ScopedLevel outer(found);
    {
      ScopedLevel quiet(Level::kQuiet);
      EXPECT_EQ(txl::log::level(), Level::kQuiet);
      {
        ScopedLevel debug(Level::kDebug);
        EXPECT_EQ(txl::log::level(), Level::kDebug);
      }
      EXPECT_EQ(txl::log::level(), Level::kQuiet);
    }
    EXPECT_EQ(txl::log::level(), found);
  }
}

// What a failing ASSERT or a throwing call leaves: the scope ends early and the level is back.
TEST(Log, ScopedLevelRestoresWhenAnExceptionUnwinds) {
  ScopedLevel outer(Level::kDebug);
  try {
    ScopedLevel quiet(Level::kQuiet);
    throw std::runtime_error("a failing check");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(txl::log::level(), Level::kDebug);
  [] {
    ScopedLevel quiet(Level::kQuiet);
    return;  // as ASSERT_* returns from a test
  }();
  EXPECT_EQ(txl::log::level(), Level::kDebug);
}

}  // namespace
