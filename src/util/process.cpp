#include "txl/util/process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "txl/util/error.h"

extern char** environ;

namespace txl::process {

namespace {

constexpr std::size_t kTailBytes = 8192;  // most of stderr kept, whatever the line count

// A file descriptor closed when it goes out of scope.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    reset();
    fd_ = other.fd_;
    other.fd_ = -1;
    return *this;
  }
  ~UniqueFd() { reset(); }
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

struct Pipe {
  UniqueFd read, write;
};

// A close-on-exec descriptor numbered 3 or above, so that the child's dup2 onto 0, 1 or 2 never
// meets the same number (where close-on-exec would survive) even when the parent closed those.
UniqueFd above_stdio(int fd) {
  if (fd > STDERR_FILENO) return UniqueFd(fd);
  int moved = ::fcntl(fd, F_DUPFD_CLOEXEC, STDERR_FILENO + 1);
  const int err = errno;
  ::close(fd);
  TXL_CHECK(moved >= 0, "cannot duplicate a pipe descriptor: ", std::strerror(err));
  return UniqueFd(moved);
}

// Both ends close-on-exec: no other child spawned meanwhile (by another thread) inherits them.
Pipe make_pipe() {
  int fds[2];
  TXL_CHECK(::pipe2(fds, O_CLOEXEC) == 0, "cannot create a pipe: ", std::strerror(errno));
  Pipe p;
  p.read = above_stdio(fds[0]);
  p.write = above_stdio(fds[1]);
  return p;
}

// The parent's environment with `extra` ("NAME=value") added or replacing same-named entries.
std::vector<std::string> child_environment(const std::vector<std::string>& extra) {
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) env.emplace_back(*e);
  for (const auto& entry : extra) {
    const auto eq = entry.find('=');
    TXL_CHECK(eq != std::string::npos && eq > 0, "environment entry '", entry,
              "' is not NAME=value");
    const std::string prefix = entry.substr(0, eq + 1);
    bool replaced = false;
    for (auto& e : env) {
      if (e.compare(0, prefix.size(), prefix) == 0) e = entry, replaced = true;
    }
    if (!replaced) env.push_back(entry);
  }
  return env;
}

std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// Where the child's stdout and stderr go; the parent reads the pipes' other ends.
struct ChildStreams {
  Pipe out, err;
};

// Starts the child; returns 0 and sets *pid, or the errno of the failed spawn.
int spawn(std::vector<std::string> argv, const RunOptions& options, const ChildStreams& streams,
          pid_t* pid) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  if (!options.output_file.empty()) {
    const int replace = options.append_output ? 0 : O_TRUNC;
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, options.output_file.c_str(),
                                     O_WRONLY | O_CREAT | O_APPEND | replace, 0644);
    posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  } else if (streams.out.write.valid()) {
    posix_spawn_file_actions_adddup2(&actions, streams.out.write.get(), STDOUT_FILENO);
  } else if (options.stdout_mode == Stdout::kDiscard) {
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  }
  if (!options.output_file.empty()) {
    // both already go to the file
  } else if (streams.err.write.valid()) {
    posix_spawn_file_actions_adddup2(&actions, streams.err.write.get(), STDERR_FILENO);
  } else {
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  }
  // Last, when every other descriptor is in place; dup2 onto itself clears its close-on-exec flag
  // (glibc 2.29 and later).
  if (options.keep_fd >= 0)
    posix_spawn_file_actions_adddup2(&actions, options.keep_fd, options.keep_fd);
  // The child starts with no blocked signals and SIGPIPE at its default, whatever the parent did.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGPIPE);
  sigaddset(&defaults, SIGXFSZ);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);

  std::vector<std::string> env = child_environment(options.extra_env);
  auto c_argv = c_strings(argv);
  auto c_env = c_strings(env);
  const int rc = ::posix_spawnp(pid, c_argv[0], &actions, &attr, c_argv.data(), c_env.data());
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&actions);
  return rc;
}

