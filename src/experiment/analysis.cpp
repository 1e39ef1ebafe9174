#include "txl/experiment/analysis.h"

#include <fmt/core.h>

#include <algorithm>
#include <functional>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "txl/util/error.h"
#include "txl/util/json.h"
#include "txl/util/record.h"

namespace txl::experiment {

using Json = json::OrderedJson;
using config::AttnType;
using config::EvalMode;

MeanStd mean_std(const std::vector<double>& values) {
  MeanStd out;
  double sum = 0.0;
  for (double v : values) {
    if (!std::isfinite(v)) continue;
    sum += v;
    ++out.n;
  }
  if (out.n == 0) return out;
  out.mean = sum / out.n;
  if (out.n < 2) return out;
  double squares = 0.0;
  for (double v : values) {
    if (std::isfinite(v)) squares += (v - out.mean) * (v - out.mean);
  }
  out.std = std::sqrt(squares / (out.n - 1));
  return out;
}

namespace {

// What makes two records the same evaluation of the same variant (seeds aside).
using EvalKey = std::tuple<std::string, std::string, int, int, int, int, int, bool, std::string>;

EvalKey eval_key(const ResultRecord& r) {
  return {r.variant, r.split,   static_cast<int>(r.eval_mode),
          r.tgt_len, r.mem_len, r.window,
          r.stride,  r.sweep,   r.reset};
}

std::vector<std::string> variants_of(const std::vector<ResultRecord>& records) {
  std::vector<std::string> out;
  for (const auto& r : records) {
    if (std::find(out.begin(), out.end(), r.variant) == out.end()) out.push_back(r.variant);
  }
  return out;
}

// The per-token losses of `picked` averaged over its records (seeds); nothing when one lacks
// them or their sizes differ.
std::optional<torch::Tensor> mean_token_losses(const std::vector<const ResultRecord*>& picked) {
  if (picked.empty()) return std::nullopt;
  std::vector<torch::Tensor> losses;
  for (const ResultRecord* r : picked) {
    if (!r->token_losses.defined() || r->token_losses.dim() != 1) return std::nullopt;
    if (!losses.empty() && r->token_losses.size(0) != losses.front().size(0)) return std::nullopt;
    losses.push_back(r->token_losses.to(torch::kDouble));  // double [T]
  }
  return torch::stack(losses).mean(0);  // double [T]
}

std::vector<const ResultRecord*> select(const std::vector<ResultRecord>& records,
                                        const std::function<bool(const ResultRecord&)>& keep) {
  std::vector<const ResultRecord*> out;
  for (const auto& r : records) {
    if (keep(r)) out.push_back(&r);
  }
  return out;
}

}  // namespace

std::vector<SeedSummary> summarize_seeds(const std::vector<ResultRecord>& records) {
  std::vector<SeedSummary> out;
  std::map<EvalKey, size_t> index;
  std::vector<std::vector<const ResultRecord*>> members;
  for (const auto& r : records) {
    auto [it, added] = index.emplace(eval_key(r), out.size());
    if (added) {
      out.emplace_back();
      out.back().first = r;
      out.back().first.token_losses = torch::Tensor();
      members.emplace_back();
    }
    members[it->second].push_back(&r);
  }
  for (size_t i = 0; i < out.size(); ++i) {
    std::vector<double> ppl, loss, bpb, wppl, recall;
    for (const ResultRecord* r : members[i]) {
      out[i].seeds.push_back(r->seed);
      ppl.push_back(r->ppl);
      loss.push_back(r->loss);
      bpb.push_back(r->bits_per_byte);
      wppl.push_back(r->word_ppl);
      recall.push_back(r->recall_loss);
    }
    out[i].ppl = mean_std(ppl);
    out[i].loss = mean_std(loss);
    out[i].bits_per_byte = mean_std(bpb);
    out[i].word_ppl = mean_std(wppl);
    out[i].recall_loss = mean_std(recall);
  }
  return out;
}

namespace {

// The element-wise mean of a list field over the records of `first`'s evaluation (its seeds).
std::vector<double> mean_of(const std::vector<ResultRecord>& records, const ResultRecord& first,
                            std::vector<double> ResultRecord::*field) {
  std::vector<double> sum((first.*field).size(), 0.0);
  int n = 0;
  for (const auto& x : records) {
    if (eval_key(x) != eval_key(first) || (x.*field).size() != sum.size()) continue;
    for (size_t p = 0; p < sum.size(); ++p) sum[p] += (x.*field)[p];
    ++n;
  }
  for (auto& v : sum) v = n > 0 ? v / n : std::nan("");
  return sum;
}

}  // namespace

std::vector<ResultRecord> mean_records(const std::vector<SeedSummary>& summaries,
                                       const std::vector<ResultRecord>& records) {
  std::vector<ResultRecord> out;
  for (const auto& s : summaries) {
    ResultRecord r = s.first;
    r.ppl = s.ppl.mean;
    r.loss = s.loss.mean;
    r.bits_per_byte = s.bits_per_byte.mean;
    r.word_ppl = s.word_ppl.mean;
    r.recall_loss = s.recall_loss.mean;
    r.loss_by_position = mean_of(records, r, &ResultRecord::loss_by_position);
    r.loss_by_document_position = mean_of(records, r, &ResultRecord::loss_by_document_position);
    out.push_back(std::move(r));
  }
  return out;
}

bool is_headline(const ResultRecord& r) {
  if (r.sweep) return false;
  if (config::uses_absolute_positions(r.attn_type)) return r.eval_mode == EvalMode::kSegments;
  return r.eval_mode == EvalMode::kMemory && r.mem_len == r.train_mem_len;
}

std::optional<HeadlineLosses> headline_losses(const std::vector<ResultRecord>& records,
                                              const std::string& variant,
                                              const std::string& split) {
  const auto picked = select(records, [&](const ResultRecord& r) {
    return r.variant == variant && r.split == split && is_headline(r);
  });
  auto losses = mean_token_losses(picked);
  if (!losses) return std::nullopt;
  return HeadlineLosses{*losses, static_cast<int>(picked.size()), picked.front()};
}

std::vector<PairComparison> compare_pairs(const std::vector<ResultRecord>& records,
                                          const std::string& split,
                                          const AnalysisOptions& options) {
  struct Side {
    std::string variant;
    HeadlineLosses headline;
  };
  std::vector<Side> sides;
  for (const auto& variant : variants_of(records)) {
    if (auto h = headline_losses(records, variant, split)) sides.push_back({variant, *h});
  }
  std::vector<PairComparison> out;
  for (size_t i = 0; i < sides.size(); ++i) {
    for (size_t j = i + 1; j < sides.size(); ++j) {
      const auto& a = sides[i].headline;
      const auto& b = sides[j].headline;
      if (a.losses.size(0) != b.losses.size(0)) continue;
      PairComparison pair;
      pair.split = split;
      pair.a = sides[i].variant;
      pair.b = sides[j].variant;
      pair.seeds_a = a.seeds;
      pair.seeds_b = b.seeds;
      pair.interval =
          eval::paired_bootstrap_ppl_ratio(a.losses, b.losses, options.block, options.samples);
      out.push_back(pair);
    }
  }
  return out;
}

namespace {

// The Table 6 figures of a sweep whose contexts and ppl are filled in.
void fill_table6(ContextSweep& s) {
  s.init_context = s.contexts.front();
  for (std::int64_t c : s.contexts) {
    if (c <= s.train_context) s.init_context = c;
  }
  for (size_t i = 0; i < s.contexts.size(); ++i) {
    const double p = s.ppl[i].mean;
    if (s.contexts[i] == s.init_context) s.ppl_init = p;
    if (std::isfinite(p) && !(p >= s.ppl_best)) {  // strictly lower, or the first finite one
      s.ppl_best = p;
      s.attn_len = s.contexts[i];
    }
  }
}

}  // namespace

std::vector<ContextSweep> context_sweeps(const std::vector<ResultRecord>& records,
                                         const std::string& split) {
  std::vector<ContextSweep> out;
  for (const auto& variant : variants_of(records)) {
    std::map<std::int64_t, std::vector<double>> by_context;
    ContextSweep s;
    for (const auto& r : records) {
      if (r.variant != variant || r.split != split || !r.sweep) continue;
      by_context[r.context()].push_back(r.ppl);
      s.attn_type = r.attn_type;
      s.train_tgt_len = r.train_tgt_len;
      s.train_context = r.train_tgt_len + r.train_mem_len;
    }
    if (by_context.empty()) continue;
    s.variant = variant;
    s.split = split;
    for (const auto& [c, ppl] : by_context) {
      s.contexts.push_back(c);
      s.ppl.push_back(mean_std(ppl));
    }
    fill_table6(s);
    out.push_back(s);
  }
  return out;
}

namespace {

// The context whose losses stand for context c in RECL. An absolute-position model has no
// positions beyond its training segment Q: given c > Q tokens, the most it can use is the last Q,
// so its loss at c is its loss at the longest grid point within Q (a window longer than Q runs
// it on positions it never saw, and RECL's min() would count the noise of that as a gain).
std::int64_t context_used(const ContextSweep& s, const std::set<std::int64_t>& grid,
                          std::int64_t c) {
  if (!config::uses_absolute_positions(s.attn_type) || c <= s.train_tgt_len) return c;
  std::int64_t used = *grid.begin();
  for (std::int64_t g : grid) {
    if (g <= s.train_tgt_len) used = g;
  }
  return used;
}

}  // namespace

ReclTable group_recl(const std::vector<ResultRecord>& records, const std::string& split,
                     const AnalysisOptions& options) {
  ReclTable table;
  table.split = split;
  const auto sweeps = context_sweeps(records, split);
  if (sweeps.size() < 2) {
    table.note = "fewer than two variants have a context sweep on " + split;
    return table;
  }
  // The grid starts from a relative-position sweep where there is one (an absolute-position
  // sweep stops at its training length).
  const auto& start = *std::find_if(sweeps.begin(), sweeps.end(), [&](const ContextSweep& s) {
    return !config::uses_absolute_positions(s.attn_type) || &s == &sweeps.back();
  });
  std::set<std::int64_t> shared(start.contexts.begin(), start.contexts.end());
  for (const auto& s : sweeps) {
    std::set<std::int64_t> mine(s.contexts.begin(), s.contexts.end()), both;
    // An absolute-position sweep stops at its training length Q (sweep_plan): every longer
    // context is read at its longest one within Q (context_used), so it covers them all.
    if (config::uses_absolute_positions(s.attn_type) && !s.contexts.empty()) {
      for (std::int64_t c : shared)
        if (c > s.train_tgt_len) mine.insert(c);
    }
    std::set_intersection(shared.begin(), shared.end(), mine.begin(), mine.end(),
                          std::inserter(both, both.end()));
    shared = both;
  }
  if (shared.size() < 2) {
    table.note = "the variants' sweeps share fewer than two contexts";
    return table;
  }
  std::vector<torch::Tensor> rows;  // [C, T] per variant
  for (const auto& s : sweeps) {
    std::vector<torch::Tensor> per_context;
    for (std::int64_t c : shared) {
      const std::int64_t used = context_used(s, shared, c);
      const auto picked = select(records, [&](const ResultRecord& r) {
        return r.variant == s.variant && r.split == split && r.sweep && r.context() == used;
      });
      const auto losses = mean_token_losses(picked);  // double [T]
      if (!losses || (!rows.empty() && losses->size(0) != rows.front().size(1))) {
        table.note = fmt::format(
            "variant {} at context {} lacks per-token losses on the same "
            "tokens as the others",
            s.variant, c);
        return table;
      }
      if (!per_context.empty() && losses->size(0) != per_context.front().size(0)) {
        table.note =
            fmt::format("variant {} scores different tokens at different contexts", s.variant);
        return table;
      }
      per_context.push_back(*losses);
    }
    rows.push_back(torch::stack(per_context));  // double [C, T]
    table.variants.push_back(s.variant);
  }
  const torch::Tensor losses = torch::stack(rows);  // double [I, C, T]
  table.tokens = losses.size(2);
  table.recl = eval::relative_effective_context(
      losses, std::vector<std::int64_t>(shared.begin(), shared.end()), options.recl);
  return table;
}

Analysis analyse(const std::vector<ResultRecord>& records, const std::string& split,
                 const AnalysisOptions& options) {
  Analysis a;
  a.split = split;
  std::vector<ResultRecord> on_split;
  for (const auto& r : records) {
    if (r.split == split) on_split.push_back(r);
  }
  a.summaries = summarize_seeds(on_split);
  a.pairs = compare_pairs(on_split, split, options);
  a.sweeps = context_sweeps(on_split, split);
  a.recl = group_recl(on_split, split, options);
  return a;
}

// ------------------------------------------------------------------------------ JSON and CSV

namespace {

Json mean_std_json(const MeanStd& m) {
  Json j;
  json::put_number(j, "mean", m.mean);
  json::put_number(j, "std", m.std);
  j["n"] = m.n;
  return j;
}

std::string eval_name(const ResultRecord& r) {
  return fmt::format("{}/Q{}/M{}/L{}/s{}{}{}", config::to_string(r.eval_mode), r.tgt_len, r.mem_len,
                     r.window, r.stride, r.reset == "document" ? "/document" : "",
                     r.sweep ? "/sweep" : "");
}

Json pair_json(const PairComparison& p) {
  Json j;
  j["a"] = p.a;
  j["b"] = p.b;
  j["seeds_a"] = p.seeds_a;
  j["seeds_b"] = p.seeds_b;
  json::put_number(j, "ratio", p.interval.ratio);
  json::put_number(j, "low", p.interval.low);
  json::put_number(j, "high", p.interval.high);
  j["confidence"] = p.interval.confidence;
  j["significant"] = p.interval.significant();
  j["tokens"] = p.interval.tokens;
  j["block"] = p.interval.block;
  j["samples"] = p.interval.samples;
  return j;
}

Json sweep_json(const ContextSweep& s) {
  Json j;
  j["variant"] = s.variant;
  j["attn_type"] = config::to_string(s.attn_type);
  j["contexts"] = s.contexts;
  Json ppl = Json::array();
  for (const auto& m : s.ppl) ppl.push_back(mean_std_json(m));
  j["ppl"] = ppl;
  j["train_context"] = s.train_context;
  j["init_context"] = s.init_context;
  json::put_number(j, "ppl_init", s.ppl_init);
  json::put_number(j, "ppl_best", s.ppl_best);
  j["attn_len"] = s.attn_len;
  return j;
}

Json recl_json(const ReclTable& t, const AnalysisOptions& options) {
  Json j;
  j["variants"] = t.variants;
  j["ratios"] = t.recl.ratios;
  j["contexts"] = t.recl.contexts;
  j["threshold"] = options.recl.threshold;
  j["tokens"] = t.tokens;
  j["recl"] = t.recl.recl;
  if (!t.note.empty()) j["not_computed"] = t.note;
  return j;
}

}  // namespace

std::string analysis_json(const Analysis& a, const AnalysisOptions& options) {
  Json j;
  j["split"] = a.split;
  Json summaries = Json::array();
  for (const auto& s : a.summaries) {
    Json row;
    row["variant"] = s.first.variant;
    row["eval"] = eval_name(s.first);
    row["context"] = s.first.context();
    row["seeds"] = s.seeds;
    row["ppl"] = mean_std_json(s.ppl);
    row["loss"] = mean_std_json(s.loss);
    row["bits_per_byte"] = mean_std_json(s.bits_per_byte);
    row["word_ppl"] = mean_std_json(s.word_ppl);
    row["reset"] = s.first.reset;
    row["max_tokens"] = s.first.max_tokens;
    summaries.push_back(row);
  }
  j["summaries"] = summaries;
  j["pairs"] = Json::array();
  for (const auto& p : a.pairs) j["pairs"].push_back(pair_json(p));
  j["sweeps"] = Json::array();
  for (const auto& s : a.sweeps) j["sweeps"].push_back(sweep_json(s));
  j["recl"] = recl_json(a.recl, options);
  return j.dump();
}

std::string analysis_csv(const Analysis& a) {
  std::string out;
  auto row = [&](const std::string& table, const std::string& variant, const std::string& versus,
                 const std::string& eval, std::int64_t context, const std::string& figure,
                 double value) {
    out +=
        fmt::format("{},{},{},{},{},{},{},{}\n", record::csv_text(table), record::csv_text(variant),
                    record::csv_text(versus), record::csv_text(a.split), record::csv_text(eval),
                    context, figure, record::csv_number(value));
  };
  for (const auto& s : a.summaries) {
    const std::string e = eval_name(s.first);
    row("summary", s.first.variant, "", e, s.first.context(), "ppl_mean", s.ppl.mean);
    row("summary", s.first.variant, "", e, s.first.context(), "ppl_std", s.ppl.std);
    row("summary", s.first.variant, "", e, s.first.context(), "seeds", s.ppl.n);
    if (s.word_ppl.mean > 0) {
      row("summary", s.first.variant, "", e, s.first.context(), "word_ppl_mean", s.word_ppl.mean);
      row("summary", s.first.variant, "", e, s.first.context(), "word_ppl_std", s.word_ppl.std);
    }
  }
  for (const auto& p : a.pairs) {
    row("pair", p.a, p.b, "headline", 0, "ppl_ratio", p.interval.ratio);
    row("pair", p.a, p.b, "headline", 0, "ratio_low", p.interval.low);
    row("pair", p.a, p.b, "headline", 0, "ratio_high", p.interval.high);
    row("pair", p.a, p.b, "headline", 0, "significant", p.interval.significant() ? 1 : 0);
  }
  for (const auto& s : a.sweeps) {
    for (size_t i = 0; i < s.contexts.size(); ++i) {
      row("sweep", s.variant, "", "sweep", s.contexts[i], "ppl_mean", s.ppl[i].mean);
      row("sweep", s.variant, "", "sweep", s.contexts[i], "ppl_std", s.ppl[i].std);
    }
    row("sweep", s.variant, "", "sweep", s.init_context, "ppl_init", s.ppl_init);
    row("sweep", s.variant, "", "sweep", s.attn_len, "ppl_best", s.ppl_best);
    row("sweep", s.variant, "", "sweep", s.attn_len, "attn_len", static_cast<double>(s.attn_len));
  }
  for (size_t i = 0; i < a.recl.variants.size(); ++i) {
    for (size_t k = 0; k < a.recl.recl.ratios.size(); ++k) {
      row("recl", a.recl.variants[i], "", fmt::format("r={}", a.recl.recl.ratios[k]), 0, "recl",
          static_cast<double>(a.recl.recl.recl[i][k]));
    }
  }
  return out;
}

}  // namespace txl::experiment
