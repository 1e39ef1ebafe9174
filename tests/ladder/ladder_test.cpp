// The ladder of abstraction levels, checked: every `#include "txl/<other>/..."` in
// include/txl/<level>/ and src/<level>/ names <level> itself or a level that <level> may use.
//
// The one source of truth is the table under "## Levels of abstraction" in CONTRIBUTING.md, its
// "may use" column, read here as written: a level named there brings what it may use in turn
// ("models, dist and below" reads the same as "models, dist"), "everything below" is every
// row above it, and words that name no level (std, torch, nlohmann-json) are not levels.
// A row may only name rows above it: the table is the ladder, bottom first.
//
// A private level (its "what lives there" cell starts "Private to `owner`") is a floor under its
// owner alone: only the owner may name it, and naming the owner brings what the owner may use
// but not the private level, so nothing above the owner includes it.

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "support/test_support.h"
#include "txl/util/fs.h"

namespace {

namespace stdfs = std::filesystem;

struct Ladder {
  std::vector<std::string> levels;                       // table order, bottom first
  std::map<std::string, std::set<std::string>> may_use;  // level -> levels below it it may use
  std::map<std::string, std::string> owner;              // private level -> the one level above
  std::vector<std::string> errors;  // a row naming itself, a row above it, or another's floor
};

std::string trim(const std::string& s) {
  const auto begin = s.find_first_not_of(" \t`");
  const auto end = s.find_last_not_of(" \t`");
  return begin == std::string::npos ? "" : s.substr(begin, end - begin + 1);
}

std::vector<std::string> cells(const std::string& row) {
  std::vector<std::string> out;
  std::stringstream in(row);
  for (std::string cell; std::getline(in, cell, '|');) out.push_back(trim(cell));
  if (!out.empty()) out.erase(out.begin());  // before the first '|'
  return out;
}

struct Row {
  std::string level, what, may_use;
};

// The rows of the table, bottom first.
std::vector<Row> table_rows(const stdfs::path& contributing) {
  std::vector<Row> rows;
  std::istringstream in(txl::fs::read_file(contributing));
  bool in_section = false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("## ", 0) == 0) in_section = line == "## Levels of abstraction";
    if (!in_section || line.rfind("| `", 0) != 0) continue;
    const auto row = cells(line);
    if (row.size() >= 3) rows.push_back({row[0], row[1], row[2]});
  }
  return rows;
}

// The ladder of `contributing`: each row's "may use" cell, closed over what the levels it names
// may use in turn.
Ladder read_ladder(const stdfs::path& contributing) {
  const auto rows = table_rows(contributing);
  std::set<std::string> names;
  Ladder ladder;
  static const std::regex private_to(R"(^Private to `([a-z_]+)`)");
  for (const auto& row : rows) {
    names.insert(row.level);
    std::smatch m;
    if (std::regex_search(row.what, m, private_to)) ladder.owner[row.level] = m[1];
  }
  for (const auto& row : rows) {
    const auto& level = row.level;
    const auto& cell = row.may_use;
    auto& allowed = ladder.may_use[level];
    std::string text = std::regex_replace(cell, std::regex(R"(\band below\b)"), "");
    text = std::regex_replace(text, std::regex(R"(\band\b)"), ",");
    std::stringstream in(text);
    for (std::string word; std::getline(in, word, ',');) {
      word = trim(word);
      if (word == "everything below") {
        for (const auto& below : ladder.levels) {
          if (ladder.owner.count(below) == 0) allowed.insert(below);
        }
      } else if (ladder.owner.count(word) && ladder.owner.at(word) != level) {
        ladder.errors.push_back("`" + level + "` may use `" + word + "`, the private floor of `" +
                                ladder.owner.at(word) + "`");
      } else if (ladder.may_use.count(word) && word != level) {
        allowed.insert(word);
        for (const auto& below : ladder.may_use[word]) {
          if (ladder.owner.count(below) == 0) allowed.insert(below);  // not the owner's floor
        }
      } else if (names.count(word)) {
        ladder.errors.push_back("`" + level + "` may use `" + word + "`, not a row above it");
      }  // else std, torch, a library: not a level
    }
    ladder.levels.push_back(level);
  }
  return ladder;
}

