// The evaluation plan of an ablation variant: which modes and contexts fit its attention. Kept
// apart from ablation.cpp because it needs only the config structs.
#include <fmt/core.h>

#include <algorithm>

#include "txl/experiment/ablation.h"
#include "txl/util/error.h"

namespace txl::experiment {

std::string PlannedEval::key() const {
  return fmt::format("{}/{}/Q{}/M{}/L{}/s{}", split, mode, tgt_len, mem_len, window, stride);
}

std::vector<PlannedEval> evaluation_plan(const config::ExperimentConfig& variant,
                                         const std::vector<int>& memory_multiples) {
  const auto& m = variant.model;
  const auto& e = variant.eval;
  const int q = e.tgt_len > 0 ? e.tgt_len : m.tgt_len;
  // Absolute positions cannot use memory (their positions would repeat across segments, paper
  // 3.3), so they get the two fixed-context evaluations of Al-Rfou et al.; relative ones get
  // memory, the Transformer-XL evaluation, and fixed segments as the like-for-like reference.
  const bool absolute = m.attn_type == "vanilla" || m.attn_type == "vanilla_learned";
  std::vector<PlannedEval> per_split;
  if (absolute) {
    per_split.push_back({"", "segments", q, 0, 0, 0});
    const int window = e.window > 0 ? e.window : q;
    TXL_CHECK(e.stride >= 1 && e.stride <= window, "eval.stride = ", e.stride,
              " must be between 1 and the sliding window ", window, " (", variant.run.name, ")");
    per_split.push_back({"", "sliding", q, 0, window, e.stride});
  } else {
    const int trained = e.mem_len >= 0 ? e.mem_len : m.mem_len;
    std::vector<int> lengths;
    for (int k : memory_multiples) {
      TXL_CHECK(k >= 1, "memory multiples must be >= 1, got ", k);
      if (std::find(lengths.begin(), lengths.end(), k * trained) == lengths.end()) {
        lengths.push_back(k * trained);
      }
    }
    for (int len : lengths) per_split.push_back({"", "memory", q, len, 0, 0});
    per_split.push_back({"", "segments", q, 0, 0, 0});
  }
  TXL_CHECK(!e.splits.empty(), "eval.splits is empty for ", variant.run.name,
            "; list at least one of valid, test");
  std::vector<PlannedEval> plan;
  for (const auto& split : e.splits) {
    for (auto p : per_split) {
      p.split = split;
      plan.push_back(p);
    }
  }
  return plan;
}

std::filesystem::path ablation_dir(const config::AblationConfig& ablation) {
  return ablation.output_dir.empty() ? std::filesystem::path("runs") / ablation.name
                                     : std::filesystem::path(ablation.output_dir);
}

}  // namespace txl::experiment
