// Tests of the enum settings (config/enums.h): each name table covers its enum and round-trips.

#include <gtest/gtest.h>

#include <cctype>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "txl/config/enums.h"

namespace txl::config {
namespace {

// The names of E, which must be the enumerators 0, 1, ... in declaration order, spelled as the
// experiment files, dumps and JSON records written before the enums spell them.
template <typename E>
void expect_table(const std::vector<std::string>& spelled) {
  SCOPED_TRACE(spelled.front());
  EXPECT_EQ(enum_names<E>(), spelled);
  std::string joined;
  for (std::size_t i = 0; i < spelled.size(); ++i) {
    const E value = static_cast<E>(i);
    EXPECT_EQ(to_string(value), spelled[i]);
    EXPECT_EQ(parse_enum<E>(spelled[i]), std::optional<E>(value));  // parse(name(x)) == x
    EXPECT_EQ(parse_enum<E>(to_string(value)), std::optional<E>(value));
    std::ostringstream printed;
    printed << value;
    EXPECT_EQ(printed.str(), spelled[i]);
    joined += (i > 0 ? " | " : "") + spelled[i];
  }
  EXPECT_EQ(enum_choices<E>(), joined);
  // One past the last enumerator is no value of the table: it prints as its number, which no
  // name equals, so a table missing an enumerator cannot pass the loop above.
  const E outside = static_cast<E>(spelled.size());
  EXPECT_EQ(to_string(outside), std::to_string(spelled.size()));
  EXPECT_EQ(parse_enum<E>(to_string(outside)), std::nullopt);
  // Names are case-sensitive and whole.
  EXPECT_EQ(parse_enum<E>(""), std::nullopt);
  EXPECT_EQ(parse_enum<E>(spelled[0] + " "), std::nullopt);
  std::string upper = spelled[0];
  for (char& ch : upper) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  EXPECT_EQ(parse_enum<E>(upper), std::nullopt);
}

TEST(EnumNames, EveryNameRoundTripsAndEachTableCoversItsEnum) {
  expect_table<AttnType>({"xl", "shaw", "vanilla", "vanilla_learned"});
  expect_table<Device>({"cpu", "cuda", "auto"});
  expect_table<Precision>({"fp32", "bf16"});
  expect_table<Optimizer>({"adam", "adamw", "sgd"});
  expect_table<Schedule>({"cosine", "inv_sqrt", "constant", "plateau"});
  expect_table<EvalMode>({"memory", "segments", "sliding"});
}

TEST(EnumNames, AbsoluteAndRelativePositionsSplitTheAttentionTypes) {
  EXPECT_FALSE(uses_absolute_positions(AttnType::kXl));
  EXPECT_FALSE(uses_absolute_positions(AttnType::kShaw));
  EXPECT_TRUE(uses_absolute_positions(AttnType::kVanilla));
  EXPECT_TRUE(uses_absolute_positions(AttnType::kVanillaLearned));
  for (const std::string& name : enum_names<AttnType>()) {
    const AttnType type = *parse_enum<AttnType>(name);
    EXPECT_NE(uses_absolute_positions(type), uses_relative_positions(type)) << name;
  }
}

}  // namespace
}  // namespace txl::config
