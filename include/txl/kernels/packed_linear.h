#pragma once
// A linear layer's weight packed once for products with a few rows: the products of a generated
// token (generation::IncrementalDecoder), where every step multiplies B <= 64 rows by every weight.
// A BLAS packs its right-hand matrix again in every call (sgemm), or reads it row by row
// (sgemv); here W^T is stored as panels of one vector register's width of output columns
// (16 floats or 8 doubles, 64 bytes), [P, in, L], so that a call streams each panel once and
// keeps up to 16 rows' sums of it in registers: per input feature, one load of the panel and
// one broadcast multiply-add per row. x is first copied with each block of rows transposed
// ([in, R]), so that a block's broadcasts of one input feature come from one cache line. The
// bias and a relu are applied before the store.
//
// Kernels: AVX-512 (16 rows at a time) where the CPU has it, else a portable loop (4 rows at a
// time) that compilers vectorise for the baseline. Panels are split between threads by
// split_work.
//
// Legend: N rows of x, in input features, out output features, L lanes (64 bytes of T),
// P = ceil(out / L) panels.

#include "txl/kernels/tensor.h"

#include <cstdint>

namespace txl::kernels {

struct PackedWeight {
  at::Tensor panels;  // [P, in, L]: panels[p][k][j] = W[p L + j][k], 0 beyond out
  at::Tensor bias;    // [P L]: the bias, 0 beyond out; undefined without a bias
  int64_t out = 0;    // output features (W's rows)

  bool defined() const { return panels.defined(); }
  int64_t in() const { return panels.size(1); }
};

// Whether pack_weight takes `weight`: a 2-d CPU float or double tensor.
bool packed_takes(const at::Tensor& weight);

// Whether linear_packed runs the AVX-512 kernel on this CPU (else the portable one).
bool packed_kernel_vectorised();

// W [out, in] (torch::nn::Linear's layout) and bias [out] or undefined, of W's dtype -> its
// panels. Throws txl::Error for a weight packed_takes refuses or a bias of another shape.
PackedWeight pack_weight(const at::Tensor& weight, const at::Tensor& bias = {});

enum class PackedKernel {
  kBest,      // AVX-512 where the CPU has it, else portable
  kPortable,  // the portable loop (tests compare the two)
};

struct LinearOptions {
  bool relu = false;  // max(0, .) after the bias
  PackedKernel kernel = PackedKernel::kBest;
};

// x [..., in] contiguous (N rows), of the weight's dtype, CPU -> x W^T + b [..., out], with
// options.relu applied (NaN stays NaN). Rows of fewer than 8 split each sum over `in` in up to
// 8 parts, so a row's last bits depend on how many rows come with it: fp32 within
// 1e-5 sqrt(in) of LibTorch's linear for unit-sized entries, fp64 within 1e-12. Throws
// txl::Error for a shape, dtype or device it does not take, or panels not as pack_weight makes
// them.
at::Tensor linear_packed(const at::Tensor& x, const PackedWeight& w,
                         const LinearOptions& options = {});

}  // namespace txl::kernels
