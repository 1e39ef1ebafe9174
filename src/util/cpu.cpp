#include "txl/util/cpu.h"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>

#include "txl/util/error.h"

namespace txl::util {

namespace {

CpuFeatures probe() {
  CpuFeatures f;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  f.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq");
  f.avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("bmi2");
  f.sha = __builtin_cpu_supports("sha") && __builtin_cpu_supports("sse4.1");
  f.bf16 = f.avx512 && (__builtin_cpu_supports("avx512bf16") || __builtin_cpu_supports("amx-bf16"));
#endif
  return f;
}

CpuLevel level_of(const CpuFeatures& f) {
  return f.avx512 ? CpuLevel::kAvx512 : f.avx2 ? CpuLevel::kAvx2 : CpuLevel::kBaseline;
}

}  // namespace

CpuLevel lowered_level(CpuLevel best, const char* asked) {
  if (asked == nullptr || *asked == '\0') return best;
  const std::string text(asked);
  for (auto level : {CpuLevel::kBaseline, CpuLevel::kAvx2, CpuLevel::kAvx512}) {
    if (text == to_string(level)) return std::min(level, best);
  }
  throw Error("TXL_CPU_CAPABILITY = '" + text + "': use avx512, avx2 or default");
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = probe();
  return features;
}

namespace {

// A KernelLevelScope's level, or -1 while none lives.
std::atomic<int>& level_override() {
  static std::atomic<int> level{-1};
  return level;
}

}  // namespace

CpuLevel best_level() {
  static const CpuLevel level = level_of(cpu_features());
  return level;
}

CpuLevel kernel_level() {
  const int forced = level_override().load(std::memory_order_relaxed);
  if (forced >= 0) return static_cast<CpuLevel>(forced);
  static const CpuLevel level = lowered_level(best_level(), std::getenv("TXL_CPU_CAPABILITY"));
  return level;
}

KernelLevelScope::KernelLevelScope(CpuLevel level) {
  TXL_CHECK(level <= best_level(), "this CPU cannot run txl's kernels at level ", to_string(level),
            " (its best: ", to_string(best_level()), ")");
  previous_ = level_override().exchange(static_cast<int>(level));
}

KernelLevelScope::~KernelLevelScope() { level_override().store(previous_); }

std::vector<CpuLevel> levels_available() {
  std::vector<CpuLevel> levels;
  for (auto level : {CpuLevel::kBaseline, CpuLevel::kAvx2, CpuLevel::kAvx512}) {
    if (level <= best_level()) levels.push_back(level);
  }
  return levels;
}

const char* to_string(CpuLevel level) {
  switch (level) {
    case CpuLevel::kAvx512:
      return "avx512";
    case CpuLevel::kAvx2:
      return "avx2";
    case CpuLevel::kBaseline:
      break;
  }
  return "default";
}

std::string openblas_core() {
  using CoreName = char* (*)();
  static const auto name = reinterpret_cast<CoreName>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  const char* core = name != nullptr ? name() : nullptr;
  return core != nullptr ? core : "";
}

}  // namespace txl::util