// Reads both pipes until the child closes them, with poll so that neither can fill up and block
// the child while the parent waits on the other.
void drain(UniqueFd out, UniqueFd err, std::size_t tail_lines, ProgramResult* result) {
  std::string tail;
  char buffer[1 << 16];
  while (out.valid() || err.valid()) {
    pollfd fds[2];
    UniqueFd* owners[2];
    nfds_t n = 0;
    for (UniqueFd* fd : {&out, &err}) {
      if (!fd->valid()) continue;
      fds[n] = {fd->get(), POLLIN, 0};
      owners[n++] = fd;
    }
    if (::poll(fds, n, -1) < 0) {
      TXL_CHECK(errno == EINTR, "cannot wait for a child's output: ", std::strerror(errno));
      continue;
    }
    for (nfds_t i = 0; i < n; ++i) {
      if (fds[i].revents == 0) continue;
      const ssize_t got = ::read(fds[i].fd, buffer, sizeof buffer);
      if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (got <= 0) {
        owners[i]->reset();
        continue;
      }
      std::string& target = owners[i] == &out ? result->out : tail;
      target.append(buffer, static_cast<std::size_t>(got));
      if (owners[i] == &err && tail.size() > 2 * kTailBytes)
        tail.erase(0, tail.size() - kTailBytes);
    }
  }
  tail = last_lines(tail, tail_lines);
  if (tail.size() > kTailBytes) tail.erase(0, tail.size() - kTailBytes);
  result->stderr_tail = std::move(tail);
}

// How the child ended, from waitpid's status.
void record_status(int status, ProgramResult* result) {
  if (WIFEXITED(status)) result->exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result->signal = WTERMSIG(status);
}

void wait_for(pid_t pid, ProgramResult* result) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    TXL_CHECK(errno == EINTR, "cannot wait for child process ", pid, ": ", std::strerror(errno));
  }
  record_status(status, result);
}

// The lines a child appends to its output file, read from `offset` on (what it held before the
// child started is not the child's), each complete one given to `on_line` as it arrives.
class OutputFollower {
 public:
  OutputFollower(const std::string& path, std::uintmax_t offset,
                 std::function<void(const std::string&)> on_line)
      : path_(path), offset_(offset), on_line_(std::move(on_line)) {}

  // Gives on_line every complete line written since the last call; at the end, the last one too.
  void poll(bool at_end) {
    if (!on_line_) return;
    if (!file_.is_open()) {
      file_.open(path_, std::ios::binary);  // the child may not have created it yet
      if (!file_.is_open()) return;
      file_.seekg(static_cast<std::streamoff>(offset_));
    }
    char buffer[1 << 14];
    for (;;) {
      file_.read(buffer, sizeof buffer);
      const std::streamsize got = file_.gcount();
      if (got <= 0) break;
      pending_.append(buffer, static_cast<std::size_t>(got));
    }
    file_.clear();  // at the end of what is written so far: read on from here next time
    std::size_t begin = 0;
    for (std::size_t end; (end = pending_.find('\n', begin)) != std::string::npos; begin = end + 1)
      on_line_(pending_.substr(begin, end - begin));
    pending_.erase(0, begin);
    if (at_end && !pending_.empty()) on_line_(pending_);
  }

 private:
  std::string path_;
  std::uintmax_t offset_;
  std::function<void(const std::string&)> on_line_;
  std::ifstream file_;
  std::string pending_;  // a line not finished yet
};

// wait_polling's loop: until the child exits, every 50 ms.
void poll_until_exit(pid_t pid, const std::atomic<int>* forward, OutputFollower& follower,
                     ProgramResult* result, bool& sent) {
  for (;;) {
    int status = 0;
    const pid_t done = ::waitpid(pid, &status, WNOHANG);
    TXL_CHECK(done >= 0 || errno == EINTR, "cannot wait for child process ", pid, ": ",
              std::strerror(errno));
    if (done == pid) {
      record_status(status, result);
      follower.poll(/*at_end=*/true);
      return;
    }
    if (const int sig = forward != nullptr ? forward->load() : 0; sig != 0 && !sent) {
      ::kill(pid, sig);
      sent = true;
    }
    follower.poll(/*at_end=*/false);
    ::usleep(50 * 1000);
  }
}

