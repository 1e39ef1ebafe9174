#include "txl/bench/profile.h"

#include <torch/csrc/autograd/profiler_legacy.h>

#include <algorithm>
#include <functional>
#include <map>

#include <fmt/format.h>

#include "training_loop.h"
#include "txl/util/error.h"

namespace txl::bench {

namespace {

bool in(const std::string& name, std::initializer_list<const char*> names) {
  return std::any_of(names.begin(), names.end(), [&](const char* n) { return name == n; });
}

// Self time per event name from the legacy profiler's per-thread lists of push / pop events.
// Push and pop of one op share a handle; nesting on one thread is LIFO, but the pop is matched
// by handle so that an unbalanced event cannot shift every later one.
// "[16,128,256],[256]" of an event's inputs ("[]" for non-tensor arguments).
std::string shapes_of(const torch::autograd::profiler::LegacyEvent& e) {
  std::string out;
  for (const auto& shape : e.shapes()) {
    if (!out.empty()) out += ",";
    out += "[";
    for (size_t i = 0; i < shape.size(); ++i) out += (i ? "," : "") + std::to_string(shape[i]);
    out += "]";
  }
  return out;
}

std::vector<std::pair<std::string, double>> self_times(
    const torch::autograd::profiler::thread_event_lists& lists, bool by_shape) {
  using torch::autograd::profiler::EventKind;
  using torch::autograd::profiler::LegacyEvent;
  struct Open {
    const LegacyEvent* push;
    double child_us;
  };
  std::vector<std::pair<std::string, double>> out;
  for (const auto& events : lists) {
    std::vector<Open> stack;
    for (const auto& e : events) {
      if (e.kind() == EventKind::PushRange) {
        stack.push_back({&e, 0.0});
      } else if (e.kind() == EventKind::PopRange) {
        auto it = std::find_if(stack.rbegin(), stack.rend(),
                               [&](const Open& o) { return o.push->handle() == e.handle(); });
        if (it == stack.rend()) continue;
        const size_t index = static_cast<size_t>(std::distance(it, stack.rend())) - 1;
        const double elapsed = stack[index].push->cpuElapsedUs(e);
        std::string name = stack[index].push->name();
        if (by_shape) name += " " + shapes_of(*stack[index].push);
        out.emplace_back(name, (elapsed - stack[index].child_us) / 1e3);
        stack.erase(stack.begin() + static_cast<std::ptrdiff_t>(index), stack.end());
        if (!stack.empty()) stack.back().child_us += elapsed;
      }
    }
  }
  return out;
}

}  // namespace

StepProfile summarize_ops(const std::vector<std::pair<std::string, double>>& self_ms) {
  std::map<std::string, OpTime> by_name;
  StepProfile p;
  for (const auto& [name, ms] : self_ms) {
    auto& op = by_name[name];
    op.name = name;
    op.calls += 1;
    op.self_ms += ms;
    p.total_ms += ms;
  }
  double copies = 0, fills = 0, masked = 0;
  for (auto& [key, op] : by_name) {
    op.share = p.total_ms > 0 ? op.self_ms / p.total_ms : 0.0;
    const std::string name = key.substr(0, key.find(' '));  // without the shapes
    if (in(name, {"aten::copy_", "aten::contiguous", "aten::clone", "aten::cat", "aten::_cat",
                  "aten::_to_copy", "aten::constant_pad_nd"})) {
      copies += op.self_ms;
    } else if (in(name, {"aten::fill_", "aten::zero_", "aten::zeros", "aten::zeros_like",
                         "aten::full", "aten::full_like", "aten::ones", "aten::ones_like"})) {
      fills += op.self_ms;
    } else if (in(name, {"aten::masked_fill", "aten::masked_fill_"})) {
      masked += op.self_ms;
    }
    p.ops.push_back(op);
  }
  std::sort(p.ops.begin(), p.ops.end(),
            [](const OpTime& a, const OpTime& b) { return a.self_ms > b.self_ms; });
  if (p.total_ms > 0) {
    p.copy_share = copies / p.total_ms;
    p.fill_share = fills / p.total_ms;
    p.masked_fill_share = masked / p.total_ms;
  }
  return p;
}

StepProfile profile_call(const std::function<void()>& fn, bool by_shape) {
  namespace profiler = torch::autograd::profiler;
  profiler::enableProfilerLegacy(
      torch::profiler::impl::ProfilerConfig(torch::profiler::impl::ProfilerState::CPU, by_shape));
  try {
    fn();
  } catch (...) {
    profiler::disableProfilerLegacy();
    throw;
  }
  auto profile = summarize_ops(self_times(profiler::disableProfilerLegacy(), by_shape));
  TXL_CHECK(!profile.ops.empty(), "bench: the profiler recorded no op");
  return profile;
}

StepProfile profile_training_step(const config::ExperimentConfig& config, std::int64_t vocab,
                                  const PhaseOptions& options, bool by_shape) {
  train::RandomSteps loop(config, vocab, detail::random_steps_options(options), options.warmup + 1);
  for (int i = 0; i < options.warmup; ++i) loop.step(options.bf16);
  auto profile = profile_call([&] { loop.step(options.bf16); }, by_shape);
  profile.what = "one training step";
  profile.bf16 = options.bf16;
  return profile;
}

StepProfile profile_eval_segment(const config::ExperimentConfig& config, std::int64_t vocab,
                                 const PhaseOptions& options, bool by_shape) {
  torch::manual_seed(options.seed);
  models::TransformerLM model(config.model, vocab);
  detail::EvalLoop loop(model, vocab, memory_eval_settings(config), options, options.warmup + 1);
  for (int i = 0; i < options.warmup; ++i) loop.segment();
  auto profile = profile_call([&] { loop.segment(); }, by_shape);
  profile.what = "one evaluation segment (memory mode)";
  profile.bf16 = options.bf16;
  return profile;
}

namespace {

std::int64_t product(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  return n;
}

// 2 x the multiply-adds of one matrix product from its input shapes (see count_matmul_flops);
// 0 for any other op.
double matmul_flops(const std::string& name, const std::vector<std::vector<std::int64_t>>& inputs) {
  // The two factors: the first two inputs, or the second and third after an added term.
  const bool added = in(name, {"aten::addmm", "aten::baddbmm", "aten::addmv"});
  if (!added && !in(name, {"aten::mm", "aten::bmm", "aten::mv", "txl::batched_matmul"})) return 0.0;
  const size_t first = added ? 1 : 0;
  if (inputs.size() < first + 2) return 0.0;
  const auto& a = inputs[first];      // [m, k] or [b, m, k]
  const auto& b = inputs[first + 1];  // [k, n], [b, k, n] or [k]
  if (a.empty() || b.empty()) return 0.0;
  const std::int64_t columns = b.size() == 1 ? 1 : b.back();  // n (1 for a vector)
  return 2.0 * static_cast<double>(product(a)) * static_cast<double>(columns);
}

}  // namespace

double count_matmul_flops(const std::function<void()>& fn) {
  namespace profiler = torch::autograd::profiler;
  profiler::enableProfilerLegacy(
      torch::profiler::impl::ProfilerConfig(torch::profiler::impl::ProfilerState::CPU, true));
  try {
    fn();
  } catch (...) {
    profiler::disableProfilerLegacy();
    throw;
  }
  double flops = 0.0;
  for (const auto& events : profiler::disableProfilerLegacy()) {
    for (const auto& e : events) {
      if (e.kind() == profiler::EventKind::PushRange) flops += matmul_flops(e.name(), e.shapes());
    }
  }
  return flops;
}

std::string format_profile(const StepProfile& p, int top) {
  std::string s = fmt::format("{} ({}), self CPU time by op: {:.1f} ms\n", p.what,
                              p.bf16 ? "bf16 autocast" : "fp32", p.total_ms);
  // Ops told apart by shape need a wider name column.
  size_t width = 44;
  for (int i = 0; i < top && i < static_cast<int>(p.ops.size()); ++i) {
    width = std::max(width, std::min<size_t>(p.ops[static_cast<size_t>(i)].name.size(), 110));
  }
  s += fmt::format("{:<{}} {:>6} {:>10} {:>7}\n", "op", width, "calls", "self ms", "share");
  for (int i = 0; i < top && i < static_cast<int>(p.ops.size()); ++i) {
    const auto& op = p.ops[static_cast<size_t>(i)];
    s += fmt::format("{:<{}} {:>6} {:>10.2f} {:>6.1f}%\n", op.name.substr(0, width), width,
                     op.calls, op.self_ms, 100 * op.share);
  }
  s += fmt::format("copies (copy_, contiguous, clone, cat, _to_copy, constant_pad_nd): {:.1f}%\n",
                   100 * p.copy_share);
  s += fmt::format("fills (fill_, zero_, zeros, full, ones and *_like): {:.1f}%\n",
                   100 * p.fill_share);
  s += fmt::format("masked_fill: {:.1f}%\n", 100 * p.masked_fill_share);
  return s;
}

}  // namespace txl::bench
