// Bytes as text: base64 against RFC 4648's test vectors, and the UTF-8 check's edges.
#include "txl/util/text.h"

#include <gtest/gtest.h>

#include "txl/util/json.h"

namespace {

TEST(Text, Base64IsRfc4648) {
  // RFC 4648, section 10.
  EXPECT_EQ(txl::util::base64(""), "");
  EXPECT_EQ(txl::util::base64("f"), "Zg==");
  EXPECT_EQ(txl::util::base64("fo"), "Zm8=");
  EXPECT_EQ(txl::util::base64("foo"), "Zm9v");
  EXPECT_EQ(txl::util::base64("foob"), "Zm9vYg==");
  EXPECT_EQ(txl::util::base64("fooba"), "Zm9vYmE=");
  EXPECT_EQ(txl::util::base64("foobar"), "Zm9vYmFy");
  // Bytes that are not text, a zero byte included: base64.b64encode(b"\xff\xfe\x00\x80") in Python.
  EXPECT_EQ(txl::util::base64(std::string("\xff\xfe\x00\x80", 4)), "//4AgA==");
}

TEST(Text, Utf8EdgesOfWellFormedness) {
  EXPECT_FALSE(txl::util::find_invalid_utf8("").has_value());
  EXPECT_FALSE(txl::util::find_invalid_utf8("\xF4\x8F\xBF\xBF").has_value());  // U+10FFFF
  EXPECT_EQ(txl::util::find_invalid_utf8("\xF4\x90\x80\x80").value(), 0u);     // past U+10FFFF
  EXPECT_EQ(txl::util::find_invalid_utf8("ok\xE0\x80\x80").value(), 2u);       // overlong
  EXPECT_EQ(txl::util::find_invalid_utf8("\xC1\xBF").value(), 0u);             // overlong
  EXPECT_EQ(txl::util::find_invalid_utf8("a\x80").value(), 1u);                // lone continuation
}

TEST(Text, InvalidBytesBecomeReplacementCharacters) {
  EXPECT_EQ(txl::util::replace_invalid_utf8("h\xC3\xA9llo"), "h\xC3\xA9llo");
  EXPECT_EQ(txl::util::replace_invalid_utf8("a\xFF\xC3"), "a\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(txl::util::replace_invalid_utf8("\xE2\x82"), "\xEF\xBF\xBD\xEF\xBF\xBD");
}

// Any bytes go into JSON: as they are when they are text, else as text with U+FFFD and the exact
// bytes in base64 beside it.
TEST(Json, PutTextKeepsAnyBytes) {
  txl::json::Json j;
  txl::json::put_text(j, "text", "caf\xC3\xA9");
  EXPECT_EQ(j.dump(), "{\"text\":\"caf\xC3\xA9\"}");
  txl::json::Json k;
  txl::json::put_text(k, "text", std::string("a\xFF\x00", 3));
  EXPECT_EQ(k["text"], std::string("a\xEF\xBF\xBD\x00", 5));
  EXPECT_EQ(k["text_base64"], "Yf8A");
  EXPECT_NO_THROW(k.dump());  // nlohmann refuses to write bytes that are not UTF-8
}

TEST(Json, NestingDepthCountsBracketsOutsideStrings) {
  EXPECT_FALSE(txl::json::nested_deeper_than("[[1]]", 2));
  EXPECT_TRUE(txl::json::nested_deeper_than("[[[1]]]", 2));
  EXPECT_TRUE(txl::json::nested_deeper_than("{\"a\":{\"b\":[", 2));  // unclosed counts too
  EXPECT_FALSE(txl::json::nested_deeper_than("[\"[[[{{{\"]", 2));
  EXPECT_FALSE(txl::json::nested_deeper_than(R"(["\"[[[", "\\", [1]])", 2));
  EXPECT_TRUE(txl::json::nested_deeper_than(R"(["\\", [[1]]])", 2));  // "\\" ends the string
}

}  // namespace
