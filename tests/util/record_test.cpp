// util/record.h: one field list drives JSON out, JSON in and CSV, so a record read back equals
// the one written (non-finite numbers and lists included), the CSV has the JSON's scalar fields in
// the same order, and a damaged record is an error naming its field.
#include "txl/util/record.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "support/test_support.h"
#include "txl/config/enums.h"

namespace {

using Json = txl::json::OrderedJson;
using txl::config::EvalMode;

struct Sample {
  std::string name;
  bool flag = false;
  int small = 0;
  std::int64_t big = 0;
  double x = 0.0;
  EvalMode mode = EvalMode::kMemory;
  std::int64_t added_later = 7;  // optional: absent in older files
  std::vector<double> list;
  double half() const { return x / 2; }
};

template <typename R, typename Visit>
void fields(R& s, Visit&& visit) {
  visit("name", s.name);
  visit("flag", s.flag);
  visit("small", s.small);
  visit("big", s.big);
  visit("x", s.x);
  visit.derived("half", s.half());
  visit("mode", s.mode);
  visit("added_later", s.added_later, txl::record::kOptional);
  visit("list", s.list);
}

Json write(const Sample& s) {
  Json j;
  fields(s, txl::record::JsonWriter<Json>(j));
  return j;
}

Sample read(const Json& j) {
  Sample s;
  fields(s, txl::record::JsonReader<Json>(j, "f.json", "sample", "fix it"));
  return s;
}

Sample full() {
  Sample s;
  s.name = "a,\"b\"";
  s.flag = true;
  s.small = -3;
  s.big = std::int64_t{1} << 40;
  s.x = 0.1;
  s.mode = EvalMode::kSliding;
  s.added_later = 9;
  s.list = {1.5, std::nan(""), -2.0};
  return s;
}

TEST(Record, JsonRoundTripsEveryFieldType) {
  const Sample s = full();
  const Json j = write(s);
  EXPECT_EQ(j.at("mode"), "sliding");
  EXPECT_DOUBLE_EQ(j.at("half").get<double>(), 0.05);  // derived: written
  const Sample back = read(Json::parse(j.dump()));
  EXPECT_EQ(back.name, s.name);
  EXPECT_EQ(back.flag, s.flag);
  EXPECT_EQ(back.small, s.small);
  EXPECT_EQ(back.big, s.big);
  EXPECT_EQ(back.x, s.x);
  EXPECT_EQ(back.mode, s.mode);
  EXPECT_EQ(back.added_later, 9);
  ASSERT_EQ(back.list.size(), 3u);
  EXPECT_EQ(back.list[0], 1.5);
  EXPECT_TRUE(std::isnan(back.list[1]));
  EXPECT_EQ(back.list[2], -2.0);
}

TEST(Record, NonFiniteNumbersComeBackAsTheyWere) {
  for (double v : {std::numeric_limits<double>::infinity(),
                   -std::numeric_limits<double>::infinity(), std::nan("")}) {
    Sample s = full();
    s.x = v;
    const Json j = write(s);
    EXPECT_TRUE(j.at("x").is_null());  // valid JSON, with the reason under null_because
    const Sample back = read(Json::parse(j.dump()));
    if (std::isnan(v)) {
      EXPECT_TRUE(std::isnan(back.x));
    } else {
      EXPECT_EQ(back.x, v);
    }
  }
}

TEST(Record, OptionalFieldsAndEmptyListsMayBeAbsent) {
  Sample s = full();
  s.list.clear();
  Json j = write(s);
  EXPECT_FALSE(j.contains("list"));  // an empty list is left out
  j.erase("added_later");
  const Sample back = read(j);
  EXPECT_EQ(back.added_later, 7);  // the default
  EXPECT_TRUE(back.list.empty());
}

TEST(Record, ADamagedRecordNamesItsField) {
  Json j = write(full());
  j.erase("big");
  TXL_EXPECT_THROW_WITH(read(j), "f.json: sample record lacks \"big\"");
  TXL_EXPECT_THROW_WITH(read(j), "; fix it");
  j = write(full());
  j["small"] = "three";
  TXL_EXPECT_THROW_WITH(read(j), "f.json: sample field \"small\" has the wrong type");
  j = write(full());
  j["mode"] = "beam";
  TXL_EXPECT_THROW_WITH(read(j), "sample field \"mode\" is 'beam', not one of memory | segments");
  j = write(full());
  j["list"] = Json::array({1, "x"});
  TXL_EXPECT_THROW_WITH(read(j), "\"list\" holds a non-number");
  TXL_EXPECT_THROW_WITH(read(Json::array()), "f.json: expected a JSON object per sample record");
}

TEST(Record, CsvHasTheScalarFieldsInTheJsonOrder) {
  const Sample s = full();
  std::string header, row;
  fields(s, txl::record::CsvHeader(header));
  fields(s, txl::record::CsvRow(row));
  EXPECT_EQ(header, "name,flag,small,big,x,half,mode,added_later");
  EXPECT_EQ(row, "\"a,\"\"b\"\"\",1,-3,1099511627776,0.1,0.05,sliding,9");
  std::string keys;
  const Json j = write(s);
  for (const auto& item : j.items()) {
    if (item.key() != "list") keys += (keys.empty() ? "" : ",") + item.key();
  }
  EXPECT_EQ(keys, header);
}

}  // namespace
