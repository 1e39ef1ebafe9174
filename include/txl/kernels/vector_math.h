#pragma once
// Element functions for txl's vector loops (files built with -fopenmp-simd, vector_clones.h):
// written so that the vectorizer can take them, instead of one libm call per element; the
// prefetch helpers of the streaming loops, and the target attribute of txl's AVX-512 kernels
// (whether they run: vector_clones.h's cpu_has_avx512). No dependency but the standard library.

#include <cmath>
#include <cstdint>

namespace txl::kernels {

// TXL_AVX512 before a function compiles it for AVX-512 (F, VL, BW, DQ) whatever the build's
// flags; call it only where cpu_has_avx512(). Defined on x86-64 with GCC or clang only
// (TXL_HAS_AVX512).
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TXL_HAS_AVX512 1
#define TXL_AVX512 __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")))
#endif

// How far ahead of its reads a loop that streams memory asks for it: the hardware's prefetcher
// alone keeps too few lines in flight for txl's generation loops (a 16-row packed product read
// its weights at 9-13 GB/s without, 14-20 GB/s with, on a 2-core Zen 5).
constexpr int64_t kPrefetchAhead = 4096;

// Asks for the cache lines of `bytes` bytes (at least one line) kPrefetchAhead after p. The
// addresses are integers: they may lie past the end of a buffer, where a prefetch does not
// fault (a pointer there would be UB).
inline __attribute__((always_inline)) void prefetch_ahead(const void* p, int64_t bytes) {
  const uintptr_t first = reinterpret_cast<uintptr_t>(p) + kPrefetchAhead;
  for (int64_t b = 0; b < bytes; b += 64) {
    __builtin_prefetch(reinterpret_cast<const void*>(first + static_cast<uintptr_t>(b)), 0, 3);
  }
}

// exp(x) in float, in a form a vector loop can take (Cephes' expf: x = n ln 2 + r, a degree-6
// polynomial in r, 2^n from the exponent bits): relative error about 1e-7 against std::exp for
// x <= 0 (the vectorizer would leave std::exp as one call per element). Below -87 it returns
// exp(-87) ~ 1.6e-38 (2^n stays a normal float; a softmax's largest term is 1). Defined for
// every float: n is converted to an integer only once x is clamped into [-87, 88] (a NaN or an
// infinity converted to int is undefined behaviour), then NaN gives NaN and x > 88 gives +inf.
inline __attribute__((always_inline)) float exp_nonpositive(float x) {
  float c = x < -87.0f ? -87.0f : x;
  c = c > 88.0f ? 88.0f : c;
  c = c == c ? c : 0.0f;  // NaN compares false above: clamped here
  // n = round(c / ln 2) by adding and taking away 1.5 2^23, not std::floor: GCC 12 has no
  // vector floor inside target_clones' clones, and leaves the loop scalar.
  constexpr float kRound = 12582912.0f;
  const float n = (c * 1.44269504088896341f + kRound) - kRound;  // in [-126, 127]
  const float r = c - n * 0.693359375f + n * 2.12194440e-4f;
  float y = 1.9875691500e-4f;
  y = y * r + 1.3981999507e-3f;
  y = y * r + 8.3334519073e-3f;
  y = y * r + 4.1665795894e-2f;
  y = y * r + 1.6666665459e-1f;
  y = y * r + 5.0000001201e-1f;
  y = y * (r * r) + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;  // a normal float's exponent
  // __builtin_bit_cast, not memcpy: GCC 12 vectorizes no loop that copies through memory.
  y *= __builtin_bit_cast(float, bits);
  y = x > 88.0f ? __builtin_inff() : y;
  return x == x ? y : x;
}

inline __attribute__((always_inline)) double exp_nonpositive(double x) { return std::exp(x); }

}  // namespace txl::kernels
