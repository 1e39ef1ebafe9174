#pragma once
// TXL_VECTOR_LEVELS(ret, name, body, params, args) defines `ret name params` calling
// `body args` compiled three times, for AVX-512 (x86-64-v4), AVX2 (x86-64-v3) and the
// baseline, and running the one of util::kernel_level() (the CPU's best, or lower by
// TXL_CPU_CAPABILITY). The body is an always_inline function, so each version is the body built
// for its instructions; with `omp simd` (-fopenmp-simd, no OpenMP runtime) on the file,
// reductions use vector registers. Elsewhere (clang, other architectures): the body alone,
// baseline only.
#include "txl/util/cpu.h"

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define TXL_VECTOR_LEVELS(ret, name, body, params, args)                                   \
  __attribute__((target("arch=x86-64-v4"))) ret name##_avx512 params { return body args; } \
  __attribute__((target("arch=x86-64-v3"))) ret name##_avx2 params { return body args; }   \
  ret name##_baseline params { return body args; }                                         \
  ret name params {                                                                        \
    const ::txl::util::CpuLevel level = ::txl::util::kernel_level();                       \
    if (level == ::txl::util::CpuLevel::kAvx512) return name##_avx512 args;                \
    if (level == ::txl::util::CpuLevel::kAvx2) return name##_avx2 args;                    \
    return name##_baseline args;                                                           \
  }
// The same for a body written with GCC's vector types, a template over its vectors' bytes: each
// level gets its registers' width (64 for AVX-512's zmm, 32 for AVX2's ymm, 16 for SSE2's xmm);
// a vector type wider than the target's registers compiles to stack traffic.
#define TXL_VECTOR_WIDTHS(ret, name, body, params, args)                                       \
  __attribute__((target("arch=x86-64-v4"))) ret name##_avx512 params { return body<64> args; } \
  __attribute__((target("arch=x86-64-v3"))) ret name##_avx2 params { return body<32> args; }   \
  ret name##_baseline params { return body<16> args; }                                         \
  ret name params {                                                                            \
    const ::txl::util::CpuLevel level = ::txl::util::kernel_level();                           \
    if (level == ::txl::util::CpuLevel::kAvx512) return name##_avx512 args;                    \
    if (level == ::txl::util::CpuLevel::kAvx2) return name##_avx2 args;                        \
    return name##_baseline args;                                                               \
  }
#else
#define TXL_VECTOR_LEVELS(ret, name, body, params, args) \
  ret name params { return body args; }
#define TXL_VECTOR_WIDTHS(ret, name, body, params, args) \
  ret name params { return body<16> args; }
#endif

namespace txl::kernels {

// Whether txl's AVX-512 kernels run (linear_packed, attend_cached, compiled with an
// explicit target attribute): the CPU has AVX-512 F, VL, BW and DQ and TXL_CPU_CAPABILITY does
// not lower the level (util/cpu.h). False off x86-64.
inline bool cpu_has_avx512() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  return util::kernel_level() == util::CpuLevel::kAvx512;
#else
  return false;
#endif
}

}  // namespace txl::kernels
