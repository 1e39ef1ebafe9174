// process::run_program: arguments reach the child untouched (no shell), statuses and signals are
// told apart, a missing program is named, both pipes are drained without deadlock, nothing leaks.
#include "txl/util/process.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "support/test_support.h"
#include "txl/util/error.h"

namespace {

namespace stdfs = std::filesystem;
using txl::process::run_program;
using txl::process::RunOptions;
using txl::process::Stdout;
using txl::test::TempDir;

// Every argument a shell would take apart, each carrying a command that would leave a file.
std::vector<std::string> hostile_arguments(const stdfs::path& dir) {
  const std::string d = dir.string();
  return {"it's",
          "say \"hi\"",
          "a; touch " + d + "/PWNED_semicolon",
          "$(touch " + d + "/PWNED_dollar)",
          "`touch " + d + "/PWNED_backtick`",
          "two  spaces ",
          "*",
          "line one\nline two",
          "| touch " + d + "/PWNED_pipe &",
          ""};
}

TEST(Process, ArgumentsReachTheChildVerbatim) {
  TempDir dir;
  const auto args = hostile_arguments(dir.path());
  std::vector<std::string> argv = {"/usr/bin/printf", "%s\\n"};
  argv.insert(argv.end(), args.begin(), args.end());
  auto r = run_program(argv);
  ASSERT_TRUE(r.ok()) << r.status() << " " << r.stderr_tail;
  std::string expected;
  for (const auto& a : args) expected += a + "\n";
  EXPECT_EQ(r.out, expected);
  // Nothing was executed: the folder the commands would write into is still empty.
  EXPECT_TRUE(stdfs::is_empty(dir.path())) << stdfs::directory_iterator(dir.path())->path();
}

// A printed command (the one that resumes a run) is read back by a shell as exactly its words:
// nothing in them runs, nothing is split or joined.
TEST(Process, ShellCommandIsReadBackAsTheSameWords) {
  TempDir dir;
  std::vector<std::string> words = {"printf", "%s\\n", "plain-word_1.yaml", "model.n_layer=2"};
  const auto hostile = hostile_arguments(dir.path());
  words.insert(words.end(), hostile.begin(), hostile.end());
  const std::string command = txl::process::shell_command(words);
  EXPECT_EQ(command.rfind("printf '%s\\n' plain-word_1.yaml model.n_layer=2 'it'\\''s' ", 0), 0u)
      << command;
  auto r = run_program({"/bin/sh", "-c", command});
  ASSERT_TRUE(r.ok()) << r.status() << " " << r.stderr_tail;
  std::string expected;
  for (size_t i = 2; i < words.size(); ++i) expected += words[i] + "\n";
  EXPECT_EQ(r.out, expected);
  EXPECT_TRUE(stdfs::is_empty(dir.path())) << stdfs::directory_iterator(dir.path())->path();
}

TEST(Process, ProgramIsLookedUpOnPathAndArgumentsAreNotGlobbed) {
  // `printf` without a slash: found on PATH. "*" stays one argument, not the files of the cwd.
  auto r = run_program({"printf", "[%s]", "*", "$HOME"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r.out, "[*][$HOME]");
}

TEST(Process, ExitStatusAndSignalAreReported) {
  auto r = run_program({"/bin/sh", "-c", "echo bye >&2; exit 7"});
  EXPECT_TRUE(r.started);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.exit_code, 7);
  EXPECT_EQ(r.signal, 0);
  EXPECT_EQ(r.stderr_tail, "bye");
  EXPECT_EQ(r.status(), "exited with status 7");

  r = run_program({"/bin/sh", "-c", "kill -9 $$"});
  EXPECT_TRUE(r.started);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.signal, SIGKILL);
  EXPECT_EQ(r.exit_code, -1);
  EXPECT_NE(r.status().find("was killed by signal 9"), std::string::npos) << r.status();

  r = run_program({"true"});
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(r.exit_code, 0);
}

TEST(Process, AProgramThatCannotStartIsNamed) {
  auto r = run_program({"txl-no-such-program-4711", "x"});
  EXPECT_FALSE(r.started);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.start_errno, ENOENT);
  EXPECT_NE(r.error.find("txl-no-such-program-4711"), std::string::npos) << r.error;
  EXPECT_NE(r.error.find("not on PATH"), std::string::npos) << r.error;
  EXPECT_NE(r.status().find("txl-no-such-program-4711"), std::string::npos) << r.status();

  TempDir dir;
  r = run_program({(dir / "missing" / "prog").string()});
  EXPECT_FALSE(r.started);
  EXPECT_EQ(r.start_errno, ENOENT);
  EXPECT_NE(r.error.find((dir / "missing" / "prog").string()), std::string::npos) << r.error;

  // A file that is not executable starts nothing either, for another reason.
  txl::test::write_text(dir / "data.txt", "not a program\n");
  r = run_program({(dir / "data.txt").string()});
  EXPECT_FALSE(r.started);
  EXPECT_EQ(r.start_errno, EACCES) << r.error;

  TXL_EXPECT_THROW_WITH(run_program({}), "needs a program");
}