// Every "file:line: ..." where a source of one level includes a header of a level it may not
// use (or reaches out of its folder with "../").
std::vector<std::string> wrong_way_includes(const stdfs::path& root, const Ladder& ladder) {
  static const std::regex include(R"re(^\s*#\s*include\s*["<]([^">]*)[">])re");
  static const std::regex txl_header(R"(^txl/([a-z_]+)/)");
  std::vector<std::string> out;
  for (const auto& level : ladder.levels) {
    for (const auto& top : {root / "include" / "txl" / level, root / "src" / level}) {
      if (!stdfs::exists(top)) continue;
      for (const auto& entry : stdfs::recursive_directory_iterator(top)) {
        const auto ext = entry.path().extension();
        if (!entry.is_regular_file() || (ext != ".h" && ext != ".cpp" && ext != ".hpp")) continue;
        std::ifstream file(entry.path());
        int number = 0;
        for (std::string line; std::getline(file, line);) {
          ++number;
          std::smatch m, h;
          if (!std::regex_search(line, m, include)) continue;
          const std::string header = m[1];
          const std::string where =
              stdfs::relative(entry.path(), root).string() + ":" + std::to_string(number) + ": ";
          if (header.find("../") != std::string::npos) {
            out.push_back(where + "`" + level + "` reaches out of its folder: " + header);
          } else if (std::regex_search(header, h, txl_header) && h[1] != level &&
                     ladder.may_use.at(level).count(h[1]) == 0) {
            out.push_back(where + "`" + level + "` includes " + header + ", but may not use `" +
                          std::string(h[1]) + "`");
          }
        }
      }
    }
  }
  return out;
}

std::string lines(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += s + "\n";
  return out;
}

const stdfs::path kContributing = "CONTRIBUTING.md";

TEST(Ladder, TheTableHasARowForEveryLevelBottomFirst) {
  const auto root = txl::test::source_dir();
  const auto ladder = read_ladder(root / kContributing);
  ASSERT_GE(ladder.levels.size(), 2u) << "no level table in CONTRIBUTING.md";
  EXPECT_EQ(ladder.levels.front(), "util");
  EXPECT_TRUE(ladder.may_use.at("util").empty());
  for (const auto& dir : {root / "src", root / "include" / "txl"}) {
    for (const auto& entry : stdfs::directory_iterator(dir)) {
      if (!entry.is_directory()) continue;
      const auto name = entry.path().filename().string();
      EXPECT_TRUE(ladder.may_use.count(name)) << entry.path() << " has no row in " << kContributing;
    }
  }
  EXPECT_TRUE(ladder.errors.empty()) << lines(ladder.errors);
}

TEST(Ladder, EveryIncludeBetweenLevelsPointsDown) {
  const auto root = txl::test::source_dir();
  const auto wrong = wrong_way_includes(root, read_ladder(root / kContributing));
  EXPECT_TRUE(wrong.empty()) << "wrong-way includes (levels and their \"may use\": "
                             << kContributing << "):\n"
                             << lines(wrong);
}

