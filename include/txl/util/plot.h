#pragma once
// The one plot script, tools/plot_report.py, run through process::run_program (no shell). It is
// found beside the running program, as installed or built: <exe dir>/../share/txl/plot_report.py
// ($TXL_PLOT_SCRIPT overrides). Its interpreter was chosen when txl was configured (CMake option
// TXL_PYTHON; one that can import matplotlib preferred) and $TXL_PYTHON overrides it. Plots are
// a convenience: every way of failing is a reason to report, never an exception.

#include <filesystem>
#include <string>
#include <vector>

namespace txl::plot {

// The script's exit status when `import matplotlib` fails (2 is a usage or input error).
constexpr int kExitNoMatplotlib = 3;

// $TXL_PYTHON when set and not empty, else the interpreter chosen at configure time.
std::string python_interpreter();

// $TXL_PLOT_SCRIPT when set and not empty, else <dir of /proc/self/exe>/../share/txl/
// plot_report.py (may not exist; run_script says so).
std::filesystem::path script_path();

struct ScriptOptions {
  std::string python;            // "" = python_interpreter()
  std::filesystem::path script;  // "" = script_path()
};

enum class Outcome {
  kDrawn,          // exit status 0
  kNoScript,       // the script file does not exist
  kNoInterpreter,  // the interpreter could not be started
  kNoMatplotlib,   // the interpreter lacks matplotlib (exit kExitNoMatplotlib)
  kFailed,         // any other exit status or a signal
};

struct ScriptResult {
  Outcome outcome = Outcome::kFailed;
  // "" when drawn, else one line saying why not and what to do, e.g.
  // "python3 was not found; install python3 and python3-matplotlib, or set TXL_PYTHON ..." or
  // "plot_report.py exited with status 1: ValueError: ...".
  std::string note;
  bool drawn() const { return outcome == Outcome::kDrawn; }
};

// Runs `python script args...` and waits. Never throws for a missing or failing plotter.
ScriptResult run_script(const std::vector<std::string>& args, const ScriptOptions& options = {});

// True when `python` (default python_interpreter()) can import matplotlib.
bool matplotlib_available(const std::string& python = "");

}  // namespace txl::plot
