#pragma once
// The one probe of the CPU's features for the whole project, read once: what the CPU has, and
// the level of vector instructions txl's own kernels run at. TXL_CPU_CAPABILITY lowers that
// level, as ATEN_CPU_CAPABILITY does for ATen's kernels: `avx512`, `avx2` or `default` (the
// x86-64 baseline); unset, the CPU's best. Tests run the kernels at each level the CPU has. The
// libraries' own choices (OpenBLAS's core, oneDNN's bf16) follow the CPU, not the variable.

#include <string>

namespace txl::util {

enum class CpuLevel { kBaseline = 0, kAvx2 = 1, kAvx512 = 2 };

struct CpuFeatures {
  bool avx512 = false;  // AVX-512 F, VL, BW and DQ (x86-64-v4)
  bool avx2 = false;    // AVX2, FMA, BMI2 (x86-64-v3)
  bool sha = false;     // SHA and SSE4.1 (util::Sha256)
};

// What the CPU has (false everywhere off x86-64 with GCC or clang).
const CpuFeatures& cpu_features();

// The CPU's level, lowered by TXL_CPU_CAPABILITY. Throws txl::Error for a value other than
// avx512, avx2 or default, naming it.
CpuLevel kernel_level();

// The level kernel_level() gives for a CPU whose best is `best` and TXL_CPU_CAPABILITY = `asked`
// (null or empty: unset); never above `best`. Throws txl::Error for an unknown value.
CpuLevel lowered_level(CpuLevel best, const char* asked);

// "avx512", "avx2" or "default".
const char* to_string(CpuLevel level);

// The core OpenBLAS chose when it was loaded, e.g. "Haswell", "SkylakeX" (OPENBLAS_CORETYPE
// when set); "" when the fp32 BLAS is not OpenBLAS (PyPI's LibTorch: MKL).
std::string openblas_core();

}  // namespace txl::util
