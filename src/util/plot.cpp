#include "txl/util/plot.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>
#include <exception>
#include <system_error>

#include "txl/util/process.h"

// Set by src/util/CMakeLists.txt from the CMake cache entry TXL_PYTHON.
#ifndef TXL_DEFAULT_PYTHON
#define TXL_DEFAULT_PYTHON "python3"
#endif

namespace txl::plot {

namespace stdfs = std::filesystem;

namespace {

std::string env_or_empty(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : "";
}

// The last lines of stderr on one line, for a log line or a line of report.md.
std::string one_line(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '\n') {
      out += " | ";
    } else if (c != '\r') {
      out += c;
    }
  }
  return out;
}

// Why the run did not draw, naming the interpreter or the script and the fix.
ScriptResult failure(const process::ProgramResult& r, const std::string& python,
                     const stdfs::path& script) {
  if (!r.started && r.start_errno == ENOENT) {
    return {Outcome::kNoInterpreter,
            fmt::format("{} was not found; install python3 and python3-matplotlib, or set "
                        "TXL_PYTHON to a python that has matplotlib",
                        python)};
  }
  if (!r.started) {
    return {Outcome::kNoInterpreter,
            fmt::format("{} cannot be run ({}); set TXL_PYTHON to a python that has matplotlib",
                        python, r.error)};
  }
  const std::string name = script.filename().string();
  if (r.signal == 0 && r.exit_code == kExitNoMatplotlib) {
    return {Outcome::kNoMatplotlib,
            fmt::format("{} exited with status {}: matplotlib is not installed for {} (apt "
                        "install python3-matplotlib, or set TXL_PYTHON to a python that has it)",
                        name, r.exit_code, python)};
  }
  const std::string why = one_line(r.stderr_tail);
  return {Outcome::kFailed,
          fmt::format("{} {}{}{}", name, r.status(), why.empty() ? "" : ": ", why)};
}

}  // namespace

std::string python_interpreter() {
  std::string python = env_or_empty("TXL_PYTHON");
  return python.empty() ? TXL_DEFAULT_PYTHON : python;
}

stdfs::path script_path() {
  const std::string env = env_or_empty("TXL_PLOT_SCRIPT");
  if (!env.empty()) return env;
  std::error_code ec;
  const stdfs::path exe = stdfs::read_symlink("/proc/self/exe", ec);
  if (ec) return {};
  return (exe.parent_path() / ".." / "share" / "txl" / "plot_report.py").lexically_normal();
}

ScriptResult run_script(const std::vector<std::string>& args, const ScriptOptions& options) {
  const std::string python = options.python.empty() ? python_interpreter() : options.python;
  const stdfs::path script = options.script.empty() ? script_path() : options.script;
  std::error_code ec;
  if (script.empty()) {
    return {Outcome::kNoScript,
            "the plot script cannot be located (no /proc/self/exe); set TXL_PLOT_SCRIPT"};
  }
  if (!stdfs::is_regular_file(script, ec)) {
    return {Outcome::kNoScript,
            fmt::format("the plot script {} was not found (build or install txl, or set "
                        "TXL_PLOT_SCRIPT to tools/plot_report.py)",
                        script.string())};
  }
  std::vector<std::string> argv = {python, script.string()};
  argv.insert(argv.end(), args.begin(), args.end());
  process::RunOptions run;
  run.stderr_tail_lines = 4;
  run.extra_env = {"MPLBACKEND=Agg"};  // files only, never a display
  process::ProgramResult r;
  try {
    r = process::run_program(argv, run);
  } catch (const std::exception& e) {
    return {Outcome::kFailed, fmt::format("cannot run {}: {}", script.string(), e.what())};
  }
  if (r.ok()) return {Outcome::kDrawn, ""};
  return failure(r, python, script);
}

bool matplotlib_available(const std::string& python) {
  process::RunOptions run;
  run.stdout_mode = process::Stdout::kDiscard;
  run.stderr_tail_lines = 0;
  try {
    return process::run_program(
               {python.empty() ? python_interpreter() : python, "-c", "import matplotlib"}, run)
        .ok();
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace txl::plot
