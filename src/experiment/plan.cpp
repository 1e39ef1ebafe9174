// The evaluation plan of an ablation variant: which modes and contexts fit its attention. Kept
// apart from ablation.cpp because it needs only the config and the evaluation settings.
#include <fmt/core.h>

#include <algorithm>

#include "txl/experiment/ablation.h"
#include "txl/util/error.h"

namespace txl::experiment {

std::string PlannedEval::key() const {
  const eval::Shape s = eval::shape_of(settings);
  return fmt::format("{}/{}/Q{}/M{}/L{}/s{}", split, config::to_string(settings.mode), s.tgt_len,
                     s.mem_len, s.window, s.stride);
}

namespace {

// The variant's settings in `mode` (with eval.mem_len = mem_len when >= 0).
eval::Settings in_mode(const config::ExperimentConfig& variant, eval::Mode mode, int mem_len = -1) {
  config::ExperimentConfig c = variant;
  c.eval.mode = mode;
  if (mem_len >= 0) c.eval.mem_len = mem_len;
  return eval::resolve_settings(c);
}

}  // namespace

std::vector<PlannedEval> evaluation_plan(const config::ExperimentConfig& variant,
                                         const std::vector<int>& memory_multiples) {
  const auto& e = variant.eval;
  // Absolute positions cannot use memory (their positions would repeat across segments, paper
  // 3.3), so they get the two fixed-context evaluations of Al-Rfou et al.; relative ones get
  // memory, the Transformer-XL evaluation, and fixed segments as the like-for-like reference.
  std::vector<eval::Settings> per_split;
  if (config::uses_absolute_positions(variant.model.attn_type)) {
    per_split.push_back(in_mode(variant, eval::Mode::kSegments));
    const eval::Settings sliding = in_mode(variant, eval::Mode::kSliding);
    TXL_CHECK(sliding.stride >= 1 && sliding.stride <= sliding.window,
              "eval.stride = ", sliding.stride, " must be between 1 and the sliding window ",
              sliding.window, " (", variant.run.name, ")");
    per_split.push_back(sliding);
  } else {
    const int trained = in_mode(variant, eval::Mode::kMemory).mem_len;
    std::vector<int> lengths;
    for (int k : memory_multiples) {
      TXL_CHECK(k >= 1, "memory multiples must be >= 1, got ", k);
      if (std::find(lengths.begin(), lengths.end(), k * trained) == lengths.end()) {
        lengths.push_back(k * trained);
      }
    }
    for (int len : lengths) per_split.push_back(in_mode(variant, eval::Mode::kMemory, len));
    per_split.push_back(in_mode(variant, eval::Mode::kSegments));
  }
  TXL_CHECK(!e.splits.empty(), "eval.splits is empty for ", variant.run.name,
            "; list at least one of valid, test");
  std::vector<PlannedEval> plan;
  for (const auto& split : e.splits) {
    for (const auto& settings : per_split) plan.push_back({split, settings, false});
  }
  return plan;
}

std::vector<std::int64_t> sweep_contexts(const config::AblationConfig& ablation) {
  if (!ablation.contexts.empty()) return ablation.contexts;
  const std::int64_t q = ablation.base.model.tgt_len;
  const std::int64_t step = std::max<std::int64_t>(1, q / 2);
  std::vector<std::int64_t> grid;
  for (std::int64_t c = step; c <= 4 * q; c += step) grid.push_back(c);
  return grid;
}

std::vector<PlannedEval> sweep_plan(const config::ExperimentConfig& variant,
                                    const std::vector<std::int64_t>& contexts) {
  // An absolute-position model has no positions beyond its training length Q: a window longer
  // than Q runs it on positions it never saw, which RECL does not count (it reads the loss at the
  // longest context within Q) and which cost 8c tokens a scored token. It is swept up to Q (the
  // shortest context if every one is longer).
  std::vector<std::int64_t> used;
  const bool absolute = config::uses_absolute_positions(variant.model.attn_type);
  for (std::int64_t c : contexts) {
    if (!absolute || c <= variant.model.tgt_len || used.empty()) used.push_back(c);
    if (absolute && c >= variant.model.tgt_len) break;
  }
  std::vector<PlannedEval> plan;
  for (const auto& split : variant.eval.splits) {
    for (std::int64_t c : used) {
      const config::ExperimentConfig v = eval::at_context(variant, c);
      plan.push_back({split, eval::resolve_settings(v), /*sweep=*/true});
    }
  }
  return plan;
}

std::string Job::label() const { return replicate ? fmt::format("{}@{}", variant, seed) : variant; }

std::vector<Job> ablation_jobs(const config::AblationConfig& ablation) {
  std::vector<Job> jobs;
  for (const auto& [name, cfg] : ablation.variants) {
    if (ablation.seeds.empty()) {
      jobs.push_back({name, static_cast<std::int64_t>(cfg.run.seed), false, cfg});
      continue;
    }
    for (std::int64_t seed : ablation.seeds) {
      Job job{name, seed, true, cfg};
      const std::filesystem::path dir = cfg.run.output_dir.empty()
                                            ? std::filesystem::path("runs") / cfg.run.name
                                            : std::filesystem::path(cfg.run.output_dir);
      job.config.run.seed = static_cast<std::uint64_t>(seed);
      job.config.run.name = fmt::format("{}/seed{}", cfg.run.name, seed);
      job.config.run.output_dir = (dir / fmt::format("seed{}", seed)).string();
      jobs.push_back(job);
    }
  }
  return jobs;
}

std::filesystem::path ablation_dir(const config::AblationConfig& ablation) {
  return ablation.output_dir.empty() ? std::filesystem::path("runs") / ablation.name
                                     : std::filesystem::path(ablation.output_dir);
}

}  // namespace txl::experiment