TEST(Process, LargeOutputOnBothPipesArrivesWholeWithoutDeadlock) {
  // 2.7 MB of stderr before any stdout: a parent reading only stdout would wait forever on a
  // child blocked on a full stderr pipe. Then 6.8 MB of stdout, several pipe buffers' worth.
  const std::string script =
      "yes 'err line' | head -n 300000 >&2; yes 0123456789abcdef | head -n 400000; "
      "echo last-but-one >&2; echo last >&2";
  RunOptions options;
  options.stderr_tail_lines = 2;
  auto r = run_program({"/bin/sh", "-c", script}, options);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r.out.size(), 400000u * 17u);
  std::istringstream lines(r.out);
  std::string line;
  size_t n = 0, wrong = 0;
  while (std::getline(lines, line)) ++n, wrong += line != "0123456789abcdef";
  EXPECT_EQ(n, 400000u);
  EXPECT_EQ(wrong, 0u);
  EXPECT_EQ(r.stderr_tail, "last-but-one\nlast");
}

TEST(Process, StderrTailKeepsTheLastLinesOnly) {
  RunOptions options;
  options.stderr_tail_lines = 3;
  auto r = run_program({"/bin/sh", "-c",
                        "i=0; while [ $i -lt 50 ]; do i=$((i+1)); "
                        "echo line$i >&2; done; exit 1"},
                       options);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.stderr_tail, "line48\nline49\nline50");
  // A single endless line is cut to its last 8 KiB.
  r = run_program({"/bin/sh", "-c", "head -c 100000 /dev/zero | tr '\\0' x >&2"}, options);
  EXPECT_EQ(r.stderr_tail, std::string(8192, 'x'));
}

TEST(Process, StdoutModesAndStdinIsEmpty) {
  RunOptions discard;
  discard.stdout_mode = Stdout::kDiscard;
  auto r = run_program({"/usr/bin/printf", "visible"}, discard);
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(r.out, "");
  // stdin is /dev/null: `cat` ends at once instead of waiting on the test's terminal.
  r = run_program({"cat"});
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(r.out, "");
}

TEST(Process, ExtraEnvironmentIsAddedOrReplaced) {
  RunOptions options;
  options.extra_env = {"TXL_PROCESS_TEST=a b;$(c)", "HOME=/txl/home"};
  auto r =
      run_program({"/bin/sh", "-c", "printf '%s|%s' \"$TXL_PROCESS_TEST\" \"$HOME\""}, options);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r.out, "a b;$(c)|/txl/home");
  options.extra_env = {"NO_EQUALS_SIGN"};
  TXL_EXPECT_THROW_WITH(run_program({"true"}, options), "NO_EQUALS_SIGN");
}

// Pipes of this process that a child would inherit (not close-on-exec), at fd 3 and above.
int inheritable_pipes() {
  int n = 0;
  for (const auto& entry : stdfs::directory_iterator("/proc/self/fd")) {
    const std::string fd = entry.path().filename().string();
    std::error_code ec;
    if (std::stoi(fd) <= 2 || stdfs::read_symlink(entry.path(), ec).string().rfind("pipe:", 0))
      continue;
    std::ifstream info("/proc/self/fdinfo/" + fd);
    std::string key, flags;
    while (info >> key >> flags && key != "flags:") {
    }
    if ((std::stol(flags, nullptr, 8) & O_CLOEXEC) == 0) ++n;
  }
  return n;
}

int open_fds() {
  int n = 0;
  for (const auto& entry : stdfs::directory_iterator("/proc/self/fd")) (void)entry, ++n;
  return n;
}

TEST(Process, PipesDoNotLeakIntoTheChildOrStayOpenInTheParent) {
  // The shell lists its own descriptors above 2 that are pipes: only those this test process
  // already had open without close-on-exec may be there, none of run_program's.
  const std::string list =
      "cd /proc/$$/fd && for f in *; do if [ \"$f\" -gt 2 ]; then readlink \"$f\"; fi; done; true";
  const int before = open_fds();
  for (int i = 0; i < 20; ++i) {
    auto r = run_program({"/bin/sh", "-c", list});
    ASSERT_TRUE(r.ok()) << r.status() << " " << r.stderr_tail;
    int pipes = 0;
    std::istringstream lines(r.out);
    std::string line;
    while (std::getline(lines, line)) pipes += line.rfind("pipe:", 0) == 0;
    EXPECT_EQ(pipes, inheritable_pipes()) << r.out;
  }
  EXPECT_EQ(open_fds(), before);
}

// RunOptions::keep_fd: that descriptor reaches the child (a lock it then holds with the
// parent); without it, the child has none of the parent's close-on-exec descriptors.
TEST(Process, AKeptDescriptorReachesTheChild) {
  TempDir dir;
  const int fd = ::open((dir / "held").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  const std::string show = "readlink /proc/$$/fd/" + std::to_string(fd) + " || echo none";
  RunOptions keep;
  keep.keep_fd = fd;
  auto kept = run_program({"/bin/sh", "-c", show}, keep);
  auto closed = run_program({"/bin/sh", "-c", show});
  ::close(fd);
  EXPECT_EQ(kept.out, (dir / "held").string() + "\n");
  EXPECT_EQ(closed.out, "none\n");
}

TEST(Process, LastLines) {
  using txl::process::last_lines;
  EXPECT_EQ(last_lines("a\nb\nc\n", 2), "b\nc");
  EXPECT_EQ(last_lines("a\nb\nc", 5), "a\nb\nc");
  EXPECT_EQ(last_lines("a\nb\n\n\n", 1), "b");
  EXPECT_EQ(last_lines("abc", 0), "");
  EXPECT_EQ(last_lines("", 3), "");
}

}  // namespace
