#pragma once
// Running another program, without a shell. The program and its arguments travel as an argv
// vector and reach the child byte for byte: quotes, `;`, `$(...)`, backticks, `*`, spaces and
// newlines are plain characters, never syntax. Every caller in txl (the plot script, the
// `bible` reader) goes through run_program.

#include <atomic>
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace txl::process {

// What happens to the child's standard output.
enum class Stdout {
  kInherit,  // the parent's stdout
  kCapture,  // collected whole into ProgramResult::out (any size)
  kDiscard,  // /dev/null
};

struct RunOptions {
  Stdout stdout_mode = Stdout::kCapture;  // e.g. kDiscard for a chatty helper
  // Lines kept from the end of the child's stderr (at most 8 KiB), for error messages; the rest
  // of stderr is read and dropped, so the child never blocks on a full pipe.
  std::size_t stderr_tail_lines = 20;
  // "NAME=value" entries added to the parent's environment (replacing a variable of that name),
  // e.g. {"MPLBACKEND=Agg"}.
  std::vector<std::string> extra_env;
  // When set: the child's stdout and stderr both go to this file (created or truncated), a log
  // to keep, and stdout_mode is ignored; stderr_tail then holds the last lines this child wrote.
  std::string output_file;
  // With output_file: the child's output goes after what the file already holds (a log kept
  // across runs) instead of replacing it.
  bool append_output = false;
  // With output_file: called with each line the child writes there (without its newline), while
  // it runs (the file is read every 50 ms) and once more for its last lines after it exits; from
  // the thread that called run_program. E.g. to show a child's warnings on the parent's stderr.
  std::function<void(const std::string& line)> on_output_line;
  // With output_file: while the child runs, a non-zero value appearing here (e.g. the parent's
  // stop flag, set by its SIGINT handler) is sent to the child as that signal, once, so that a
  // Ctrl-C the child did not receive itself still stops it cleanly.
  const std::atomic<int>* forward_signal = nullptr;
  // A descriptor of this process that the child keeps open under the same number (every other
  // one is closed at exec), e.g. a fs::RunLock's file: the child then holds the lock with this
  // process, and keeps it should this one die first. -1 = none.
  int keep_fd = -1;
};

struct ProgramResult {
  // False when the program could not be started (not on PATH, not executable); `error` says why.
  bool started = false;
  int exit_code = -1;       // exit status when the program exited; -1 otherwise
  int signal = 0;           // the signal that ended it (e.g. 9 for SIGKILL); 0 when it exited
  std::string out;          // stdout, when captured
  std::string stderr_tail;  // the last RunOptions::stderr_tail_lines lines of stderr
  std::string error;        // why it did not start, naming the program: "foo: No such file..."
  int start_errno = 0;      // errno of the failed start: ENOENT (not found), EACCES, ...

  // Started, exited, status 0.
  bool ok() const { return started && signal == 0 && exit_code == 0; }
  // For messages after the program's name: "exited with status 3", "was killed by signal 9
  // (Killed)" or "could not be started: " + error.
  std::string status() const;
};

// Runs argv[0] with arguments argv[1..] and waits for it. argv[0] without a '/' is looked up on
// PATH (posix_spawnp); no shell is involved. The child's stdin is /dev/null. A program that
// cannot be started is not an exception: the result says started = false and names it, so
// callers choose between a warning (plots) and an error (a corpus). Throws txl::Error only for
// an empty argv or when the operating system refuses pipes or processes.
ProgramResult run_program(const std::vector<std::string>& argv, const RunOptions& options = {});

// `words` as one line that a POSIX shell reads back as exactly those words: a plain word as is,
// any other single-quoted ("it's" -> 'it'\''s'). Only for printing a command the user may copy
// (the one that resumes a run); txl itself never runs a shell.
std::string shell_command(const std::vector<std::string>& words);

// The last `lines` lines of `text` (without a final newline), for quoting stderr in messages.
std::string last_lines(const std::string& text, std::size_t lines);

}  // namespace txl::process
