#include "txl/util/process_setup.h"

#include <dlfcn.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <string>
#include <thread>

#include <torch/torch.h>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "txl/util/cpu.h"
#include "txl/util/error.h"
#include "txl/util/fs.h"

namespace txl {

namespace {

// The bench model on this project's 2-core machine (txl-bench, 2 threads, tokens/s): LibTorch's
// element-wise kernels run on OpenMP threads, fp32 matrix products on OpenBLAS's own threads.
//
//   spin rounds (GOMP_SPINCOUNT)   training fp32   training bf16   evaluation fp32
//   default (300,000)              1,400-1,700     4,500-5,400     3,600-4,200
//   0 (OMP_WAIT_POLICY=passive)    2,600-2,700     3,800-4,300     7,600-8,200
//   3,000                          2,440           3,970           8,710
//   30,000                         2,760           5,270           8,220
constexpr const char* kSpinCount = "30000";

// True when the user chose how OpenMP threads wait: their choice is kept.
bool spinning_chosen() {
  return std::getenv("GOMP_SPINCOUNT") != nullptr || std::getenv("OMP_WAIT_POLICY") != nullptr;
}

void check_argv(char** argv) {
  TXL_CHECK(argv != nullptr,
            "ProcessSetup::apply: limit_openmp_spinning and choose_openblas_core "
            "re-execute the program and need main's argv (or set them to false)");
}

// Returns only when the re-execution failed: the program carries on as it was.
void reexecute(char** argv) {
#if defined(__linux__)
  execv("/proc/self/exe", argv);
#endif
}

void keep_freed_blocks_in_heap() {
#if defined(__GLIBC__)
  mallopt(M_MMAP_MAX, 0);                // no block is given back with munmap
  mallopt(M_TRIM_THRESHOLD, INT_MAX);    // freed memory at the top of the heap is kept
  mallopt(M_TOP_PAD, 64 * 1024 * 1024);  // the heap grows in steps of 64 MiB
#endif
}

// The SIGBUS action found when the handler was installed: faults outside mapped files go there.
struct sigaction g_bus_before {};
std::atomic<bool> g_bus_handler_installed{false};
std::atomic<bool> g_bus_fault_reported{false};

// Only async-signal-safe calls (write, _exit, pause, sigaction, raise) and lock-free reads.
void on_bus_error(int sig, siginfo_t* info, void* context) {
  // A fault of the kernel's (si_code > 0) has the faulting address; kill -BUS has none.
  const std::string_view message =
      info != nullptr && info->si_code > 0 ? fs::mapped_file_fault_message(info->si_addr) : "";
  if (!message.empty()) {
    // Threads reading the file at once fault at once: one writes the line, _exit ends them all.
    if (g_bus_fault_reported.exchange(true)) {
      for (;;) ::pause();
    }
    for (size_t done = 0; done < message.size();) {
      const ssize_t n = ::write(STDERR_FILENO, message.data() + done, message.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    ::_exit(ProcessSetup::kExitMappedFileChanged);
  }
  const struct sigaction& before = g_bus_before;
  if ((before.sa_flags & SA_SIGINFO) != 0 && before.sa_sigaction != nullptr) {
    before.sa_sigaction(sig, info, context);
    return;
  }
  if ((before.sa_flags & SA_SIGINFO) == 0 && before.sa_handler != SIG_DFL &&
      before.sa_handler != SIG_IGN) {
    before.sa_handler(sig);
    return;
  }
  // The default action: pending now, it ends the process as soon as the handler returns.
  struct sigaction fallback {};
  fallback.sa_handler = SIG_DFL;
  ::sigaction(sig, &fallback, nullptr);
  ::raise(sig);
}

// OpenBLAS's own entry point, among the loaded libraries (none when LibTorch multiplies with
// another BLAS, whose threads LibTorch sets itself).
void set_openblas_threads(int n) {
  using SetThreads = void (*)(int);
  static const auto set =
      reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  if (set != nullptr) set(n);
}

void install_bus_error_handler() {
  if (g_bus_handler_installed.exchange(true)) return;  // once: never chained to itself
  struct sigaction action {};
  action.sa_sigaction = on_bus_error;
  action.sa_flags = SA_SIGINFO;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGBUS, &action, &g_bus_before);
}

}  // namespace

namespace detail {

std::string openblas_core_override(const std::string& core, bool cpu_has_avx512) {
  // OpenBLAS's x86 cores with AVX-512 kernels; every other one leaves half the vector unit idle.
  const bool avx512_core = core == "SkylakeX" || core == "Cooperlake" || core == "SapphireRapids";
  return !core.empty() && !avx512_core && cpu_has_avx512 ? "SkylakeX" : "";
}

}  // namespace detail

void set_compute_threads(int n) {
  torch::set_num_threads(n);
  set_openblas_threads(n);
}

int compute_threads() { return torch::get_num_threads(); }

int ProcessSetup::resolved_threads() const {
  if (threads > 0) return threads;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, cores / std::max(1, processes_per_node));
}

int ProcessSetup::apply(char** argv) const {
  const bool spin = limit_openmp_spinning && !spinning_chosen();
  const std::string core =
      choose_openblas_core && std::getenv("OPENBLAS_CORETYPE") == nullptr
          ? detail::openblas_core_override(util::openblas_core(), util::cpu_features().avx512)
          : "";
  if (spin || !core.empty()) {
    check_argv(argv);  // before the environment changes
    bool changed = spin && setenv("GOMP_SPINCOUNT", kSpinCount, 1) == 0;
    if (!core.empty()) changed = setenv("OPENBLAS_CORETYPE", core.c_str(), 1) == 0 || changed;
    if (changed) reexecute(argv);
  }
  const int n = resolved_threads();
  set_compute_threads(n);
  if (keep_freed_memory) keep_freed_blocks_in_heap();
  if (report_changed_mapped_files) install_bus_error_handler();
  return n;
}

}  // namespace txl
