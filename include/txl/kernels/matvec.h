#pragma once
// One row times a matrix, y = W x (+ b), with vector loops of txl's own, split by output rows
// between LibTorch's threads (on LibTorch 2.x; 1.13's at::parallel_for runs on the calling
// thread in code compiled without OpenMP, as txl's is): for a BLAS whose matrix-vector product is
// slow on the CPU at hand (MKL on this project's AMD EPYC: a generated token's 17 one-row products
// take 0.70 ms with weights out of cache, against 0.27 ms with OpenBLAS).
// generation::IncrementalDecoder uses it for one row when the BLAS has no threads of its own
// (blas_has_own_threads).

#include "txl/kernels/tensor.h"

namespace txl::kernels {

// w [out, in] contiguous, x [in] contiguous, bias [out] or undefined, one dtype (float or
// double: vector_loops_take), CPU -> [out]. Throws txl::Error for shapes, dtypes or a device it
// does not take.
at::Tensor matvec(const at::Tensor& w, const at::Tensor& x, const at::Tensor& bias = {});

}  // namespace txl::kernels
