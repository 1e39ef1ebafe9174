#pragma once
// The one probe of the CPU's features for the whole project, read once: what the CPU has, and
// the level of vector instructions txl's own kernels run at. TXL_CPU_CAPABILITY lowers that
// level, as ATEN_CPU_CAPABILITY does for ATen's kernels: `avx512`, `avx2` or `default` (the
// x86-64 baseline); unset, the CPU's best. Tests run the kernels at each level the CPU has. The
// libraries' own choices (OpenBLAS's core, oneDNN's bf16) follow the CPU, not the variable.

#include <string>
#include <vector>

namespace txl::util {

enum class CpuLevel { kBaseline = 0, kAvx2 = 1, kAvx512 = 2 };

struct CpuFeatures {
  bool avx512 = false;  // AVX-512 F, VL, BW and DQ (x86-64-v4)
  bool avx2 = false;    // AVX2, FMA, BMI2 (x86-64-v3)
  bool sha = false;     // SHA and SSE4.1 (util::Sha256)
  bool bf16 = false;    // bf16 products in hardware: AVX-512 with AVX512_BF16, or AMX-BF16
};

// What the CPU has (false everywhere off x86-64 with GCC or clang).
const CpuFeatures& cpu_features();

// The level txl's kernels run at now: the CPU's, lowered by TXL_CPU_CAPABILITY, unless a
// KernelLevelScope is alive. Read at every kernel call (an atomic load), so that one process
// can run the kernels of each level on the same inputs. Throws txl::Error for a value of the
// variable other than avx512, avx2 or default, naming it.
CpuLevel kernel_level();

// The CPU's best level, whatever TXL_CPU_CAPABILITY says.
CpuLevel best_level();

// While it lives, every thread's kernels run at `level` instead of kernel_level()'s (the tests
// that compare the levels on the same inputs; nothing else sets it). Throws txl::Error for a
// level above the CPU's best (its instructions would fault). Nest them last-in first-out.
class KernelLevelScope {
 public:
  explicit KernelLevelScope(CpuLevel level);
  ~KernelLevelScope();
  KernelLevelScope(const KernelLevelScope&) = delete;
  KernelLevelScope& operator=(const KernelLevelScope&) = delete;

 private:
  int previous_;
};

// The levels this CPU can run, lowest first: default, then avx2 and avx512 where it has them.
std::vector<CpuLevel> levels_available();

// The level kernel_level() gives for a CPU whose best is `best` and TXL_CPU_CAPABILITY = `asked`
// (null or empty: unset); never above `best`. Throws txl::Error for an unknown value.
CpuLevel lowered_level(CpuLevel best, const char* asked);

// "avx512", "avx2" or "default".
const char* to_string(CpuLevel level);

// The core OpenBLAS chose when it was loaded, e.g. "Haswell", "SkylakeX" (OPENBLAS_CORETYPE
// when set); "" when the fp32 BLAS is not OpenBLAS (PyPI's LibTorch: MKL).
std::string openblas_core();

}  // namespace txl::util
