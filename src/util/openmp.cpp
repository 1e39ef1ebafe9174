#include "txl/util/openmp.h"

#include <algorithm>
#include <cstdlib>
#include <thread>

#include <torch/torch.h>
#include <unistd.h>

#include "txl/util/allocator.h"

namespace txl {

void limit_openmp_spinning(char** argv) {
  if (std::getenv("GOMP_SPINCOUNT") != nullptr || std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  if (setenv("GOMP_SPINCOUNT", "30000", 1) != 0) return;
#if defined(__linux__)
  execv("/proc/self/exe", argv);  // returns only on failure: carry on with the default
#endif
  (void)argv;
}

int use_threads(int requested, int processes_per_node) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int threads = requested > 0 ? requested : std::max(1, cores / std::max(1, processes_per_node));
  torch::set_num_threads(threads);
  keep_freed_memory();
  return threads;
}

}  // namespace txl
