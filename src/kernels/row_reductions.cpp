#include "txl/kernels/row_reductions.h"
#include "txl/kernels/vector_loops.h"

#include <ATen/record_function.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "txl/kernels/side_thread.h"
#include "txl/kernels/vector_math.h"
#include "txl/util/error.h"
#include "vector_clones.h"

namespace txl::kernels {

namespace {

// One row of n: x += b (b may be null), then x -= max + log(sum exp(x - max)).
template <typename T>
inline __attribute__((always_inline)) void log_softmax_row(T* __restrict x, const T* __restrict b,
                                                           int64_t n) {
  T top = -std::numeric_limits<T>::infinity();
  if (b != nullptr) {
#pragma omp simd reduction(max : top)
    for (int64_t i = 0; i < n; ++i) {
      x[i] += b[i];
      top = x[i] > top ? x[i] : top;
    }
  } else {
#pragma omp simd reduction(max : top)
    for (int64_t i = 0; i < n; ++i) top = x[i] > top ? x[i] : top;
  }
  // A row of -inf keeps its -inf (top - top would be NaN); NaNs are not seen by the max and
  // make the sum NaN below.
  const T shift = std::isinf(top) && top < 0 ? T(0) : top;
  // Blocks of 256 summed in T's vectors, the blocks in double: one float sum of 10^5 terms
  // drifts by 1e-4 of itself, and a loop that widens each term to double is not vectorized.
  constexpr int64_t kBlock = 256;
  double sum = 0;
  for (int64_t begin = 0; begin < n; begin += kBlock) {
    const int64_t end = std::min(n, begin + kBlock);
    T block = 0;
#pragma omp simd reduction(+ : block)
    for (int64_t i = begin; i < end; ++i) block += exp_nonpositive(x[i] - shift);
    sum += static_cast<double>(block);
  }
  const T total = static_cast<T>(static_cast<double>(shift) + std::log(sum));
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) x[i] -= total;
}

TXL_VECTOR_LEVELS(void, log_softmax_row_of, log_softmax_row, (float* x, const float* b, int64_t n),
                  (x, b, n))
TXL_VECTOR_LEVELS(void, log_softmax_row_of, log_softmax_row,
                  (double* x, const double* b, int64_t n), (x, b, n))

// The first index of the row's maximum, or of its first NaN.
template <typename T>
inline __attribute__((always_inline)) int64_t argmax_row(const T* __restrict x, int64_t n) {
  T top = -std::numeric_limits<T>::infinity();
  int64_t nans = 0;
#pragma omp simd reduction(max : top) reduction(+ : nans)
  for (int64_t i = 0; i < n; ++i) {
    top = x[i] > top ? x[i] : top;
    nans += x[i] != x[i];
  }
  for (int64_t i = 0; i < n; ++i) {
    if (nans > 0 ? x[i] != x[i] : x[i] == top) return i;
  }
  return 0;  // a row of -inf: its first entry, as LibTorch
}

TXL_VECTOR_LEVELS(int64_t, argmax_row_of, argmax_row, (const float* x, int64_t n), (x, n))

TXL_VECTOR_LEVELS(int64_t, argmax_row_of, argmax_row, (const double* x, int64_t n), (x, n))

template <typename T>
void log_softmax_all(torch::Tensor& x, const torch::Tensor& bias) {
  const int64_t rows = x.size(0), n = x.size(1);
  T* xp = x.data_ptr<T>();
  const T* bp = bias.defined() ? bias.data_ptr<T>() : nullptr;
  // About three operations per entry (max, exp, subtract).
  split_work(rows, 3 * n, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) log_softmax_row_of(xp + r * n, bp, n);
  });
}

template <typename T>
void argmax_all(const torch::Tensor& x, torch::Tensor& out) {
  const int64_t rows = x.size(0), n = x.size(1);
  const T* xp = x.data_ptr<T>();
  auto* op = out.data_ptr<int64_t>();
  // About two operations per entry (max, compare); the rows as log_softmax_all splits them, so
  // that each thread reads the rows it has just written.
  split_work(rows, 2 * n, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) op[r] = argmax_row_of(xp + r * n, n);
  });
}

}  // namespace

torch::Tensor& log_softmax_rows_(torch::Tensor& x, const torch::Tensor& bias) {
  TXL_CHECK(vector_loops_take(x) && x.dim() == 2 && x.size(1) >= 1 && x.is_contiguous(),
            "log_softmax_rows_: x must be a contiguous CPU float or double [B, V >= 1]");
  TXL_CHECK(
      !bias.defined() || (bias.dim() == 1 && bias.size(0) == x.size(1) && bias.is_contiguous() &&
                          bias.scalar_type() == x.scalar_type() && bias.is_cpu()),
      "log_softmax_rows_: bias must be contiguous [V = ", x.size(1), "] of x's dtype");
  RECORD_FUNCTION("txl::log_softmax_rows_", std::vector<c10::IValue>({x}));  // in profiles
  for_vector_dtype(x, [&](auto zero) { log_softmax_all<decltype(zero)>(x, bias); });
  return x;
}

torch::Tensor argmax_rows(const torch::Tensor& x) {
  TXL_CHECK(vector_loops_take(x) && x.dim() == 2 && x.size(1) >= 1 && x.is_contiguous(),
            "argmax_rows: x must be a contiguous CPU float or double [B, V >= 1]");
  RECORD_FUNCTION("txl::argmax_rows", std::vector<c10::IValue>({x}));  // in profiles
  auto out = torch::empty({x.size(0)}, torch::kLong);                  // [B]
  for_vector_dtype(x, [&](auto zero) { argmax_all<decltype(zero)>(x, out); });
  return out;
}

}  // namespace txl::kernels
