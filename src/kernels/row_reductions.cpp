#include "txl/kernels/row_reductions.h"
#include "txl/kernels/vector_loops.h"

#include <ATen/Parallel.h>
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

// The log-sum-exp of one row of n after x += b (b may be null): the max pass, then exp(x - max)
// summed (with write, written over x), and that sum. A row of -inf keeps its -inf (top - top
// would be NaN); NaNs are not seen by the max and make the sum NaN.
template <typename T>
struct RowSum {
  T lse;       // max + log(sum), rounded once from double
  double sum;  // sum of exp(x - max)
};

template <typename T>
inline __attribute__((always_inline)) RowSum<T> log_sum_exp_row(T* __restrict x,
                                                                const T* __restrict b, int64_t n,
                                                                bool write) {
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
  const T shift = std::isinf(top) && top < 0 ? T(0) : top;
  // Blocks of 256 summed in T's vectors, the blocks in double: one float sum of 10^5 terms
  // drifts by 1e-4 of itself, and a loop that widens each term to double is not vectorized.
  constexpr int64_t kBlock = 256;
  double sum = 0;
  for (int64_t begin = 0; begin < n; begin += kBlock) {
    const int64_t end = std::min(n, begin + kBlock);
    T block = 0;
    if (write) {
#pragma omp simd reduction(+ : block)
      for (int64_t i = begin; i < end; ++i) {
        const T e = exp_nonpositive(x[i] - shift);
        x[i] = e;
        block += e;
      }
    } else {
#pragma omp simd reduction(+ : block)
      for (int64_t i = begin; i < end; ++i) block += exp_nonpositive(x[i] - shift);
    }
    sum += static_cast<double>(block);
  }
  return {static_cast<T>(static_cast<double>(shift) + std::log(sum)), sum};
}

// One row of n: x += b (b may be null), then x -= max + log(sum exp(x - max)).
template <typename T>
inline __attribute__((always_inline)) void log_softmax_row(T* __restrict x, const T* __restrict b,
                                                           int64_t n) {
  const T total = log_sum_exp_row(x, b, n, /*write=*/false).lse;
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) x[i] -= total;
}

// One row of n: x += b, then the log-sum-exp, returned; with write, x becomes the softmax.
template <typename T>
inline __attribute__((always_inline)) T softmax_row(T* __restrict x, const T* __restrict b,
                                                    int64_t n, bool write) {
  const RowSum<T> r = log_sum_exp_row(x, b, n, write);
  if (write) {
    const T inverse = static_cast<T>(1.0 / r.sum);
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) x[i] *= inverse;
  }
  return r.lse;
}

TXL_VECTOR_LEVELS(float, softmax_row_of, softmax_row,
                  (float* x, const float* b, int64_t n, bool write), (x, b, n, write))
TXL_VECTOR_LEVELS(double, softmax_row_of, softmax_row,
                  (double* x, const double* b, int64_t n, bool write), (x, b, n, write))

// Columns [begin, end) of a block's rows: out = probs * grad[r], the bias gradient summed.
template <typename T>
inline __attribute__((always_inline)) void cross_entropy_grad_columns(
    const T* __restrict probs, const T* __restrict grad, const int64_t* __restrict target,
    const T* __restrict d_target, T* __restrict out, T* __restrict d_bias, int64_t rows, int64_t n,
    int64_t begin, int64_t end) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* p = probs + r * n;
    T* o = out + r * n;
    const T g = grad[r];
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) o[i] = p[i] * g;
    if (target[r] >= begin && target[r] < end) o[target[r]] = d_target[r];
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) d_bias[i] += o[i];
  }
}

TXL_VECTOR_LEVELS(void, cross_entropy_grad_columns_of, cross_entropy_grad_columns,
                  (const float* probs, const float* grad, const int64_t* target,
                   const float* d_target, float* out, float* d_bias, int64_t rows, int64_t n,
                   int64_t begin, int64_t end),
                  (probs, grad, target, d_target, out, d_bias, rows, n, begin, end))
TXL_VECTOR_LEVELS(void, cross_entropy_grad_columns_of, cross_entropy_grad_columns,
                  (const double* probs, const double* grad, const int64_t* target,
                   const double* d_target, double* out, double* d_bias, int64_t rows, int64_t n,
                   int64_t begin, int64_t end),
                  (probs, grad, target, d_target, out, d_bias, rows, n, begin, end))

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
void log_softmax_all(at::Tensor& x, const at::Tensor& bias) {
  const int64_t rows = x.size(0), n = x.size(1);
  T* xp = x.data_ptr<T>();
  const T* bp = bias.defined() ? bias.data_ptr<T>() : nullptr;
  // About three operations per entry (max, exp, subtract).
  split_work(rows, 3 * n, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) log_softmax_row_of(xp + r * n, bp, n);
  });
}

template <typename T>
void argmax_all(const at::Tensor& x, at::Tensor& out) {
  const int64_t rows = x.size(0), n = x.size(1);
  const T* xp = x.data_ptr<T>();
  auto* op = out.data_ptr<int64_t>();
  // About two operations per entry (max, compare); the rows as log_softmax_all splits them, so
  // that each thread reads the rows it has just written.
  split_work(rows, 2 * n, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) op[r] = argmax_row_of(xp + r * n, n);
  });
}

