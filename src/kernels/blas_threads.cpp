#include "txl/kernels/blas_threads.h"

#include <dlfcn.h>

#include <ATen/Parallel.h>

namespace txl::kernels {

bool blas_has_own_threads() {
  using GetThreads = int (*)();
  // OpenBLAS's own entry point, among the loaded libraries (null when OpenBLAS is not loaded).
  static const auto get =
      reinterpret_cast<GetThreads>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  return get != nullptr && get() > 1;
}

CoresToBlas::CoresToBlas() {
  const int threads = at::get_num_threads();
  if (threads <= 1 || !blas_has_own_threads()) return;
  saved_ = threads;
  at::set_num_threads(1);
}

CoresToBlas::~CoresToBlas() {
  if (saved_ > 0) at::set_num_threads(saved_);
}

}  // namespace txl::kernels
