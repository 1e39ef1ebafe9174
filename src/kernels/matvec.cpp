#include "txl/kernels/matvec.h"
#include "txl/kernels/vector_loops.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>

#include <algorithm>
#include <cstdint>

#include "txl/util/error.h"
#include "vector_clones.h"

namespace txl::kernels {

namespace {

// y[o] = W[o] . x (+ b[o]) for rows [begin, end), four rows at a time (four sums in flight).
template <typename T>
inline __attribute__((always_inline)) void rows_times(const T* __restrict w, const T* __restrict x,
                                                      const T* __restrict b, T* __restrict y,
                                                      int64_t in, int64_t begin, int64_t end) {
  int64_t o = begin;
  for (; o + 3 < end; o += 4) {
    const T* __restrict w0 = w + o * in;
    const T* __restrict w1 = w0 + in;
    const T* __restrict w2 = w1 + in;
    const T* __restrict w3 = w2 + in;
    T s0 = 0, s1 = 0, s2 = 0, s3 = 0;
#pragma omp simd reduction(+ : s0, s1, s2, s3)
    for (int64_t i = 0; i < in; ++i) {
      s0 += w0[i] * x[i];
      s1 += w1[i] * x[i];
      s2 += w2[i] * x[i];
      s3 += w3[i] * x[i];
    }
    y[o] = s0;
    y[o + 1] = s1;
    y[o + 2] = s2;
    y[o + 3] = s3;
  }
  for (; o < end; ++o) {
    const T* __restrict w0 = w + o * in;
    T s0 = 0;
#pragma omp simd reduction(+ : s0)
    for (int64_t i = 0; i < in; ++i) s0 += w0[i] * x[i];
    y[o] = s0;
  }
  if (b != nullptr) {
    for (o = begin; o < end; ++o) y[o] += b[o];
  }
}

TXL_VECTOR_LEVELS(void, rows_times_of, rows_times,
                  (const float* w, const float* x, const float* b, float* y, int64_t in,
                   int64_t begin, int64_t end),
                  (w, x, b, y, in, begin, end))
TXL_VECTOR_LEVELS(void, rows_times_of, rows_times,
                  (const double* w, const double* x, const double* b, double* y, int64_t in,
                   int64_t begin, int64_t end),
                  (w, x, b, y, in, begin, end))

template <typename T>
void matvec_as(const at::Tensor& w, const at::Tensor& x, const at::Tensor& bias, at::Tensor& y) {
  const int64_t out = w.size(0), in = w.size(1);
  const T* wp = w.data_ptr<T>();
  const T* xp = x.data_ptr<T>();
  const T* bp = bias.defined() ? bias.data_ptr<T>() : nullptr;
  T* yp = y.data_ptr<T>();
  // About 32k multiply-adds per thread at least; blocks of 4 rows.
  const int64_t grain = std::max<int64_t>(4, (32768 / std::max<int64_t>(1, in) + 3) / 4 * 4);
  at::parallel_for(0, out, grain, [&](int64_t begin, int64_t end) {
    rows_times_of(wp, xp, bp, yp, in, begin, end);
  });
}

}  // namespace

at::Tensor matvec(const at::Tensor& w, const at::Tensor& x, const at::Tensor& bias) {
  TXL_CHECK(vector_loops_take(w) && w.dim() == 2 && w.is_contiguous(),
            "matvec: w must be a contiguous CPU float or double [out, in]");
  TXL_CHECK(x.defined() && x.dim() == 1 && x.size(0) == w.size(1) && x.is_contiguous() &&
                x.scalar_type() == w.scalar_type() && x.is_cpu(),
            "matvec: x must be contiguous [in = ", w.size(1), "] of w's dtype, got ",
            x.defined() ? x.sizes() : at::IntArrayRef{});
  TXL_CHECK(
      !bias.defined() || (bias.dim() == 1 && bias.size(0) == w.size(0) && bias.is_contiguous() &&
                          bias.scalar_type() == w.scalar_type() && bias.is_cpu()),
      "matvec: bias must be contiguous [out = ", w.size(0), "] of w's dtype");
  RECORD_FUNCTION("txl::matvec", std::vector<c10::IValue>({w, x}));  // in profiles
  auto y = at::empty({w.size(0)}, w.options());                      // [out]
  for_vector_dtype(w, [&](auto zero) { matvec_as<decltype(zero)>(w, x, bias, y); });
  return y;
}

}  // namespace txl::kernels