template <typename T>
void softmax_all(at::Tensor& x, const at::Tensor& bias, at::Tensor& lse, bool write) {
  const int64_t rows = x.size(0), n = x.size(1);
  T* xp = x.data_ptr<T>();
  const T* bp = bias.data_ptr<T>();
  T* lp = lse.data_ptr<T>();
  // Training's kernel: LibTorch's threads (run.threads), not generation's side thread, whose
  // half of the work would land on a core another job of an ablation holds. About 16k entries
  // a task at least.
  at::parallel_for(0, rows, std::max<int64_t>(1, 16384 / n), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) lp[r] = softmax_row_of(xp + r * n, bp, n, write);
  });
}

template <typename T>
void cross_entropy_grad_all(const at::Tensor& probs, const at::Tensor& grad,
                            const at::Tensor& target, const at::Tensor& d_target, at::Tensor& out,
                            at::Tensor& d_bias) {
  const int64_t rows = probs.size(0), n = probs.size(1);
  const T* pp = probs.data_ptr<T>();
  const T* gp = grad.data_ptr<T>();
  const int64_t* tp = target.data_ptr<int64_t>();
  const T* dp = d_target.data_ptr<T>();
  T* op = out.data_ptr<T>();
  T* bp = d_bias.data_ptr<T>();
  // Blocks of 256 columns; about three operations per entry of a column (multiply, store, sum).
  constexpr int64_t kColumns = 256;
  const int64_t blocks = (n + kColumns - 1) / kColumns;
  // LibTorch's threads, as softmax_all; about 16k entries a task at least.
  const int64_t grain = std::max<int64_t>(1, 16384 / (kColumns * std::max<int64_t>(rows, 1)));
  at::parallel_for(0, blocks, grain, [&](int64_t first, int64_t last) {
    cross_entropy_grad_columns_of(pp, gp, tp, dp, op, bp, rows, n, first * kColumns,
                                  std::min(n, last * kColumns));
  });
}

}  // namespace

void softmax_rows_(at::Tensor& x, const at::Tensor& bias, at::Tensor& lse, bool write) {
  TXL_CHECK(vector_loops_take(x) && x.dim() == 2 && x.size(1) >= 1 && x.is_contiguous(),
            "softmax_rows_: x must be a contiguous CPU float or double [n, V >= 1]");
  TXL_CHECK(bias.dim() == 1 && bias.size(0) == x.size(1) && bias.is_contiguous() &&
                bias.scalar_type() == x.scalar_type() && bias.is_cpu(),
            "softmax_rows_: bias must be contiguous [V = ", x.size(1), "] of x's dtype");
  TXL_CHECK(lse.dim() == 1 && lse.size(0) == x.size(0) && lse.is_contiguous() &&
                lse.scalar_type() == x.scalar_type() && lse.is_cpu(),
            "softmax_rows_: lse must be contiguous [n = ", x.size(0), "] of x's dtype");
  RECORD_FUNCTION("txl::softmax_rows_", std::vector<c10::IValue>({x}));  // in profiles
  for_vector_dtype(x, [&](auto zero) { softmax_all<decltype(zero)>(x, bias, lse, write); });
}

void cross_entropy_grad_rows(const at::Tensor& probs, const at::Tensor& grad,
                             const at::Tensor& target, const at::Tensor& d_target, at::Tensor& out,
                             at::Tensor& d_bias) {
  TXL_CHECK(vector_loops_take(probs) && probs.dim() == 2 && probs.is_contiguous() &&
                out.sizes() == probs.sizes() && out.is_contiguous() && out.is_cpu() &&
                out.scalar_type() == probs.scalar_type(),
            "cross_entropy_grad_rows: probs and out must be contiguous CPU float or double "
            "[n, V] of one dtype");
  const int64_t rows = probs.size(0), n = probs.size(1);
  for (const at::Tensor* t : {&grad, &d_target}) {
    TXL_CHECK(t->dim() == 1 && t->size(0) == rows && t->is_contiguous() && t->is_cpu() &&
                  t->scalar_type() == probs.scalar_type(),
              "cross_entropy_grad_rows: grad and d_target must be contiguous [n = ", rows,
              "] of probs' dtype");
  }
  TXL_CHECK(d_bias.dim() == 1 && d_bias.size(0) == n && d_bias.is_contiguous() && d_bias.is_cpu() &&
                d_bias.scalar_type() == probs.scalar_type(),
            "cross_entropy_grad_rows: d_bias must be contiguous [V = ", n, "] of probs' dtype");
  TXL_CHECK(target.dim() == 1 && target.size(0) == rows && target.is_contiguous() &&
                target.is_cpu() && target.scalar_type() == at::kLong,
            "cross_entropy_grad_rows: target must be contiguous int64 [n = ", rows, "]");
  RECORD_FUNCTION("txl::cross_entropy_grad_rows", std::vector<c10::IValue>({probs}));
  for_vector_dtype(probs, [&](auto zero) {
    cross_entropy_grad_all<decltype(zero)>(probs, grad, target, d_target, out, d_bias);
  });
}

at::Tensor& log_softmax_rows_(at::Tensor& x, const at::Tensor& bias) {
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

at::Tensor argmax_rows(const at::Tensor& x) {
  TXL_CHECK(vector_loops_take(x) && x.dim() == 2 && x.size(1) >= 1 && x.is_contiguous(),
            "argmax_rows: x must be a contiguous CPU float or double [B, V >= 1]");
  RECORD_FUNCTION("txl::argmax_rows", std::vector<c10::IValue>({x}));  // in profiles
  auto out = at::empty({x.size(0)}, at::kLong);                        // [B]
  for_vector_dtype(x, [&](auto zero) { argmax_all<decltype(zero)>(x, out); });
  return out;
}

}  // namespace txl::kernels
