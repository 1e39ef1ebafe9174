#include "txl/util/process_setup.h"

#include <unistd.h>

#include <algorithm>
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

}  // namespace

namespace detail {

std::string openblas_core_override(const std::string& core, bool cpu_has_avx512) {
  // OpenBLAS's x86 cores with AVX-512 kernels; every other one leaves half the vector unit idle.
  const bool avx512_core = core == "SkylakeX" || core == "Cooperlake" || core == "SapphireRapids";
  return !core.empty() && !avx512_core && cpu_has_avx512 ? "SkylakeX" : "";
}

}  // namespace detail

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
  torch::set_num_threads(n);
  if (keep_freed_memory) keep_freed_blocks_in_heap();
  return n;
}

}  // namespace txl
