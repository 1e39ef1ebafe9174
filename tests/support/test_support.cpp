#include "support/test_support.h"

#include <dlfcn.h>
#include <ftw.h>
#include <unistd.h>

#include <cstdio>

#if defined(__linux__) && defined(__x86_64__) && defined(__GLIBC__)
#include <execinfo.h>
#include <signal.h>
#include <ucontext.h>

#include <cstdio>
#include <cstring>
#endif

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>

namespace txl::test {

namespace {

#if defined(__linux__) && defined(__x86_64__) && defined(__GLIBC__)
// A test that crashes (SIGSEGV, SIGBUS, SIGFPE, SIGILL) says where before it dies: the faulting
// instruction, the return address on top of the stack (where a call through a null pointer came
// from: no unwinder gets past a frame at address 0), and the stack as far as backtrace() walks
// it, each address with its library, symbol (tests link with -rdynamic) and offset in the file,
// for addr2line. Then the default action: the test still fails with the signal.
void describe(const char* what, void* address) {
  Dl_info info{};
  char line[512];
  if (address != nullptr && dladdr(address, &info) != 0 && info.dli_fname != nullptr) {
    std::snprintf(line, sizeof line, "[crash] %s %p: %s(%s) file offset 0x%lx\n", what, address,
                  info.dli_fname, info.dli_sname != nullptr ? info.dli_sname : "?",
                  static_cast<unsigned long>(static_cast<char*>(address) -
                                             static_cast<char*>(info.dli_fbase)));
  } else {
    std::snprintf(line, sizeof line, "[crash] %s %p\n", what, address);
  }
  (void)!write(STDERR_FILENO, line, std::strlen(line));
}

void on_crash(int signal, siginfo_t*, void* context) {
  const auto* uc = static_cast<const ucontext_t*>(context);
  char line[128];
  std::snprintf(line, sizeof line, "[crash] signal %d (%s)\n", signal, strsignal(signal));
  (void)!write(STDERR_FILENO, line, std::strlen(line));
  describe("at", reinterpret_cast<void*>(uc->uc_mcontext.gregs[REG_RIP]));
  describe("called from", *reinterpret_cast<void* const*>(uc->uc_mcontext.gregs[REG_RSP]));
  void* frames[64];
  const int n = backtrace(frames, 64);
  for (int i = 0; i < n; ++i) describe("frame", frames[i]);
  ::signal(signal, SIG_DFL);
  raise(signal);
}

[[maybe_unused]] const bool kCrashReport = [] {
  struct sigaction action {};
  action.sa_sigaction = on_crash;
  action.sa_flags = SA_SIGINFO | SA_RESETHAND;
  for (int s : {SIGSEGV, SIGBUS, SIGFPE, SIGILL}) sigaction(s, &action, nullptr);
  return true;
}();
#endif

std::string index_string(int64_t flat, at::IntArrayRef sizes) {
  std::vector<int64_t> idx(sizes.size());
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
    idx[d] = flat % sizes[d];
    flat /= sizes[d];
  }
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < idx.size(); ++i) out << (i ? ", " : "") << idx[i];
  out << "]";
  return out.str();
}

}  // namespace

::testing::AssertionResult tensor_near(const torch::Tensor& actual, const torch::Tensor& expected,
                                       double atol, double rtol) {
  if (actual.sizes() != expected.sizes()) {
    return ::testing::AssertionFailure()
           << "shape " << actual.sizes() << " != expected " << expected.sizes();
  }
  auto a = actual.detach().to(torch::kCPU, torch::kDouble).contiguous().view(-1);
  auto e = expected.detach().to(torch::kCPU, torch::kDouble).contiguous().view(-1);
  auto a_acc = a.accessor<double, 1>();
  auto e_acc = e.accessor<double, 1>();
  for (int64_t i = 0; i < a.numel(); ++i) {
    double x = a_acc[i], y = e_acc[i];
    bool both_nan = std::isnan(x) && std::isnan(y);
    bool both_inf = std::isinf(x) && std::isinf(y) && (x > 0) == (y > 0);
    if (both_nan || both_inf) continue;
    if (!(std::abs(x - y) <= atol + rtol * std::abs(y))) {
      double max_diff = (a - e).abs().nan_to_num(0, 0, 0).max().item<double>();
      return ::testing::AssertionFailure()
             << "first mismatch at " << index_string(i, actual.sizes()) << ": " << x
             << " vs expected " << y << " (atol " << atol << ", rtol " << rtol << "; max |diff| "
             << max_diff << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult tensor_equal(const torch::Tensor& actual,
                                        const torch::Tensor& expected) {
  return tensor_near(actual, expected, 0.0, 0.0);
}

TempDir::TempDir() {
  static std::atomic<int> counter{0};
  std::random_device rd;
  path_ = std::filesystem::temp_directory_path() /
          ("txl_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) + "_" +
           std::to_string(rd()));
  std::filesystem::create_directories(path_);
}

TempDir::~TempDir() { remove_tree(path_); }

void remove_tree(const std::filesystem::path& path) {
  // Children first (FTW_DEPTH), links removed rather than followed (FTW_PHYS); an entry that
  // cannot be removed is left and the walk goes on.
  ::nftw(
      path.c_str(),
      [](const char* entry, const struct stat*, int, struct FTW*) {
        (void)std::remove(entry);
        return 0;
      },
      32, FTW_DEPTH | FTW_PHYS);
}

void write_text(const std::filesystem::path& path, const std::string& content) {
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary);
  out << content;
}

::testing::AssertionResult nothing_executed(const std::filesystem::path& dir) {
  for (const auto& where : {std::filesystem::current_path(), dir, dir.parent_path()}) {
    std::error_code ec;
    if (std::filesystem::exists(where / "PWNED", ec))
      return ::testing::AssertionFailure() << "a shell ran: " << (where / "PWNED") << " exists";
  }
  return ::testing::AssertionSuccess();
}

std::filesystem::path source_dir() {
  const char* dir = std::getenv("TXL_SOURCE_DIR");
  return dir ? std::filesystem::path(dir) : std::filesystem::current_path();
}

std::filesystem::path bin_dir() {
  const char* dir = std::getenv("TXL_BIN_DIR");
  return dir != nullptr && *dir != '\0' ? std::filesystem::path(dir)
                                        : std::filesystem::path(TXL_TEST_BIN_DIR);
}

std::string python() {
  const char* env = std::getenv("TXL_TEST_PYTHON");
  return env != nullptr && *env != '\0' ? env : TXL_TEST_PYTHON;
}

OpenBlasThreads::OpenBlasThreads()
    : set_(reinterpret_cast<void (*)(int)>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))),
      get_(reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"))) {
  if (available()) before_ = get_();
}

OpenBlasThreads::~OpenBlasThreads() {
  if (available()) set_(before_);
}

void OpenBlasThreads::set(int threads) const {
  if (available()) set_(threads);
}

}  // namespace txl::test
