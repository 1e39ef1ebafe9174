// tools/txl-prepare: flags -> DataConfig -> load_dataset -> statistics; errors -> exit 1.

#include <sys/wait.h>

#include <cstdio>

#include "support/test_support.h"

namespace {

struct Result {
  int status;
  std::string output;
};

// The tool beside this test binary (both land in build/bin), else in TXL_BIN_DIR.
std::filesystem::path tool() {
  std::error_code ec;
  auto here = std::filesystem::read_symlink("/proc/self/exe", ec).parent_path() / "txl-prepare";
  return !ec && std::filesystem::exists(here) ? here : txl::test::bin_dir() / "txl-prepare";
}

Result run(const std::string& args) {
  std::string command = tool().string() + " " + args + " 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  EXPECT_NE(pipe, nullptr);
  std::string out;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) out.append(buffer, n);
  int status = ::pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

TEST(PrepareTool, BuildsThenHitsTheCache) {
  txl::test::TempDir dir;
  const std::string args =
      "--corpus synthetic --tokenizer word --documents 20 --gap 40 --cache-dir " +
      (dir / "cache").string();
  Result first = run(args);
  ASSERT_EQ(first.status, 0) << first.output;
  EXPECT_NE(first.output.find("tokenizer   word"), std::string::npos) << first.output;
  EXPECT_NE(first.output.find("train       1440 tokens"), std::string::npos) << first.output;
  EXPECT_NE(first.output.find("rebuilt 3 of 3 splits"), std::string::npos) << first.output;
  EXPECT_NE(first.output.find("tokens/s"), std::string::npos) << first.output;
  Result second = run(args);
  ASSERT_EQ(second.status, 0) << second.output;
  EXPECT_NE(second.output.find("(hit)"), std::string::npos) << second.output;
  EXPECT_NE(second.output.find("from cache"), std::string::npos) << second.output;
}

TEST(PrepareTool, ErrorsExitOne) {
  Result bad = run("--corpus nope");
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.output.find("error: unknown data.corpus 'nope'"), std::string::npos) << bad.output;
  txl::test::TempDir dir;
  Result missing = run("--corpus ptb --path /nonexistent/ptb --cache-dir " + (dir / "c").string());
  EXPECT_EQ(missing.status, 1);
  EXPECT_NE(missing.output.find("/nonexistent/ptb/ptb.train.txt"), std::string::npos)
      << missing.output;
}

}  // namespace
