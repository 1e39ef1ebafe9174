// txl/util/json.h: every number survives a dump and a parse, the non-finite ones as null with
// the reason, in both key orders.
#include "txl/util/json.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace {

using txl::json::get_number;
using txl::json::put_number;

constexpr double kInf = std::numeric_limits<double>::infinity();

template <typename JsonT>
void expect_round_trip() {
  JsonT record;
  put_number(record, "finite", 0.1 + 0.2);
  put_number(record, "nan", std::nan(""));
  put_number(record, "pos", kInf);
  put_number(record, "neg", -kInf);
  const std::string text = record.dump();
  EXPECT_EQ(text.find("NaN"), std::string::npos) << text;
  EXPECT_EQ(text.find("Infinity"), std::string::npos) << text;
  const auto back = JsonT::parse(text);
  EXPECT_TRUE(back["nan"].is_null());
  EXPECT_EQ(back["null_because"]["nan"], "nan");
  EXPECT_EQ(back["null_because"]["pos"], "+inf");
  EXPECT_EQ(back["null_because"]["neg"], "-inf");
  EXPECT_FALSE(back["null_because"].contains("finite"));
  EXPECT_EQ(get_number(back, "finite", -1.0), 0.1 + 0.2);  // every bit
  EXPECT_TRUE(std::isnan(get_number(back, "nan", -1.0)));
  EXPECT_EQ(get_number(back, "pos", -1.0), kInf);
  EXPECT_EQ(get_number(back, "neg", -1.0), -kInf);
  EXPECT_EQ(get_number(back, "absent", -1.0), -1.0);
}

TEST(Json, NonFiniteNumbersAreNullWithTheReasonAndReadBack) {
  expect_round_trip<txl::json::Json>();
  expect_round_trip<txl::json::OrderedJson>();
}

TEST(Json, ANullWithoutAReasonReadsAsNanAndAStringAsMissing) {
  const auto record = txl::json::Json::parse(R"({"a": null, "b": "7"})");
  EXPECT_TRUE(std::isnan(get_number(record, "a", 1.0)));
  EXPECT_EQ(get_number(record, "b", 1.0), 1.0);
}

TEST(Json, OrderedRecordsKeepTheirKeyOrder) {
  txl::json::OrderedJson record;
  put_number(record, "zeta", 1.0);
  put_number(record, "alpha", 2.0);
  EXPECT_EQ(record.dump(), R"({"zeta":1.0,"alpha":2.0})");
}

}  // namespace
