#include "txl/kernels/adam.h"

#include <ATen/Parallel.h>

#include <cmath>
#include <cstdint>

#include "txl/kernels/vector_loops.h"
#include "txl/util/error.h"
#include "vector_clones.h"

namespace txl::kernels {

namespace {

// The scalars of one step in T, each rounded from double as LibTorch rounds a Scalar argument
// to the tensor's dtype.
template <typename T>
struct Terms {
  T decay;  // AdamW: 1 - lr * wd; Adam: wd
  T beta1, one_minus_beta1, beta2, one_minus_beta2;
  T bias2_sqrt;  // sqrt(1 - beta2^step)
  T eps;
  T neg_step_size;  // -lr / (1 - beta1^step)
};

// torch::optim::Adam::step (1.13 and 2.x), per element and in its order:
//   Adam:   grad = grad + wd * p                 (grad.add(p, wd))
//   AdamW:  p = p * (1 - lr * wd)                (p.mul_(1 - lr * wd))
//   m = m * beta1;  m = m + (1 - beta1) * grad   (exp_avg.mul_(beta1).add_(grad, 1 - beta1))
//   v = v * beta2;  v = v + (1 - beta2) * grad * grad   (mul_(beta2).addcmul_(grad, grad, 1 -
//   beta2)) denom = sqrt(v) / sqrt(bias2) + eps          ((exp_avg_sq.sqrt() /
//   sqrt(bc2)).add_(eps)) p = p + (-step_size) * m / denom             (p.addcdiv_(exp_avg, denom,
//   -step_size))
// The file is built with -ffp-contract=off, so no level fuses a product into a sum.
template <typename T>
inline __attribute__((always_inline)) void adam_rows(T* __restrict p, const T* __restrict g,
                                                     T* __restrict m, T* __restrict v, int64_t n,
                                                     const Terms<T>& t, bool decay,
                                                     bool decoupled) {
  if (decay && decoupled) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) p[i] = p[i] * t.decay;
  }
  const T wd = decay && !decoupled ? t.decay : T(0);
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const T grad = wd != T(0) ? g[i] + wd * p[i] : g[i];
    const T mi = m[i] * t.beta1 + t.one_minus_beta1 * grad;
    const T vi = v[i] * t.beta2 + t.one_minus_beta2 * grad * grad;
    m[i] = mi;
    v[i] = vi;
    const T denom = std::sqrt(vi) / t.bias2_sqrt + t.eps;
    p[i] = p[i] + t.neg_step_size * mi / denom;
  }
}

TXL_VECTOR_LEVELS(void, adam_rows_of, adam_rows,
                  (float* p, const float* g, float* m, float* v, int64_t n, const Terms<float>& t,
                   bool decay, bool decoupled),
                  (p, g, m, v, n, t, decay, decoupled))
TXL_VECTOR_LEVELS(void, adam_rows_of, adam_rows,
                  (double* p, const double* g, double* m, double* v, int64_t n,
                   const Terms<double>& t, bool decay, bool decoupled),
                  (p, g, m, v, n, t, decay, decoupled))

}  // namespace

void adam_update(at::Tensor& p, const at::Tensor& g, at::Tensor& exp_avg, at::Tensor& exp_avg_sq,
                 const AdamScalars& s) {
  const at::Tensor* all[] = {&p, &g, &exp_avg, &exp_avg_sq};
  for (const at::Tensor* t : all) {
    TXL_CHECK(vector_loops_take(*t) && t->is_contiguous() && t->sizes() == p.sizes() &&
                  t->scalar_type() == p.scalar_type(),
              "adam_update: the parameter, its gradient and moments must be contiguous CPU float "
              "or double tensors of one shape and dtype; got ",
              t->sizes(), " ", t->scalar_type(), " for a parameter ", p.sizes(), " ",
              p.scalar_type());
  }
  TXL_CHECK(s.step >= 1, "adam_update: step ", s.step, " (steps count from 1)");
  const double bias1 = 1 - std::pow(s.beta1, static_cast<double>(s.step));
  const double bias2 = 1 - std::pow(s.beta2, static_cast<double>(s.step));
  const bool decay = s.weight_decay != 0;
  for_vector_dtype(p, [&](auto zero) {
    using T = decltype(zero);
    Terms<T> t;
    t.decay = static_cast<T>(s.decoupled ? 1 - s.lr * s.weight_decay : s.weight_decay);
    t.beta1 = static_cast<T>(s.beta1);
    t.one_minus_beta1 = static_cast<T>(1 - s.beta1);
    t.beta2 = static_cast<T>(s.beta2);
    t.one_minus_beta2 = static_cast<T>(1 - s.beta2);
    t.bias2_sqrt = static_cast<T>(std::sqrt(bias2));
    t.eps = static_cast<T>(s.eps);
    t.neg_step_size = static_cast<T>(-(s.lr / bias1));
    T* pp = p.data_ptr<T>();
    const T* gp = g.data_ptr<T>();
    T* mp = exp_avg.data_ptr<T>();
    T* vp = exp_avg_sq.data_ptr<T>();
    // Chunks of 256k elements at least: a smaller parameter is one pass on the calling thread
    // (waking LibTorch's threads costs more than the pass, and at 2 threads they contend with
    // the BLAS's own, still spinning after the last product).
    at::parallel_for(0, p.numel(), int64_t{1} << 18, [&](int64_t begin, int64_t end) {
      adam_rows_of(pp + begin, gp + begin, mp + begin, vp + begin, end - begin, t, decay,
                   s.decoupled);
    });
  });
}

}  // namespace txl::kernels
