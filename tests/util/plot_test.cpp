// plot::run_script: where the script and the interpreter come from, and one distinct reason for
// each way of not drawing (no script, no interpreter, no matplotlib, the script failed).
#include "txl/util/plot.h"

#include <cstdlib>

#include "support/test_support.h"
#include "txl/util/fs.h"

namespace {

namespace stdfs = std::filesystem;
using txl::plot::Outcome;
using txl::test::TempDir;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// An executable shell script standing in for python.
stdfs::path fake_python(const TempDir& dir, const std::string& body) {
  auto path = dir / "python";
  txl::test::write_text(path, "#!/bin/sh\n" + body + "\n");
  stdfs::permissions(path, stdfs::perms::owner_all);
  return path;
}

// Sets an environment variable for one scope, then puts the old value back.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() { had_ ? ::setenv(name_, old_.c_str(), 1) : ::unsetenv(name_); }

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

TEST(Plot, ScriptIsFoundBesideTheProgramAsBuilt) {
  ScopedEnv unset("TXL_PLOT_SCRIPT", "");
  const auto script = txl::plot::script_path();
  // Test binaries live in build/bin, so the build tree's share/txl copy is the one found.
  std::error_code ec;
  const auto exe = stdfs::read_symlink("/proc/self/exe", ec);
  ASSERT_FALSE(ec);
  EXPECT_EQ(script, (exe.parent_path().parent_path() / "share" / "txl" / "plot_report.py"));
  ASSERT_TRUE(stdfs::is_regular_file(script)) << script;
  // The copy is the script of the source tree, not a stale one.
  EXPECT_EQ(txl::fs::read_file(script),
            txl::fs::read_file(txl::test::source_dir() / "tools/plot_report.py"));
}

TEST(Plot, EnvironmentOverridesScriptAndInterpreter) {
  {
    ScopedEnv script("TXL_PLOT_SCRIPT", "/elsewhere/plot.py");
    EXPECT_EQ(txl::plot::script_path(), stdfs::path("/elsewhere/plot.py"));
  }
  const std::string configured = txl::plot::python_interpreter();
  EXPECT_FALSE(configured.empty());
  {
    ScopedEnv python("TXL_PYTHON", "/opt/my/python3");
    EXPECT_EQ(txl::plot::python_interpreter(), "/opt/my/python3");
  }
  ScopedEnv empty("TXL_PYTHON", "");
  EXPECT_EQ(txl::plot::python_interpreter(), configured);
}

TEST(Plot, EachFailureHasItsOwnReason) {
  TempDir dir;
  txl::test::write_text(dir / "plot.py", "unused: the stand-in python does not read it\n");
  txl::plot::ScriptOptions options;
  options.script = dir / "plot.py";

  options.python = (dir / "no" / "python3").string();
  auto r = txl::plot::run_script({"sweep"}, options);
  EXPECT_EQ(r.outcome, Outcome::kNoInterpreter);
  EXPECT_TRUE(contains(r.note, options.python + " was not found")) << r.note;
  EXPECT_TRUE(contains(r.note, "TXL_PYTHON")) << r.note;

  options.python = fake_python(dir, "echo 'matplotlib is not installed' >&2; exit 3").string();
  r = txl::plot::run_script({"sweep"}, options);
  EXPECT_EQ(r.outcome, Outcome::kNoMatplotlib);
  EXPECT_TRUE(contains(r.note, "matplotlib is not installed for " + options.python)) << r.note;

  options.python =
      fake_python(dir, "echo 'Traceback' >&2; echo 'ValueError: bad' >&2; exit 1").string();
  r = txl::plot::run_script({"sweep"}, options);
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_EQ(r.note, "plot.py exited with status 1: Traceback | ValueError: bad");

  options.python = fake_python(dir, "kill -TERM $$").string();
  r = txl::plot::run_script({"sweep"}, options);
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_TRUE(contains(r.note, "plot.py was killed by signal 15")) << r.note;

  options.script = dir / "missing.py";
  r = txl::plot::run_script({"sweep"}, options);
  EXPECT_EQ(r.outcome, Outcome::kNoScript);
  EXPECT_TRUE(contains(r.note, "missing.py was not found")) << r.note;
  EXPECT_FALSE(r.drawn());
}

TEST(Plot, ArgumentsReachTheScriptVerbatim) {
  TempDir dir;
  txl::test::write_text(dir / "plot.py", "");
  txl::plot::ScriptOptions options;
  options.script = dir / "plot.py";
  // The stand-in writes its arguments, one per line, into args.txt beside itself.
  options.python =
      fake_python(dir, "printf '%s\\n' \"$@\" > \"$(dirname \"$0\")/args.txt\"").string();
  const std::string hostile = "it's; $(touch PWNED) `touch PWNED` *";
  auto r = txl::plot::run_script({hostile, "two\nlines"}, options);
  ASSERT_TRUE(r.drawn()) << r.note;
  EXPECT_EQ(txl::fs::read_file(dir / "args.txt"),
            (dir / "plot.py").string() + "\n" + hostile + "\ntwo\nlines\n");
  EXPECT_FALSE(stdfs::exists("PWNED"));
  EXPECT_FALSE(stdfs::exists(dir / "PWNED"));
}

}  // namespace
