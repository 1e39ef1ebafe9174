#pragma once
// What txl's own vector loops (attend_cached, matvec and the others here) take: CPU tensors of
// float or double. Elsewhere (a GPU, half precision) ops keeps LibTorch's operations.

#include "txl/kernels/tensor.h"

namespace txl::kernels {

inline bool vector_loops_take(const at::Tensor& t) {
  return t.defined() && t.is_cpu() && !t.is_sparse() &&
         (t.scalar_type() == at::kFloat || t.scalar_type() == at::kDouble);
}

// Calls f(float{}) or f(double{}) for t's dtype, one of the two vector_loops_take takes: the
// element type of a loop's instantiation, as decltype(zero).
template <typename F>
void for_vector_dtype(const at::Tensor& t, F&& f) {
  if (t.scalar_type() == at::kFloat) {
    f(float{});
  } else {
    f(double{});
  }
}

}  // namespace txl::kernels
