// The report's findings: the headline margin of Transformer-XL over vanilla, its decomposition,
// recall, memory sweeps, evaluation cost, and the significance of each pair, as sentences.
#include <fmt/core.h>

#include <algorithm>
#include <optional>
#include <utility>

#include "report_parts.h"

namespace txl::experiment {

using config::AttnType;
using config::EvalMode;
using detail::count;
using detail::describe_eval;
using detail::first_variant;
using detail::join;
using detail::splits_in_order;
using detail::variants_in_order;

namespace {

// The records behind the headline margin: xl's memory evaluation (training mem_len first) and
// vanilla's segments evaluation at the same tgt_len.
std::optional<std::pair<const ResultRecord*, const ResultRecord*>> margin_pair(
    const std::vector<ResultRecord>& records, const std::string& split) {
  std::string xl = first_variant(records, [](const ResultRecord& r) {
    return r.attn_type == AttnType::kXl && r.train_mem_len > 0;
  });
  std::string vanilla = first_variant(
      records, [](const ResultRecord& r) { return r.attn_type == AttnType::kVanilla; });
  if (vanilla.empty()) {
    vanilla = first_variant(
        records, [](const ResultRecord& r) { return r.attn_type == AttnType::kVanillaLearned; });
  }
  if (xl.empty() || vanilla.empty()) return std::nullopt;

  std::vector<const ResultRecord*> xl_memory;
  for (const auto& r : records) {
    if (r.variant == xl && r.split == split && r.eval_mode == EvalMode::kMemory && r.mem_len > 0) {
      xl_memory.push_back(&r);
    }
  }
  // The training memory is the fair comparison; longer ones follow in record order.
  std::stable_sort(xl_memory.begin(), xl_memory.end(), [](const auto* a, const auto* b) {
    return (a->mem_len == a->train_mem_len) > (b->mem_len == b->train_mem_len);
  });
  for (const auto* x : xl_memory) {
    for (const auto& v : records) {
      if (v.variant == vanilla && v.split == split && v.eval_mode == EvalMode::kSegments &&
          v.tgt_len == x->tgt_len) {
        return std::make_pair(x, &v);
      }
    }
  }
  return std::nullopt;
}

// Sliding-window evaluation of vanilla against xl's memory evaluation (paper 3.2: memory
// evaluation reuses the previous segments' states instead of recomputing a window per token).
std::string cost_sentence(const std::vector<ResultRecord>& records, const std::string& split) {
  const ResultRecord* sliding = nullptr;
  for (const auto& r : records) {
    if (r.split == split && r.eval_mode == EvalMode::kSliding && r.seconds_per_token() > 0) {
      sliding = &r;
      break;
    }
  }
  const ResultRecord* memory = nullptr;
  if (auto pair = margin_pair(records, split)) memory = pair->first;
  if (memory == nullptr) {
    for (const auto& r : records) {
      if (r.split == split && r.eval_mode == EvalMode::kMemory && r.mem_len > 0) {
        memory = &r;
        break;
      }
    }
  }
  if (sliding == nullptr || memory == nullptr || memory->seconds_per_token() <= 0) return "";
  double ratio = sliding->seconds_per_token() / memory->seconds_per_token();
  return fmt::format(
      "Evaluation cost on {}: {} with a {} took {:.4f} ms per token ({} tokens/s) for {:.2f} ppl; "
      "{} with {} took {:.4f} ms per token ({} tokens/s) for {:.2f} ppl. Sliding-window "
      "evaluation costs {:.1f}x as much per token as memory evaluation.",
      split, sliding->variant, describe_eval(*sliding), 1000.0 * sliding->seconds_per_token(),
      count(static_cast<std::int64_t>(std::llround(sliding->tokens_per_s))), sliding->ppl,
      memory->variant, describe_eval(*memory), 1000.0 * memory->seconds_per_token(),
      count(static_cast<std::int64_t>(std::llround(memory->tokens_per_s))), memory->ppl, ratio);
}

// Splits the headline margin into its two named changes when the ablation has a relative-position
// variant trained without memory (paper table 6, "without recurrence"): vanilla -> relative
// positions, then relative positions -> recurrence.
std::string decomposition_sentence(const std::vector<ResultRecord>& records,
                                   const std::string& split) {
  auto pair = margin_pair(records, split);
  if (!pair) return "";
  const auto& [x, v] = *pair;
  std::string rel = first_variant(records, [](const ResultRecord& r) {
    return r.attn_type == AttnType::kXl && r.train_mem_len == 0;
  });
  if (rel.empty()) return "";
  const ResultRecord* r = nullptr;
  for (const auto& c : records) {
    if (c.variant == rel && c.split == split && c.eval_mode == EvalMode::kSegments &&
        c.tgt_len == x->tgt_len) {
      r = &c;
      break;
    }
  }
  if (r == nullptr || v->ppl <= 0 || r->ppl <= 0) return "";
  return fmt::format(
      "Of that margin on {}, relative positions without recurrence ({}, fixed segments) reach "
      "{:.2f} ppl, {:.2f} ppl ({:.1f}%) below vanilla; recurrence then takes {} to {:.2f} ppl, a "
      "further {:.2f} ppl ({:.1f}%).",
      split, rel, r->ppl, v->ppl - r->ppl, 100.0 * (v->ppl - r->ppl) / v->ppl, x->variant, x->ppl,
      r->ppl - x->ppl, 100.0 * (r->ppl - x->ppl) / r->ppl);
}

// The synthetic recall task: the loss on recalled values of the headline pair (ln 64 nats is
// chance: the statement lies beyond the model's context).
std::string recall_sentence(const std::vector<ResultRecord>& records, const std::string& split) {
  auto pair = margin_pair(records, split);
  if (!pair) return "";
  const auto& [x, v] = *pair;
  if (x->recall_tokens == 0 || v->recall_tokens == 0) return "";
  return fmt::format(
      "Recall on {} ({} recalled values; ln 64 = 4.159 nats is chance, 0 perfect): {} with "
      "memory M={} {:.3f} nats, {} with fixed segments {:.3f} nats.",
      split, x->recall_tokens, x->variant, x->mem_len, x->recall_loss, v->variant, v->recall_loss);
}

// How the memory variants' perplexity moves when evaluated with more memory than in training
// (paper 4.3: a model that uses longer context keeps improving with M).
std::string memory_sweep_sentence(const std::vector<ResultRecord>& records,
                                  const std::string& split) {
  std::string out;
  for (const auto& name : variants_in_order(records)) {
    std::vector<const ResultRecord*> memory;
    for (const auto& r : records) {
      if (r.variant == name && r.split == split && r.eval_mode == EvalMode::kMemory &&
          r.mem_len > 0) {
        memory.push_back(&r);
      }
    }
    if (memory.size() < 2) continue;
    std::stable_sort(memory.begin(), memory.end(),
                     [](const auto* a, const auto* b) { return a->mem_len < b->mem_len; });
    std::vector<std::string> points;
    for (const auto* r : memory) points.push_back(fmt::format("M={} {:.2f}", r->mem_len, r->ppl));
    if (!out.empty()) out += " ";
    out += fmt::format("{} on {} with longer evaluation memory (trained with M={}): {} ppl.", name,
                       split, memory.front()->train_mem_len, join(points, ", "));
  }
  return out;
}

}  // namespace

std::optional<Margin> compute_margin(const std::vector<ResultRecord>& records,
                                     const std::string& split) {
  auto pair = margin_pair(records, split);
  if (!pair) return std::nullopt;
  const auto& [x, v] = *pair;
  Margin m;
  m.split = split;
  m.xl_variant = x->variant;
  m.vanilla_variant = v->variant;
  m.tgt_len = x->tgt_len;
  m.mem_len = x->mem_len;
  m.xl_ppl = x->ppl;
  m.vanilla_ppl = v->ppl;
  m.margin_ppl = v->ppl - x->ppl;
  m.margin_percent = v->ppl > 0 ? 100.0 * m.margin_ppl / v->ppl : 0.0;
  m.xl_better = x->ppl < v->ppl;
  return m;
}

std::string margin_sentence(const Margin& m) {
  std::string head = fmt::format(
      "On {}, Transformer-XL ({}, memory M={}) reaches {:.2f} ppl against {:.2f} for vanilla "
      "with fixed segments ({}) at the same segment length Q={}: ",
      m.split, m.xl_variant, m.mem_len, m.xl_ppl, m.vanilla_ppl, m.vanilla_variant, m.tgt_len);
  if (m.xl_better) {
    return head + fmt::format("xl beat vanilla by {:.2f} ppl ({:.1f}% lower perplexity).",
                              m.margin_ppl, m.margin_percent);
  }
  return head + fmt::format("xl did not beat vanilla; its perplexity is {:.2f} higher ({:.1f}%).",
                            -m.margin_ppl, -m.margin_percent);
}

namespace detail {

// The findings, one sentence a line: margins, decompositions, recall, memory sweeps, costs.
std::string findings_section(const std::vector<ResultRecord>& records) {
  using Sentence = std::string (*)(const std::vector<ResultRecord>&, const std::string&);
  // Each kind of sentence with whether it is a headline comparison.
  const std::vector<std::pair<Sentence, bool>> kinds = {
      {[](const std::vector<ResultRecord>& r, const std::string& split) {
         auto m = compute_margin(r, split);
         return m ? margin_sentence(*m) : std::string();
       },
       true},
      {decomposition_sentence, false},
      {recall_sentence, false},
      {memory_sweep_sentence, true},
      {cost_sentence, true}};
  std::string md;
  bool any_finding = false;
  for (const auto& [sentence, headline] : kinds) {
    for (const auto& split : splits_in_order(records)) {
      const std::string text = sentence(records, split);
      if (text.empty()) continue;
      md += "- " + text + "\n";
      any_finding = any_finding || headline;
    }
  }
  if (!any_finding) {
    md +=
        "No headline comparison: the ablation needs an xl variant evaluated with memory and a "
        "vanilla variant evaluated on fixed segments at the same segment length.\n";
  }
  return md;
}

// The significance of each pair as findings.
std::string pair_findings(const std::vector<Analysis>& analyses) {
  std::string md;
  for (const auto& a : analyses) {
    for (const auto& p : a.pairs) {
      md += fmt::format("- {} / {} on {}: ppl ratio {:.4f}, 95% interval [{:.4f}, {:.4f}]: {}.\n",
                        p.a, p.b, a.split, p.interval.ratio, p.interval.low, p.interval.high,
                        p.interval.significant()
                            ? fmt::format("significant, {} has the lower perplexity",
                                          p.interval.ratio < 1 ? p.a : p.b)
                            : std::string("not significant (the interval contains 1)"));
    }
  }
  return md;
}

}  // namespace detail

}  // namespace txl::experiment
