#pragma once
// A linear layer's product x W^T + b through the kernel that suits x, chosen here and nowhere
// else: the modules' forward and their decoding steps (modules::*::step) both multiply through
// a Projection, so a layer's formula is written once whatever runs it.
//
//   gradients needed, or a GPU, or half precision   LibTorch's linear (autograd as nn::Linear)
//   packed panels and at most kPackedRows rows      kernels::linear_packed (the weight streamed
//                                                    once, 16 rows' sums in registers; AVX-512)
//   one row                                          a matrix-vector product: for one row
//                                                    OpenBLAS's sgemm is 2-3x slower than its
//                                                    sgemv; where the BLAS has no threads of its
//                                                    own (MKL; OpenBLAS on one thread), txl's
//                                                    kernels::matvec on LibTorch's threads
//   otherwise                                        LibTorch's linear over the rows as a matrix
//
// Legend: N rows of x, in input features, out output features, V vocabulary.

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "txl/kernels/blas_threads.h"
#include "txl/kernels/packed_linear.h"

namespace txl::ops {

// Products of at most this many rows go through packed panels (a generated token's B rows);
// more rows (a prompt's segments of B x tgt_len) through LibTorch's, which reuses each block of
// the weight across many rows.
constexpr int64_t kPackedRows = 64;

class Projection {
 public:
  Projection() = default;
  // W [out, in] (torch::nn::Linear's layout) and bias [out] or undefined, used as they are
  // (the forward of a module in training or evaluation).
  Projection(torch::Tensor weight, torch::Tensor bias = {});

  // The same, with W packed once for products of a few rows where the CPU has the packed
  // AVX-512 kernel (decoding: prepared once, shared by every decoder of the model). The panels
  // are a copy: prepare again after the weights change.
  static Projection packed_for_decoding(const torch::Tensor& weight,
                                        const torch::Tensor& bias = {});

  // The same, packed on every CPU (the portable panels where it has no AVX-512): the tests that
  // run the packed path at every CPU level. Throws txl::Error where the kernel does not take W.
  static Projection always_packed(const torch::Tensor& weight, const torch::Tensor& bias = {});

  // x [..., in] -> x W^T + b [..., out], relu after when asked.
  torch::Tensor operator()(const torch::Tensor& x, bool relu = false) const;

  const torch::Tensor& weight() const { return weight_; }
  const torch::Tensor& bias() const { return bias_; }
  bool packed() const { return packed_.defined(); }
  // Where a block of 2 MB pages should hold the panels (share_pages), or null when unpacked.
  torch::Tensor* panels() { return packed_.defined() ? &packed_.panels : nullptr; }

 private:
  friend torch::Tensor log_softmax_linear(const Projection& w, const torch::Tensor& hidden,
                                          const torch::Tensor& weight_t);
  torch::Tensor weight_, bias_;
  kernels::PackedWeight packed_;
};

// log_softmax(hidden W^T + b) over the last dimension, hidden [N, in] -> [N, out]: a plain
// softmax over a vocabulary. The bias is added once: by the packed panels before their store,
// or else in the log-softmax's first pass on the CPU (txl's row loops), not copied into the
// product's result. `weight_t` [in, out] contiguous, W^T, when
// the caller keeps one (products of many rows read it faster than W), else undefined.
torch::Tensor log_softmax_linear(const Projection& w, const torch::Tensor& hidden,
                                 const torch::Tensor& weight_t = {});

// Whether products of `rows` rows through `w` read a transposed copy of W (log_softmax_linear's
// weight_t): more rows than its packed panels take.
bool reads_transposed(const Projection& w, int64_t rows);

// Moves the panels of the packed projections into one block of 2 MB pages, where the OS gives
// them: a generated token streams every panel once per step.
void share_pages(const std::vector<Projection*>& projections);

// While it lives, a loop that alternates small products with LibTorch's parallel loops many
// times a second (generation) runs with one pool of threads, not two taking turns on the
// cores: LibTorch on one thread where the BLAS has threads of its own (kernels::CoresToBlas),
// nothing changed elsewhere. Not copyable; nest them last-in first-out.
using ProductThreads = kernels::CoresToBlas;

// Whether a forward or training step on `device`, under bf16 autocast or not, multiplies on the
// BLAS's threads and so holds ProductThreads: fp32 on the CPU. Under bf16 autocast the products
// are oneDNN's, on LibTorch's threads, which must then keep the cores (with them on one thread
// bf16 trained at 2 threads as fast as at 1: docs/performance.md, 2026-12-07, fourth entry).
inline bool products_on_blas_threads(const torch::Device& device, bool bf16) {
  return device.is_cpu() && !bf16;
}

// An uninitialised tensor of `sizes` in one block of 2 MB pages where the OS gives them (a
// decoder's keys and values, streamed at every step); ordinary memory elsewhere.
torch::Tensor empty_streamed(at::IntArrayRef sizes, const torch::TensorOptions& options);

}  // namespace txl::ops
