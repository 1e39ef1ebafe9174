#pragma once
// Many small matrix products at once, c[i] = a[i] b[i], with vector loops of txl's own: the
// attention's products of a short segment (per head and row, [Q, D] x [D, K] and [Q, K] x
// [K, D] at Q = 32, a batch of H B = 128 of them), where LibTorch 1.13's bmm calls the BLAS
// once per matrix through a tensor view of it (select, as_strided, addmm's checks), which costs
// more than the product itself (docs/performance.md, 2026-12-07, third entry).
//
// Each product is computed as c[r][n] = sum over k of a[r][k] b[k][n], k in order, four rows by
// two vectors of columns at a time (b's rows copied first into a block of whole tiles when their
// columns are not adjacent or not a whole number of tiles). a and b may be any strided
// views (a transposed one included); c is written contiguous.

#include "txl/kernels/tensor.h"

namespace txl::kernels {

// a [S, M, K] and b [S, K, N], CPU float or double (vector_loops_take), one dtype, any strides
// -> c [S, M, N] contiguous. Matrices split between LibTorch's threads. Throws txl::Error for
// shapes, dtypes or a device it does not take.
at::Tensor batched_matmul(const at::Tensor& a, const at::Tensor& b);
// The same into c, contiguous [S, M, N] of a's dtype.
void batched_matmul_into(const at::Tensor& a, const at::Tensor& b, at::Tensor& c);

}  // namespace txl::kernels