// wait_for, checking every 50 ms: sends the child *forward (when given) once it becomes
// non-zero, and gives `follower` the lines the child wrote meanwhile.
void wait_polling(pid_t pid, const std::atomic<int>* forward, OutputFollower& follower,
                  ProgramResult* result) {
  bool sent = false;
  try {
    poll_until_exit(pid, forward, follower, result, sent);
  } catch (...) {  // on_output_line threw: reap the child (unless it was) before going on
    const bool reaped = result->exit_code >= 0 || result->signal != 0;
    ProgramResult ignored;
    if (!reaped) wait_for(pid, &ignored);
    throw;
  }
}

// The size of `path` (0 when it does not exist): where a child appending to it starts.
std::uintmax_t size_of(const std::string& path) {
  std::error_code ec;
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  return ec ? 0 : size;
}

}  // namespace

std::string ProgramResult::status() const {
  if (!started) return "could not be started: " + error;
  if (signal != 0) {
    return "was killed by signal " + std::to_string(signal) + " (" + ::strsignal(signal) + ")";
  }
  return "exited with status " + std::to_string(exit_code);
}

ProgramResult run_program(const std::vector<std::string>& argv, const RunOptions& options) {
  TXL_CHECK(!argv.empty() && !argv[0].empty(), "run_program needs a program to run");
  ChildStreams streams;
  const bool to_file = !options.output_file.empty();
  if (options.stdout_mode == Stdout::kCapture && !to_file) streams.out = make_pipe();
  if (options.stderr_tail_lines > 0 && !to_file) streams.err = make_pipe();
  ProgramResult result;
  // Where this child's output starts in the file: after what an earlier run left there.
  const std::uintmax_t offset = to_file && options.append_output ? size_of(options.output_file) : 0;
  pid_t pid = 0;
  const int rc = spawn(argv, options, streams, &pid);
  streams.out.write.reset();  // the child holds its own copies; EOF comes when it exits
  streams.err.write.reset();
  if (rc != 0) {
    result.start_errno = rc;
    result.error = argv[0] + ": " + std::strerror(rc);
    if (rc == ENOENT && argv[0].find('/') == std::string::npos) result.error += " (not on PATH)";
    return result;
  }
  result.started = true;
  try {
    drain(std::move(streams.out.read), std::move(streams.err.read), options.stderr_tail_lines,
          &result);
  } catch (...) {
    ProgramResult ignored;
    wait_for(pid, &ignored);  // pipes closed above: the child ends (SIGPIPE) and is reaped
    throw;
  }
  if (to_file && (options.forward_signal != nullptr || options.on_output_line)) {
    OutputFollower follower(options.output_file, offset, options.on_output_line);
    wait_polling(pid, options.forward_signal, follower, &result);
  } else {
    wait_for(pid, &result);
  }
  if (to_file && options.stderr_tail_lines > 0) {
    std::ifstream in(options.output_file, std::ios::binary);
    in.seekg(static_cast<std::streamoff>(offset));
    std::ostringstream text;
    text << in.rdbuf();
    result.stderr_tail = last_lines(text.str(), options.stderr_tail_lines);
  }
  return result;
}

std::string shell_command(const std::vector<std::string>& words) {
  static const std::string kPlain =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-/=:,+@%";
  std::string out;
  for (const std::string& word : words) {
    if (!out.empty()) out += ' ';
    if (!word.empty() && word.find_first_not_of(kPlain) == std::string::npos) {
      out += word;
      continue;
    }
    out += '\'';
    for (char c : word) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    out += '\'';
  }
  return out;
}

std::string last_lines(const std::string& text, std::size_t lines) {
  std::size_t end = text.size();
  while (end > 0 && text[end - 1] == '\n') --end;
  if (lines == 0) return "";
  std::size_t begin = end;
  for (std::size_t seen = 0; begin > 0; --begin) {
    if (text[begin - 1] == '\n' && ++seen == lines) break;
  }
  return text.substr(begin, end - begin);
}

}  // namespace txl::process