// The check itself: on a copy of the table, a planted wrong-way include is found, named by file
// and line, and an allowed one is not.
TEST(Ladder, AWrongWayIncludeIsFoundByFileAndLine) {
  txl::test::TempDir dir;
  stdfs::copy_file(txl::test::source_dir() / kContributing, dir / kContributing.string());
  txl::test::write_text(dir / "include/txl/ops/masks.h",
                        "#pragma once\n#include \"txl/util/error.h\"\n");
  txl::test::write_text(dir / "src/models/x.cpp",
                        "#include \"txl/ops/masks.h\"\n\n  #include <txl/eval/evaluator.h>\n");
  txl::test::write_text(dir / "src/util/y.cpp", "#include \"../data/z.h\"\n");
  const auto wrong = wrong_way_includes(dir.path(), read_ladder(dir / kContributing.string()));
  ASSERT_EQ(wrong.size(), 2u) << lines(wrong);  // in ladder order: util, then models
  EXPECT_EQ(wrong[0].rfind("src/util/y.cpp:1: `util` reaches out of its folder", 0), 0u)
      << wrong[0];
  EXPECT_EQ(wrong[1].rfind("src/models/x.cpp:3: `models` includes txl/eval/evaluator.h", 0), 0u)
      << wrong[1];
}

// A row that names a level above it breaks the ladder.
TEST(Ladder, ARowNamingALevelAboveItIsAnError) {
  txl::test::TempDir dir;
  txl::test::write_text(
      dir / kContributing.string(),
      "## Levels of abstraction\n\n| level | what | may use |\n| --- | --- | --- |\n"
      "| `util` | errors | std, `ops` |\n| `ops` | masks | util |\n");
  const auto ladder = read_ladder(dir / kContributing.string());
  ASSERT_EQ(ladder.errors.size(), 1u) << lines(ladder.errors);
  EXPECT_EQ(ladder.errors[0], "`util` may use `ops`, not a row above it");
  EXPECT_EQ(ladder.may_use.at("ops"), std::set<std::string>{"util"});
}

// A private floor: its owner includes it, a level above the owner does not (naming the owner
// brings the owner's other levels, not its floor), and a row naming another's floor is an error.
TEST(Ladder, APrivateFloorServesItsOwnerAlone) {
  txl::test::TempDir dir;
  txl::test::write_text(
      dir / kContributing.string(),
      "## Levels of abstraction\n\n| level | what | may use |\n| --- | --- | --- |\n"
      "| `util` | errors | std |\n"
      "| `kernels` | Private to `ops`: loops | util |\n"
      "| `ops` | masks | kernels, util |\n"
      "| `modules` | attention | ops |\n"
      "| `models` | the model | everything below |\n"
      "| `eval` | evaluation | models, kernels |\n");
  const auto ladder = read_ladder(dir / kContributing.string());
  EXPECT_EQ(ladder.may_use.at("ops"), (std::set<std::string>{"kernels", "util"}));
  EXPECT_EQ(ladder.may_use.at("modules"), (std::set<std::string>{"ops", "util"}));
  EXPECT_EQ(ladder.may_use.at("models"), (std::set<std::string>{"util", "ops", "modules"}));
  ASSERT_EQ(ladder.errors.size(), 1u) << lines(ladder.errors);
  EXPECT_EQ(ladder.errors[0], "`eval` may use `kernels`, the private floor of `ops`");
  txl::test::write_text(dir / "src/ops/a.cpp", "#include \"txl/kernels/loops.h\"\n");
  txl::test::write_text(dir / "src/modules/b.cpp", "#include \"txl/kernels/loops.h\"\n");
  const auto wrong = wrong_way_includes(dir.path(), ladder);
  ASSERT_EQ(wrong.size(), 1u) << lines(wrong);
  EXPECT_EQ(
      wrong[0],
      "src/modules/b.cpp:1: `modules` includes txl/kernels/loops.h, but may not use `kernels`");
}

// The project's own table: ops alone uses the kernels' floor.
TEST(Ladder, TheKernelsAreOpsPrivateFloor) {
  const auto ladder = read_ladder(txl::test::source_dir() / kContributing);
  ASSERT_TRUE(ladder.owner.count("kernels")) << "no private `kernels` row in " << kContributing;
  EXPECT_EQ(ladder.owner.at("kernels"), "ops");
  for (const auto& [level, allowed] : ladder.may_use) {
    EXPECT_EQ(allowed.count("kernels") == 1, level == "ops") << level;
  }
}

}  // namespace
