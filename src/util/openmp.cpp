#include "txl/util/openmp.h"

#include <cstdlib>

#include <unistd.h>

namespace txl {

void limit_openmp_spinning(char** argv) {
  if (std::getenv("GOMP_SPINCOUNT") != nullptr || std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  if (setenv("GOMP_SPINCOUNT", "30000", 1) != 0) return;
#if defined(__linux__)
  execv("/proc/self/exe", argv);  // returns only on failure: carry on with the default
#endif
  (void)argv;
}

}  // namespace txl
