// report.md and the files beside it (results.json, results.csv, results_summary.csv, plots):
// the sections in order, from the tables and findings of report_parts.h.
#include "txl/experiment/report.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "report_parts.h"
#include "txl/experiment/analysis.h"
#include "txl/util/fs.h"
#include "txl/util/json.h"
#include "txl/util/log.h"
#include "txl/util/plot.h"
#include "txl/util/process.h"

namespace txl::experiment {

namespace stdfs = std::filesystem;
using Json = json::OrderedJson;
using detail::count;
using detail::document_position_section;
using detail::findings_section;
using detail::fixed;
using detail::join;
using detail::main_records;
using detail::markdown_table;
using detail::pair_findings;
using detail::position_section;
using detail::split_table;
using detail::splits_in_order;
using detail::training_table;
using detail::variants_in_order;
using detail::with_spread;

namespace {

constexpr const char* kPlotFiles[] = {"training_loss.png", "context_ppl.png", "eval_cost.png"};
// Drawn when the records have what they show: the context sweep, RECL, loss by position.
constexpr const char* kOptionalPlotFiles[] = {"context_sweep.png", "recl.png",
                                              "loss_by_position.png",
                                              "loss_by_document_position.png", "memory_gain.png"};

// Draws the plots with the plot script (plot.h); returns "" on success, else the reason they
// were skipped.
std::string draw_plots(const stdfs::path& dir, const std::vector<TrainingCurve>& curves,
                       const ReportOptions& options, std::vector<stdfs::path>& plots) {
  if (!options.plots) return "plots were disabled";
  std::vector<std::string> args = {"--results", (dir / "results.json").string(),
                                   "--out",     dir.string(),
                                   "--split",   options.plot_split};
  for (const auto& c : curves) {
    args.push_back("--curve");
    args.push_back(c.variant + "=" + c.metrics.string());
  }
  const plot::ScriptResult run = plot::run_script(args, {options.python, options.plot_script});
  if (!run.drawn()) return run.note;
  std::error_code ec;
  for (const char* name : kPlotFiles) {
    if (!stdfs::exists(dir / name, ec)) {
      plots.clear();
      const auto script = options.plot_script.empty() ? plot::script_path() : options.plot_script;
      return fmt::format("{} did not write {}", script.filename().string(), name);
    }
    plots.push_back(dir / name);
  }
  for (const char* name : kOptionalPlotFiles) {
    if (stdfs::exists(dir / name, ec)) plots.push_back(dir / name);
  }
  return "";
}

// What was compared: the variants and what each changes.
std::string compared_section(const std::vector<std::string>& variants,
                             const ReportOptions& options) {
  std::string md = fmt::format(
      "{} variant(s) ({}), each trained on the same data with the same seed and budget, so that "
      "only the named change differs, then evaluated in the modes that fit it: vanilla models "
      "on fixed segments and with a sliding window, Transformer-XL-style models with memory at "
      "their training length and longer, and on fixed segments for reference.\n\n",
      variants.size(), join(variants, ", "));
  if (options.variant_changes.empty()) return md;
  for (const auto& [name, changes] : options.variant_changes) {
    if (std::find(variants.begin(), variants.end(), name) == variants.end()) continue;
    md += "- `" + name + "`: " + (changes.empty() ? "the base experiment" : changes) + "\n";
  }
  return md + "\n";
}

// The plots, or why there are none.
std::string plots_section(const Report& report) {
  if (report.plots.empty()) return "Plots were skipped: " + report.plot_note + ".\n";
  const std::vector<std::pair<std::string, std::string>> captions = {
      {"training_loss.png", "Training loss against step"},
      {"context_ppl.png", "Perplexity against evaluation context length"},
      {"eval_cost.png", "Evaluation cost against perplexity"},
      {"context_sweep.png", "Context sweep: perplexity against attention length"},
      {"recl.png", "Relative effective context length per variant"},
      {"loss_by_position.png", "Mean loss by position in the segment"},
      {"loss_by_document_position.png", "Mean loss by position in the document"},
      {"memory_gain.png", "Where memory helps: ppl ratio by group of tokens"}};
  std::string md;
  for (const auto& [file, caption] : captions) {
    const bool drawn = std::any_of(report.plots.begin(), report.plots.end(),
                                   [&](const stdfs::path& p) { return p.filename() == file; });
    if (drawn) md += "![" + caption + "](" + file + ")\n\n";
  }
  return md;
}

// Jobs that failed, so that a missing variant or seed is never silent.
std::string failed_section(const ReportOptions& options) {
  if (options.failed.empty()) return "";
  std::string md =
      "\n## Failed jobs\n\nThese jobs failed; the report leaves them out. Fix the "
      "cause and rerun the same command: finished jobs are not run again.\n\n";
  for (const auto& f : options.failed) md += "- " + process::last_lines(f, 6) + "\n";
  return md;
}

// What the evaluations score, and how seeds and intervals are computed.
std::string method_sentence(const Analysis& a, const ReportOptions& options) {
  std::int64_t tokens = 0;
  std::vector<std::int64_t> seeds;
  for (const auto& s : a.summaries) {
    tokens = std::max(tokens, s.first.tokens);
    if (s.seeds.size() > seeds.size()) seeds = s.seeds;
  }
  std::string seed_list;
  for (auto k : seeds) seed_list += (seed_list.empty() ? "" : ", ") + std::to_string(k);
  return fmt::format(
      "Every evaluation on {} scores {}. {} Ratios are ppl(a) / ppl(b) of the two "
      "variants' headline evaluations (memory at the training M for relative positions, fixed "
      "segments for absolute ones) on the same tokens, from per-token losses averaged over "
      "seeds; the 95% interval is a paired block bootstrap: the tokens are cut into blocks of "
      "{} contiguous tokens (neighbouring tokens are not independent), and 1000 resamples draw "
      "as many blocks with replacement, the same ones for a and b. A difference is called "
      "significant only when its interval excludes 1.\n\n",
      a.split,
      options.eval_max_tokens > 0
          ? fmt::format("a prefix of the split, its first {} tokens (eval.max_tokens)",
                        count(tokens))
          : fmt::format("the whole split ({} tokens)", count(tokens)),
      seeds.size() > 1 ? fmt::format("Each variant was trained with {} seeds ({}); figures are "
                                     "mean ± sample standard deviation over them.",
                                     seeds.size(), seed_list)
                       : std::string("One seed per variant: no spread over seeds."),
      a.pairs.empty() ? 64 : a.pairs.front().interval.block);
}

// More variants than this: the headline keeps the comparisons with the first variant (the
// reference, as xl in a family); the significance section has every pair.
constexpr size_t kHeadlineVariants = 3;

// The report's first lines: each pair's ppl ratio with its interval, and each variant trained
// with memory at its training memory against each variant trained without memory (relative
// positions) at the best context of its sweep: whether the memory-trained model is at least as
// good as the memory-less one given any context of the grid.
std::string headline_section(const Analysis& a) {
  std::set<std::string> variants;
  for (const auto& p : a.pairs) variants.insert({p.a, p.b});
  const std::string reference =
      variants.size() > kHeadlineVariants ? a.pairs.front().a : std::string();
  const auto shown = [&](const std::string& x, const std::string& y) {
    return reference.empty() || x == reference || y == reference;
  };
  std::string md;
  if (!reference.empty()) {
    md += fmt::format(
        "{} variants: the comparisons with {}, the first; the significance section below has "
        "every pair.\n\n",
        variants.size(), reference);
  }
  for (const auto& p : a.pairs) {
    if (!shown(p.a, p.b)) continue;
    md += fmt::format(
        "- ppl({}) / ppl({}) = {} [{}, {}]: {}\n", p.a, p.b, fixed(p.interval.ratio, 4),
        fixed(p.interval.low, 4), fixed(p.interval.high, 4),
        p.interval.significant() ? (p.interval.ratio < 1 ? p.a : p.b) + " is lower, significantly"
                                 : std::string("no significant difference"));
  }
  for (const auto& m : a.summaries) {
    const ResultRecord& r = m.first;
    if (!is_headline(r) || r.train_mem_len <= 0 || config::uses_absolute_positions(r.attn_type))
      continue;
    for (const auto& sweep : a.sweeps) {
      if (sweep.variant == r.variant || sweep.train_context != sweep.train_tgt_len ||
          config::uses_absolute_positions(sweep.attn_type) || !std::isfinite(sweep.ppl_best) ||
          !shown(r.variant, sweep.variant))
        continue;
      const double theirs = sweep.ppl_best;  // at attn_len, the first context that reaches it
      md += fmt::format(
          "- {} at its training memory (M = {}): ppl {}; {} (trained without memory) at its best "
          "context of the sweep (c = {}): ppl {}: {}\n",
          r.variant, r.mem_len, fixed(m.ppl.mean, 2), sweep.variant, sweep.attn_len,
          fixed(theirs, 2),
          m.ppl.mean <= theirs ? r.variant + " is at least as good"
                               : sweep.variant + " given memory at evaluation is better");
    }
  }
  if (md.empty()) return "";
  return "\n## Headline (" + a.split + ")\n\n" + md;
}

std::string significance_section(const Analysis& a, const ReportOptions& options) {
  std::string md = "\n## Significance (" + a.split + ")\n\n" + method_sentence(a, options);
  if (a.pairs.empty())
    return md + "No pair of variants kept per-token losses on the same tokens.\n";
  std::vector<std::vector<std::string>> rows;
  for (const auto& p : a.pairs) {
    rows.push_back({p.a, p.b, fixed(p.interval.ratio, 4),
                    fmt::format("[{}, {}]", fixed(p.interval.low, 4), fixed(p.interval.high, 4)),
                    p.interval.significant() ? "yes" : "no", p.interval.ratio < 1 ? p.a : p.b,
                    count(p.interval.tokens)});
  }
  return md + markdown_table(
                  {"a", "b", "ppl(a)/ppl(b)", "95% interval", "significant", "lower ppl", "tokens"},
                  rows, {false, false, true, false, false, false, true});
}

std::string sweep_section(const Analysis& a, const ReportOptions& options) {
  if (a.sweeps.empty()) return "";
  std::vector<std::int64_t> grid;
  for (const auto& s : a.sweeps)
    for (auto c : s.contexts)
      if (std::find(grid.begin(), grid.end(), c) == grid.end()) grid.push_back(c);
  std::sort(grid.begin(), grid.end());
  std::vector<std::string> header = {"variant"};
  for (auto c : grid) header.push_back(fmt::format("c={}", c));
  for (const char* h : {"PPL init (c)", "PPL best", "Attn Len"}) header.push_back(h);
  std::vector<std::vector<std::string>> rows;
  for (const auto& s : a.sweeps) {
    std::vector<std::string> row = {s.variant};
    for (auto c : grid) {
      auto it = std::find(s.contexts.begin(), s.contexts.end(), c);
      row.push_back(it == s.contexts.end() ? "-" : with_spread(s.ppl[it - s.contexts.begin()], 2));
    }
    row.push_back(fmt::format("{} ({})", fixed(s.ppl_init, 2), s.init_context));
    row.push_back(fixed(s.ppl_best, 2));
    row.push_back(std::to_string(s.attn_len));
    rows.push_back(row);
  }
  std::vector<bool> right(header.size(), true);
  right[0] = false;
  return "\n## Context sweep (" + a.split + ")\n\n" +
         fmt::format(
             "Perplexity against the attention length c, the tokens each scored token "
             "sees: relative-position models with memory M = c and same_length (every "
             "query sees c keys, as the paper evaluates; each stream warmed up with c "
             "unscored tokens), absolute-position models with a sliding window L = c "
             "scoring c/{} tokens per window (so each scored token sees 7c/8 to c), up to "
             "their training length (they have no positions beyond it). PPL "
             "init is at the longest context of training (Q + M), PPL best the lowest over "
             "the grid and Attn Len the shortest c that reaches it (the paper's Table 6).\n\n",
             options.sweep_stride_divisor) +
         markdown_table(header, rows, right);
}

std::string recl_section(const Analysis& a) {
  const ReclTable& t = a.recl;
  if (t.variants.empty()) {
    return t.note.empty() ? ""
                          : "\n## Relative effective context length (" + a.split +
                                ")\n\nNot computed: " + t.note + ".\n";
  }
  std::vector<std::string> header = {"variant"};
  for (double r : t.recl.ratios) header.push_back(fmt::format("RECL r={}", r));
  std::vector<std::vector<std::string>> rows;
  for (size_t i = 0; i < t.variants.size(); ++i) {
    std::vector<std::string> row = {t.variants[i]};
    for (auto v : t.recl.recl[i]) row.push_back(std::to_string(v));
    rows.push_back(row);
  }
  std::vector<bool> right(header.size(), true);
  right[0] = false;
  std::string grid;
  for (auto c : t.recl.contexts) grid += (grid.empty() ? "" : ", ") + std::to_string(c);
  return "\n## Relative effective context length (" + a.split + ")\n\n" +
         fmt::format(
             "RECL (docs/model.md section 8; the paper's appendix C) of this group of {} "
             "variants on {} tokens, from the context sweep's per-token losses (averaged "
             "over seeds), on the grid c = {} (each step is a D of the definition): a "
             "context counts while it lowers the group-relative loss of the hardest r of "
             "tokens by 1% or more. An absolute-position model has no positions beyond its "
             "training length Q: at c > Q it counts with its losses at the longest c within "
             "Q.\n\n",
             t.variants.size(), count(t.tokens), grid) +
         markdown_table(header, rows, right);
}

// results.json: every record, then the analysis of each split.
std::string results_json(const std::vector<ResultRecord>& records,
                         const std::vector<Analysis>& analyses,
                         const std::vector<MemoryHelp>& memory_help) {
  Json j;
  j["records"] = Json::parse(to_json(records));
  j["analysis"] = Json::array();
  for (const auto& a : analyses) j["analysis"].push_back(Json::parse(analysis_json(a)));
  if (!memory_help.empty()) j["memory_help"] = Json::parse(memory_help_json(memory_help));
  return j.dump(2) + "\n";
}

std::string summary_csv(const std::vector<Analysis>& analyses,
                        const std::vector<MemoryHelp>& memory_help) {
  std::string out = "table,variant,versus,split,eval,context,figure,value\n";
  for (const auto& a : analyses) out += analysis_csv(a);
  return out + memory_help_csv(memory_help);
}

// report.md from its parts.
std::string report_markdown(const std::string& ablation_name,
                            const std::vector<ResultRecord>& records,
                            const std::vector<TrainingCurve>& curves,
                            const std::vector<Analysis>& analyses, const ReportOptions& options,
                            const Report& report) {
  const auto main = main_records(records);
  const auto summaries = summarize_seeds(main);
  const auto means = mean_records(summaries, main);
  std::string md = "# Ablation: " + ablation_name + "\n" + failed_section(options);
  for (const auto& a : analyses) md += headline_section(a);
  md += "\n## What was compared\n\n";
  md += compared_section(variants_in_order(records), options);
  md += training_table(means, curves);
  for (const auto& split : splits_in_order(main)) {
    md += "\n## Results on " + split + "\n\n" + split_table(summaries, split);
  }
  for (const auto& a : analyses) {
    md += significance_section(a, options) + sweep_section(a, options) + recl_section(a);
  }
  md += position_section(means) + document_position_section(means);
  md += memory_help_markdown(options.memory_help);
  md += "\n## Findings\n\n" + findings_section(means) + pair_findings(analyses);
  md += "\n## Plots\n\n" + plots_section(report);
  md +=
      "\nEvery figure above is in `results.json` (records, then each split's analysis) and in "
      "`results.csv` (records) / `results_summary.csv` (the analysis, one figure a row); the "
      "per-token losses are in each run's `token_losses.safetensors`, the training curves in its "
      "`metrics.jsonl`.\n";
  return md;
}

}  // namespace

Report write_report(const stdfs::path& dir, const std::string& ablation_name,
                    const std::vector<ResultRecord>& records,
                    const std::vector<TrainingCurve>& curves, const ReportOptions& options) {
  Report report;
  report.dir = dir;
  fs::ensure_dir(dir);
  std::vector<Analysis> analyses;
  for (const auto& split : splits_in_order(records)) analyses.push_back(analyse(records, split));
  fs::write_atomic(dir / "results.json", results_json(records, analyses, options.memory_help));
  fs::write_atomic(dir / "results.csv", to_csv(records));
  fs::write_atomic(dir / "results_summary.csv", summary_csv(analyses, options.memory_help));
  report.table = format_table(records);
  report.plot_note = draw_plots(dir, curves, options, report.plots);
  if (!report.plot_note.empty() && options.plots) {
    log::warn("report", "plots skipped: {}", report.plot_note);
  }
  fs::write_atomic(dir / "report.md",
                   report_markdown(ablation_name, records, curves, analyses, options, report));
  log::info("report", "report written to {}", (dir / "report.md").string());
  return report;
}

}  // namespace txl::experiment
