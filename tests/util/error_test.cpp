#include "txl/util/error.h"

#include "support/test_support.h"

namespace {

TEST(Error, CheckStreamsTheMessage) {
  int value = 7;
  TXL_EXPECT_THROW_WITH(TXL_CHECK(value < 5, "value ", value, " must be < ", 5),
                        "value 7 must be < 5");
  EXPECT_NO_THROW(TXL_CHECK(value > 5, "unused"));
}

TEST(Error, MessagesOfTorchErrorsCarryNoBacktrace) {
  try {
    TORCH_CHECK(false, "bad shape 7");
  } catch (const std::exception& e) {
    EXPECT_EQ(txl::error_message(e), "bad shape 7");
  }
  EXPECT_EQ(txl::error_message(txl::Error("plain")), "plain");
}

}  // namespace
