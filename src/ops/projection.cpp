#include "txl/ops/projection.h"

#include "txl/kernels/blas_threads.h"
#include "txl/kernels/huge_pages.h"
#include "txl/kernels/matvec.h"
#include "txl/kernels/row_reductions.h"
#include "txl/kernels/vector_loops.h"
#include "txl/util/autocast.h"
#include "txl/util/error.h"

namespace txl::ops {

namespace {

// Whether txl's own choices apply to x: a CPU product of float or double without gradients or
// autocast. Elsewhere LibTorch's linear, exactly as torch::nn::Linear computes it.
bool own_choice(const torch::Tensor& x, const torch::Tensor& weight) {
  return !torch::GradMode::is_enabled() && kernels::vector_loops_take(x) &&
         kernels::vector_loops_take(weight) && !autocast_enabled(x.device());
}

// x [..., in] times w [out, in]^T (+ bias) on the CPU without gradients: rows as one matrix
// (LibTorch's linear takes a 3-d input without bias through matmul's reshapes, 17 us a call at
// 16 rows), one row as a matrix-vector product.
torch::Tensor times(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& bias) {
  auto sizes = x.sizes().vec();
  sizes.back() = w.size(0);
  if (x.numel() != x.size(-1)) {
    return torch::linear(x.reshape({-1, x.size(-1)}), w, bias).view(sizes);  // [..., out]
  }
  auto row = x.reshape({-1}).contiguous();  // [in]
  torch::Tensor y;                          // [out]
  if (w.is_contiguous() && !kernels::blas_has_own_threads()) {
    y = kernels::matvec(w, row, bias.defined() ? bias.contiguous() : bias);
  } else {
    y = bias.defined() ? torch::addmv(bias, w, row) : torch::mv(w, row);
  }
  return y.view(sizes);  // [..., out]
}

}  // namespace

Projection::Projection(torch::Tensor weight, torch::Tensor bias)
    : weight_(std::move(weight)), bias_(std::move(bias)) {}

Projection Projection::packed_for_decoding(const torch::Tensor& weight, const torch::Tensor& bias) {
  if (kernels::packed_kernel_vectorised() && kernels::packed_takes(weight)) {
    return always_packed(weight, bias);
  }
  return Projection(weight.detach(), bias.defined() ? bias.detach() : bias);
}

Projection Projection::always_packed(const torch::Tensor& weight, const torch::Tensor& bias) {
  Projection p(weight.detach(), bias.defined() ? bias.detach() : bias);
  p.packed_ = kernels::pack_weight(p.weight_, p.bias_);
  return p;
}

torch::Tensor Projection::operator()(const torch::Tensor& x, bool relu) const {
  TXL_CHECK(weight_.defined(), "projection: no weight");
  if (packed_.defined() && !torch::GradMode::is_enabled() &&
      x.numel() <= kPackedRows * x.size(-1)) {
    kernels::LinearOptions o;
    o.relu = relu;
    return kernels::linear_packed(x.contiguous(), packed_, o);  // [..., out]
  }
  auto y = own_choice(x, weight_) ? times(x, weight_, bias_) : torch::linear(x, weight_, bias_);
  return relu ? y.relu_() : y;  // [..., out]
}

bool reads_transposed(const Projection& w, int64_t rows) {
  return kernels::vector_loops_take(w.weight()) && rows > (w.packed() ? kPackedRows : 1);
}

torch::Tensor log_softmax_linear(const Projection& w, const torch::Tensor& hidden,
                                 const torch::Tensor& weight_t) {
  const int64_t rows = hidden.size(0);
  if (!own_choice(hidden, w.weight_)) return torch::log_softmax(w(hidden), -1);  // [N, V]
  if (w.packed_.defined() && rows <= kPackedRows) {
    // The panels carry the bias (pack_weight): added in registers before the store, so not
    // again in the log-softmax.
    auto logits = kernels::linear_packed(hidden.contiguous(), w.packed_);  // [N, V]
    return kernels::log_softmax_rows_(logits);                             // [N, V]
  }
  if (rows == 1) {
    auto logits = times(hidden, w.weight_, w.bias_);  // [1, V]
    return kernels::log_softmax_rows_(logits);        // [1, V]
  }
  // Many rows: one product with W^T (faster read than W), the bias in the log-softmax.
  auto logits = weight_t.defined() ? torch::mm(hidden, weight_t)        // [N, V]
                                   : torch::linear(hidden, w.weight_);  // [N, V]
  return kernels::log_softmax_rows_(logits, w.bias_);                   // [N, V]
}

void share_pages(const std::vector<Projection*>& projections) {
  std::vector<torch::Tensor*> panels;
  for (auto* p : projections) {
    if (p != nullptr && p->panels() != nullptr) panels.push_back(p->panels());
  }
  if (!panels.empty()) kernels::share_huge_block(panels);
}

torch::Tensor empty_streamed(at::IntArrayRef sizes, const torch::TensorOptions& options) {
  return kernels::empty_huge(sizes, options);
}

}  // namespace txl::ops
