#include "txl/kernels/layer_norm.h"
#include "txl/kernels/vector_loops.h"

#include <ATen/record_function.h>

#include <cmath>
#include <cstdint>

#include "txl/kernels/side_thread.h"
#include "txl/util/error.h"
#include "vector_clones.h"

namespace txl::kernels {

namespace {

// One row of d: out = LN(x + y) with weight w and bias b (either may be null).
template <typename T>
inline __attribute__((always_inline)) void add_norm_row(const T* __restrict x,
                                                        const T* __restrict y,
                                                        const T* __restrict w,
                                                        const T* __restrict b, T* __restrict out,
                                                        int64_t d, double eps) {
  double total = 0;
#pragma omp simd reduction(+ : total)
  for (int64_t i = 0; i < d; ++i) {
    out[i] = x[i] + y[i];
    total += static_cast<double>(out[i]);
  }
  const double mean = total / static_cast<double>(d);
  double squares = 0;
#pragma omp simd reduction(+ : squares)
  for (int64_t i = 0; i < d; ++i) {
    const double c = static_cast<double>(out[i]) - mean;
    squares += c * c;
  }
  const T centre = static_cast<T>(mean);
  const T scale = static_cast<T>(1.0 / std::sqrt(squares / static_cast<double>(d) + eps));
  if (w != nullptr && b != nullptr) {
#pragma omp simd
    for (int64_t i = 0; i < d; ++i) out[i] = (out[i] - centre) * scale * w[i] + b[i];
  } else {
#pragma omp simd
    for (int64_t i = 0; i < d; ++i) {
      out[i] = (out[i] - centre) * scale;
      if (w != nullptr) out[i] *= w[i];
      if (b != nullptr) out[i] += b[i];
    }
  }
}

TXL_VECTOR_LEVELS(void, add_norm_row_of, add_norm_row,
                  (const float* x, const float* y, const float* w, const float* b, float* out,
                   int64_t d, double eps),
                  (x, y, w, b, out, d, eps))
TXL_VECTOR_LEVELS(void, add_norm_row_of, add_norm_row,
                  (const double* x, const double* y, const double* w, const double* b, double* out,
                   int64_t d, double eps),
                  (x, y, w, b, out, d, eps))

template <typename T>
void add_norm_all(const at::Tensor& x, const at::Tensor& y, const at::Tensor& weight,
                  const at::Tensor& bias, double eps, at::Tensor& out) {
  const int64_t d = x.size(-1), rows = x.numel() / d;
  const T* xp = x.data_ptr<T>();
  const T* yp = y.data_ptr<T>();
  const T* wp = weight.defined() ? weight.data_ptr<T>() : nullptr;
  const T* bp = bias.defined() ? bias.data_ptr<T>() : nullptr;
  T* op = out.data_ptr<T>();
  // About six operations per entry (add, two moments, normalise).
  split_work(rows, 6 * d, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      add_norm_row_of(xp + r * d, yp + r * d, wp, bp, op + r * d, d, eps);
    }
  });
}

void check(const at::Tensor& x, const at::Tensor& y, const at::Tensor& weight,
           const at::Tensor& bias) {
  TXL_CHECK(vector_loops_take(x) && x.dim() >= 1 && x.size(-1) >= 1 && x.is_contiguous(),
            "add_layer_norm: x must be a contiguous CPU float or double [..., d >= 1]");
  TXL_CHECK(y.defined() && y.sizes() == x.sizes() && y.scalar_type() == x.scalar_type() &&
                y.is_cpu() && y.is_contiguous(),
            "add_layer_norm: y must be contiguous ", x.sizes(), " of x's dtype, got ",
            y.defined() ? y.sizes() : at::IntArrayRef{});
  for (const auto* p : {&weight, &bias}) {
    TXL_CHECK(!p->defined() || (p->dim() == 1 && p->size(0) == x.size(-1) && p->is_contiguous() &&
                                p->scalar_type() == x.scalar_type() && p->is_cpu()),
              "add_layer_norm: weight and bias must be contiguous [d = ", x.size(-1),
              "] of x's dtype, or undefined");
  }
}

}  // namespace

at::Tensor add_layer_norm(const at::Tensor& x, const at::Tensor& y, const at::Tensor& weight,
                          const at::Tensor& bias, double eps) {
  check(x, y, weight, bias);
  RECORD_FUNCTION("txl::add_layer_norm", std::vector<c10::IValue>({x, y}));  // in profiles
  auto out = at::empty_like(x);                                              // [..., d]
  for_vector_dtype(x,
                   [&](auto zero) { add_norm_all<decltype(zero)>(x, y, weight, bias, eps, out); });
  return out;
}

}  // namespace txl::kernels
