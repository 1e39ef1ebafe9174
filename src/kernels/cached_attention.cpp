#include "txl/kernels/cached_attention.h"
#include "txl/kernels/vector_loops.h"

#include <ATen/record_function.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#ifdef __x86_64__
#include <immintrin.h>
#endif

#include "txl/kernels/side_thread.h"
#include "txl/kernels/vector_math.h"
#include "txl/util/error.h"
#include "vector_clones.h"

namespace txl::kernels {

namespace {

// Where one (row, head) finds its data. Pointers to D-vectors; keys, values and encodings are
// rows of D contiguous elements.
template <typename T>
struct HeadView {
  const T* qkv;  // [3, H, D] of the row: query at + h D, key + (H + h) D, value + (2H + h) D
  T* keys;       // [C, D] of (h, b)
  T* values;     // [C, D] of (h, b)
  const T* rel;  // [C, D] of h by distance, or null
  const T* u;    // [D] or null
  const T* v;    // [D] or null
  T* out;        // [D] of (b, h)
};

template <typename T>
inline __attribute__((always_inline)) T dot(const T* a, const T* b, int64_t n) {
  T s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// s_k of one key: content and position terms summed in one reduction.
template <typename T>
inline __attribute__((always_inline)) T score(const T* __restrict qc, const T* __restrict qp,
                                              const T* __restrict key, const T* __restrict rel,
                                              int64_t d) {
  T s = 0;
  if (rel == nullptr) return dot(qc, key, d);
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < d; ++i) s += qc[i] * key[i] + qp[i] * rel[i];
  return s;
}

// The softmax's numerators exp(s_k - top) over keys [first, k_len), in place; returns their sum.
template <typename T>
inline __attribute__((always_inline)) T exp_and_sum(T* __restrict scores, int64_t first,
                                                    int64_t k_len, T top) {
  T sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t k = first; k < k_len; ++k) {
    scores[k] = exp_nonpositive(scores[k] - top);
    sum += scores[k];
  }
  return sum;
}

// One (row, head): scores of keys [first, k_len) into `scores`, softmax, weighted values (two
// keys at a time, so that two independent products are in flight).
template <typename T>
inline __attribute__((always_inline)) void attend_head(const HeadView<T>& w, int64_t first,
                                                       int64_t k_len, int64_t d, T* __restrict qc,
                                                       T* __restrict qp, T* __restrict scores) {
  const T* q = w.qkv;
  for (int64_t i = 0; i < d; ++i) {
    qc[i] = w.u != nullptr ? q[i] + w.u[i] : q[i];
    qp[i] = w.v != nullptr ? q[i] + w.v[i] : q[i];
  }
  auto rel_of = [&](int64_t k) { return w.rel != nullptr ? w.rel + (k_len - 1 - k) * d : nullptr; };
  T top = -std::numeric_limits<T>::infinity();
  for (int64_t k = first; k < k_len; ++k) {
    prefetch_ahead(w.keys + k * d, d * static_cast<int64_t>(sizeof(T)));
    scores[k] = score(qc, qp, w.keys + k * d, rel_of(k), d);
    top = std::max(top, scores[k]);
  }
  const T sum = exp_and_sum(scores, first, k_len, top);
  T* __restrict out = w.out;
  for (int64_t i = 0; i < d; ++i) out[i] = 0;
  int64_t k = first;
  for (; k + 1 < k_len; k += 2) {
    const T p0 = scores[k], p1 = scores[k + 1];
    const T* __restrict v0 = w.values + k * d;
    const T* __restrict v1 = v0 + d;
    prefetch_ahead(v0, 2 * d * static_cast<int64_t>(sizeof(T)));
#pragma omp simd
    for (int64_t i = 0; i < d; ++i) out[i] += p0 * v0[i] + p1 * v1[i];
  }
  if (k < k_len) {
    const T p0 = scores[k];
    const T* __restrict v0 = w.values + k * d;
#pragma omp simd
    for (int64_t i = 0; i < d; ++i) out[i] += p0 * v0[i];
  }
  const T scale = T(1) / sum;
#pragma omp simd
  for (int64_t i = 0; i < d; ++i) out[i] *= scale;
}

TXL_VECTOR_LEVELS(void, attend_head_of, attend_head,
                  (const HeadView<float>& w, int64_t first, int64_t k_len, int64_t d, float* qc,
                   float* qp, float* scores),
                  (w, first, k_len, d, qc, qp, scores))
TXL_VECTOR_LEVELS(void, attend_head_of, attend_head,
                  (const HeadView<double>& w, int64_t first, int64_t k_len, int64_t d, double* qc,
                   double* qp, double* scores),
                  (w, first, k_len, d, qc, qp, scores))

// Float with D = 16 N where the CPU has AVX-512: one (row, head) as attend_head computes it, in
// registers. The query's two terms (N registers each) and the output's sums stay in registers
// (two sets, for even and odd keys: two keys' multiply-adds in flight), where attend_head's
// loops over a run-time D load and store the output for every key; a key's score is one
// register's sum. A layer of a 16-row step of the bench model (4 heads of 64, 192 keys a row,
// streamed from memory, 2 cores): 0.20-0.21 ms against 0.26-0.28 ms inside generation.
using HeadKernel = void (*)(const HeadView<float>&, int64_t, int64_t, float*);

#ifdef TXL_HAS_AVX512
constexpr int64_t kLanes = 16;  // floats in a zmm register
constexpr int kMaxChunks = 8;   // D <= 128: sums in registers

// The sum of a register's 16 lanes (_mm512_reduce_add_ps trips GCC 12's uninitialised-use
// warning).
TXL_AVX512 inline float sum_lanes(__m512 s) {
  const __m256 half = _mm256_add_ps(_mm512_maskz_extractf32x8_ps(0xff, s, 0),
                                    _mm512_maskz_extractf32x8_ps(0xff, s, 1));
  __m128 quarter = _mm_add_ps(_mm256_castps256_ps128(half), _mm256_extractf128_ps(half, 1));
  quarter = _mm_add_ps(quarter, _mm_movehl_ps(quarter, quarter));
  quarter = _mm_add_ss(quarter, _mm_movehdup_ps(quarter));
  return _mm_cvtss_f32(quarter);
}

template <int N>
TXL_AVX512 void attend_head_avx512(const HeadView<float>& w, int64_t first, int64_t k_len,
                                   float* __restrict scores) {
  constexpr int64_t d = N * kLanes;
  __m512 qc[N], qp[N];
  for (int i = 0; i < N; ++i) {
    const __m512 q = _mm512_loadu_ps(w.qkv + i * kLanes);
    qc[i] = w.u != nullptr ? _mm512_add_ps(q, _mm512_loadu_ps(w.u + i * kLanes)) : q;
    qp[i] = w.v != nullptr ? _mm512_add_ps(q, _mm512_loadu_ps(w.v + i * kLanes)) : q;
  }
  float top = -std::numeric_limits<float>::infinity();
  for (int64_t k = first; k < k_len; ++k) {
    const float* key = w.keys + k * d;
    prefetch_ahead(key, d * static_cast<int64_t>(sizeof(float)));
    __m512 s = _mm512_mul_ps(qc[0], _mm512_loadu_ps(key));
    for (int i = 1; i < N; ++i) s = _mm512_fmadd_ps(qc[i], _mm512_loadu_ps(key + i * kLanes), s);
    if (w.rel != nullptr) {
      const float* rel = w.rel + (k_len - 1 - k) * d;  // distance K-1-k
      __m512 p = _mm512_mul_ps(qp[0], _mm512_loadu_ps(rel));
      for (int i = 1; i < N; ++i) p = _mm512_fmadd_ps(qp[i], _mm512_loadu_ps(rel + i * kLanes), p);
      s = _mm512_add_ps(s, p);
    }
    scores[k] = sum_lanes(s);
    top = std::max(top, scores[k]);
  }
  const float sum = exp_and_sum(scores, first, k_len, top);
  __m512 even[N], odd[N];
  for (int i = 0; i < N; ++i) even[i] = odd[i] = _mm512_setzero_ps();
  int64_t k = first;
  for (; k + 1 < k_len; k += 2) {
    const float* v0 = w.values + k * d;
    prefetch_ahead(v0, 2 * d * static_cast<int64_t>(sizeof(float)));
    const __m512 p0 = _mm512_set1_ps(scores[k]), p1 = _mm512_set1_ps(scores[k + 1]);
    for (int i = 0; i < N; ++i) {
      even[i] = _mm512_fmadd_ps(p0, _mm512_loadu_ps(v0 + i * kLanes), even[i]);
      odd[i] = _mm512_fmadd_ps(p1, _mm512_loadu_ps(v0 + d + i * kLanes), odd[i]);
    }
  }
  if (k < k_len) {
    const __m512 p0 = _mm512_set1_ps(scores[k]);
    const float* v0 = w.values + k * d;
    for (int i = 0; i < N; ++i) {
      even[i] = _mm512_fmadd_ps(p0, _mm512_loadu_ps(v0 + i * kLanes), even[i]);
    }
  }
  const __m512 scale = _mm512_set1_ps(1.0f / sum);
  for (int i = 0; i < N; ++i) {
    _mm512_storeu_ps(w.out + i * kLanes, _mm512_mul_ps(_mm512_add_ps(even[i], odd[i]), scale));
  }
}
#endif

// The AVX-512 kernel of head size d, or null where it does not serve (kPortable asked for, a
// CPU without AVX-512, d not 16 N with N <= 8).
HeadKernel avx512_head(int64_t d, CachedKernel kernel) {
#ifdef TXL_HAS_AVX512
  static constexpr HeadKernel kByChunks[kMaxChunks + 1] = {nullptr,
                                                           attend_head_avx512<1>,
                                                           attend_head_avx512<2>,
                                                           attend_head_avx512<3>,
                                                           attend_head_avx512<4>,
                                                           attend_head_avx512<5>,
                                                           attend_head_avx512<6>,
                                                           attend_head_avx512<7>,
                                                           attend_head_avx512<8>};
  if (kernel == CachedKernel::kBest && cpu_has_avx512() && d % kLanes == 0 &&
      d / kLanes <= kMaxChunks) {
    return kByChunks[d / kLanes];
  }
#else
  (void)d;
  (void)kernel;
#endif
  return nullptr;
}

void check(const at::Tensor& qkv, const CachedKeys& keys, int64_t k_len,
           const std::vector<int64_t>& first) {
  TXL_CHECK(qkv.defined() && qkv.dim() == 4 && qkv.size(1) == 3 && qkv.is_contiguous() &&
                vector_loops_take(qkv),
            "attend_cached: qkv must be a contiguous CPU float or double [B, 3, H, D]");
  const int64_t batch = qkv.size(0), heads = qkv.size(2), d = qkv.size(3);
  const auto& buffer = keys.buffer;
  TXL_CHECK(buffer.defined() && buffer.dim() == 5 && buffer.size(0) == 2 &&
                buffer.size(1) == heads && buffer.size(2) == batch && buffer.size(4) == d &&
                buffer.is_contiguous() && buffer.scalar_type() == qkv.scalar_type() &&
                buffer.device() == qkv.device(),
            "attend_cached: buffer must be contiguous [2, H = ", heads, ", B = ", batch,
            ", C, D = ", d, "] of qkv's dtype, got ", buffer.sizes());
  const int64_t capacity = buffer.size(3);
  TXL_CHECK(k_len >= 1 && k_len <= capacity, "attend_cached: k_len = ", k_len,
            " must be in [1, C = ", capacity, "]");
  TXL_CHECK(static_cast<int64_t>(first.size()) == batch, "attend_cached: ", first.size(),
            " first slots for ", batch, " rows");
  for (auto f : first) {
    TXL_CHECK(f >= 0 && f < k_len, "attend_cached: first slot ", f, " outside [0, ", k_len, ")");
  }
  const auto& rel = keys.by_distance;
  TXL_CHECK(!rel.defined() || (rel.dim() == 3 && rel.size(0) == heads && rel.size(1) >= k_len &&
                               rel.size(2) == d && rel.is_contiguous() &&
                               rel.scalar_type() == qkv.scalar_type() && rel.is_cpu()),
            "attend_cached: by_distance must be contiguous [H = ", heads, ", >= K = ", k_len,
            ", D = ", d, "] of qkv's dtype");
  TXL_CHECK(keys.u.defined() == keys.v.defined(), "attend_cached: give both u and v, or neither");
  for (const auto* bias : {&keys.u, &keys.v}) {
    TXL_CHECK(!bias->defined() || (bias->numel() == heads * d && bias->is_contiguous() &&
                                   bias->scalar_type() == qkv.scalar_type() && bias->is_cpu()),
              "attend_cached: u and v must be contiguous [H = ", heads, ", D = ", d,
              "] of qkv's dtype");
  }
}

template <typename T>
void attend_all(const at::Tensor& qkv, const CachedKeys& keys, int64_t k_len,
                const std::vector<int64_t>& first, CachedKernel kernel, at::Tensor& out) {
  const int64_t batch = qkv.size(0), heads = qkv.size(2), d = qkv.size(3);
  const int64_t capacity = keys.buffer.size(3);
  const T* qkv_data = qkv.data_ptr<T>();
  T* buffer = keys.buffer.data_ptr<T>();
  const T* rel = keys.by_distance.defined() ? keys.by_distance.data_ptr<T>() : nullptr;
  const T* u = keys.u.defined() ? keys.u.data_ptr<T>() : nullptr;
  const T* v = keys.v.defined() ? keys.v.data_ptr<T>() : nullptr;
  T* out_data = out.data_ptr<T>();
  const int64_t plane = heads * batch * capacity * d;  // one of keys, values
  HeadKernel fast = nullptr;
  if constexpr (std::is_same_v<T, float>) fast = avx512_head(d, kernel);
  auto heads_in = [&](int64_t begin, int64_t end) {
    std::vector<T> scratch(static_cast<size_t>(k_len + 2 * d));
    T* scores = scratch.data();
    for (int64_t i = begin; i < end; ++i) {
      const int64_t b = i / heads, h = i % heads;
      HeadView<T> w;
      w.qkv = qkv_data + (b * 3 * heads + h) * d;
      w.keys = buffer + (h * batch + b) * capacity * d;
      w.values = w.keys + plane;
      w.rel = rel != nullptr ? rel + h * keys.by_distance.size(1) * d : nullptr;
      w.u = u != nullptr ? u + h * d : nullptr;
      w.v = v != nullptr ? v + h * d : nullptr;
      w.out = out_data + (b * heads + h) * d;
      // The new key and value go into the last slot, then it attends like the others.
      std::copy(w.qkv + heads * d, w.qkv + heads * d + d, w.keys + (k_len - 1) * d);
      std::copy(w.qkv + 2 * heads * d, w.qkv + 2 * heads * d + d, w.values + (k_len - 1) * d);
      const int64_t from = first[static_cast<size_t>(b)];
      if constexpr (std::is_same_v<T, float>) {
        if (fast != nullptr) {
          fast(w, from, k_len, scores);
          continue;
        }
      }
      attend_head_of(w, from, k_len, d, scores + k_len, scores + k_len + d, scores);
    }
  };
  // Three multiply-adds per key element: content, position, value.
  split_work(batch * heads, 3 * k_len * d, heads_in);
}

}  // namespace

bool attend_cached_takes(const at::Tensor& like) { return vector_loops_take(like); }

bool cached_kernel_vectorised() { return avx512_head(16, CachedKernel::kBest) != nullptr; }

at::Tensor attend_cached(const at::Tensor& qkv, const CachedKeys& keys, int64_t k_len,
                         const std::vector<int64_t>& first, CachedKernel kernel) {
  check(qkv, keys, k_len, first);
  RECORD_FUNCTION("txl::attend_cached", std::vector<c10::IValue>({qkv}));  // in profiles
  const int64_t batch = qkv.size(0), heads = qkv.size(2), d = qkv.size(3);
  auto out = at::empty({batch, heads * d}, qkv.options());  // [B, H D]
  for_vector_dtype(
      qkv, [&](auto zero) { attend_all<decltype(zero)>(qkv, keys, k_len, first, kernel, out); });
  return out;
}

}  // namespace txl::kernels
