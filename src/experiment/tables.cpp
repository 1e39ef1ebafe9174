// The report's tables and the formats they share (report_parts.h).
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "report_parts.h"

namespace txl::experiment::detail {

using config::EvalMode;

// Variant names in first-appearance order.
std::vector<std::string> variants_in_order(const std::vector<ResultRecord>& records) {
  std::vector<std::string> names;
  for (const auto& r : records) {
    if (std::find(names.begin(), names.end(), r.variant) == names.end()) names.push_back(r.variant);
  }
  return names;
}

std::vector<std::string> splits_in_order(const std::vector<ResultRecord>& records) {
  std::vector<std::string> splits;
  for (const auto& r : records) {
    if (std::find(splits.begin(), splits.end(), r.split) == splits.end()) splits.push_back(r.split);
  }
  return splits;
}

std::string join(const std::vector<std::string>& parts, const std::string& separator) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? separator : "") + parts[i];
  return out;
}

std::string context_label(const ResultRecord& r) {
  if (r.eval_mode == EvalMode::kMemory) return fmt::format("M={}", r.mem_len);
  if (r.eval_mode == EvalMode::kSliding) return fmt::format("L={} s={}", r.window, r.stride);
  return "-";
}

std::string describe_eval(const ResultRecord& r) {
  if (r.eval_mode == EvalMode::kMemory) return fmt::format("memory M={}", r.mem_len);
  if (r.eval_mode == EvalMode::kSliding)
    return fmt::format("sliding window L={}, stride {}", r.window, r.stride);
  return fmt::format("fixed segments Q={}", r.tgt_len);
}

// The records behind the headline margin: xl's memory evaluation (training mem_len first) and

// A markdown table whose columns are padded, so that it reads well in a terminal too.
std::string markdown_table(const std::vector<std::string>& header,
                           const std::vector<std::vector<std::string>>& rows,
                           const std::vector<bool>& right_aligned) {
  std::vector<size_t> width(header.size());
  for (size_t c = 0; c < header.size(); ++c) width[c] = std::max<size_t>(3, header[c].size());
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string out = "|";
    for (size_t c = 0; c < cells.size(); ++c) {
      std::string pad(width[c] - cells[c].size(), ' ');
      out += " " + (right_aligned[c] ? pad + cells[c] : cells[c] + pad) + " |";
    }
    return out + "\n";
  };
  std::string out = line(header) + "|";
  for (size_t c = 0; c < header.size(); ++c) {
    out += right_aligned[c] ? " " + std::string(width[c] - 1, '-') + ": |"
                            : " " + std::string(width[c], '-') + " |";
  }
  out += "\n";
  for (const auto& row : rows) out += line(row);
  return out;
}

std::string fixed(double x, int digits) {
  if (std::isnan(x)) return "nan";
  return fmt::format("{:.{}f}", x, digits);
}

std::string count(std::int64_t n) {
  // Thousands separated by a thin comma for readability of token counts and parameters.
  std::string digits = std::to_string(n < 0 ? -n : n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

// "127.83" for one seed, "127.83 ± 0.41" over several.
std::string with_spread(const MeanStd& m, int digits) {
  if (m.n < 2) return fixed(m.mean, digits);
  return fixed(m.mean, digits) + " ± " + fixed(m.std, digits);
}

namespace {

// What a record scored, e.g. "the first 20,000 targets of test (11,942 words, 1.67 tokens a
// word)": the part of its protocol that split_table's caption gives.
std::string scored_text(const ResultRecord& r) {
  std::string out = r.max_tokens > 0 ? "the first " + count(r.max_tokens) + " targets of " + r.split
                                     : "every target of " + r.split;
  if (r.words > 0) {
    out += fmt::format(" ({} words, {:.2f} tokens a word)", count(r.words),
                       static_cast<double>(r.tokens) / static_cast<double>(r.words));
  }
  return out;
}

}  // namespace

// One row per evaluation of `split` (seeds averaged: ppl as mean ± std).
std::string split_table(const std::vector<SeedSummary>& summaries, const std::string& split) {
  bool any_bpb = false, any_bpc = false, any_recall = false, any_seeds = false, any_words = false;
  std::vector<std::string> scoring;  // the distinct "what is scored" of the table's rows
  for (const auto& s : summaries) {
    if (s.first.split != split) continue;
    const std::string scored = scored_text(s.first);
    if (std::find(scoring.begin(), scoring.end(), scored) == scoring.end())
      scoring.push_back(scored);
    any_words = any_words || s.first.word_ppl > 0;
    any_bpb = any_bpb || s.first.bits_per_byte > 0;
    any_bpc = any_bpc || s.first.bits_per_char > 0;
    any_recall = any_recall || s.first.recall_tokens > 0;
    any_seeds = any_seeds || s.seeds.size() > 1;
  }
  std::vector<std::string> header = {"variant", "attn", "mode", "reset", "Q", "context", "ppl"};
  std::vector<bool> right = {false, false, false, false, true, false, true};
  if (any_seeds) header.push_back("seeds"), right.push_back(true);
  if (any_words) header.push_back("word ppl"), right.push_back(true);
  if (any_bpb) header.push_back("bits/byte"), right.push_back(true);
  if (any_bpc) header.push_back("bits/char"), right.push_back(true);
  if (any_recall) header.push_back("recall loss"), right.push_back(true);
  for (const char* h : {"tokens", "tokens/s", "ms/token", "cost vs segments"}) {
    header.push_back(h);
    right.push_back(true);
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& s : summaries) {
    const ResultRecord& r = s.first;
    if (r.split != split) continue;
    std::vector<std::string> row = {r.variant,
                                    config::to_string(r.attn_type),
                                    config::to_string(r.eval_mode),
                                    r.reset,
                                    std::to_string(r.tgt_len),
                                    context_label(r),
                                    with_spread(s.ppl, 2)};
    if (any_seeds) row.push_back(std::to_string(s.seeds.size()));
    if (any_words) row.push_back(r.word_ppl > 0 ? with_spread(s.word_ppl, 2) : "-");
    if (any_bpb) row.push_back(r.bits_per_byte > 0 ? with_spread(s.bits_per_byte, 4) : "-");
    if (any_bpc) row.push_back(r.bits_per_char > 0 ? fixed(r.bits_per_char, 4) : "-");
    if (any_recall) row.push_back(r.recall_tokens > 0 ? with_spread(s.recall_loss, 3) : "-");
    row.push_back(count(r.tokens));
    row.push_back(count(static_cast<std::int64_t>(std::llround(r.tokens_per_s))));
    row.push_back(fixed(1000.0 * r.seconds_per_token(), 4));
    // Cost relative to the same variant's segments pass: sliding's price for its context.
    std::string relative = "-";
    for (const auto& o : summaries) {
      const ResultRecord& x = o.first;
      if (x.variant == r.variant && x.split == split && x.eval_mode == EvalMode::kSegments &&
          x.seconds_per_token() > 0) {
        relative = fmt::format("{:.1f}x", r.seconds_per_token() / x.seconds_per_token());
        break;
      }
    }
    row.push_back(relative);
    rows.push_back(std::move(row));
  }
  std::string caption = "Scored: ";
  for (size_t i = 0; i < scoring.size(); ++i) caption += (i ? "; " : "") + scoring[i];
  caption += ". ppl is per token";
  if (any_words) caption += ", word ppl per word (data/README.md, \"Word counts\")";
  if (any_bpb) caption += ", bits/byte per UTF-8 byte of the scored text";
  caption +=
      "; reset: where memory starts empty (stream: the split as one text; document: each "
      "document on its own).\n\n";
  return caption + markdown_table(header, rows, right);
}

// The main evaluations (no sweep points), whose tables and findings the report shows.
std::vector<ResultRecord> main_records(const std::vector<ResultRecord>& records) {
  std::vector<ResultRecord> out;
  for (const auto& r : records) {
    if (!r.sweep) out.push_back(r);
  }
  return out;
}

std::string training_table(const std::vector<ResultRecord>& records,
                           const std::vector<TrainingCurve>& curves) {
  std::vector<std::string> header = {"variant",
                                     "attn",
                                     "Q",
                                     "M",
                                     "parameters",
                                     "steps",
                                     "tokens",
                                     "tokens/s",
                                     "train seconds",
                                     "final train loss",
                                     "best valid ppl"};
  std::vector<bool> right = {false, false, true, true, true, true, true, true, true, true, true};
  std::vector<std::vector<std::string>> rows;
  for (const auto& name : variants_in_order(records)) {
    const auto& r = *std::find_if(records.begin(), records.end(),
                                  [&](const ResultRecord& x) { return x.variant == name; });
    // A variant's curve, or its first seed's ("xl@1") when it has several.
    auto it = std::find_if(curves.begin(), curves.end(), [&](const TrainingCurve& c) {
      return c.variant == name || c.variant.rfind(name + "@", 0) == 0;
    });
    const TrainingCurve c = it != curves.end() ? *it : TrainingCurve{};
    rows.push_back({r.variant, config::to_string(r.attn_type), std::to_string(r.train_tgt_len),
                    std::to_string(r.train_mem_len), count(r.params), count(r.train_steps),
                    count(r.train_tokens),
                    count(static_cast<std::int64_t>(std::llround(r.train_tokens_per_s))),
                    fixed(r.train_seconds, 1),
                    std::isnan(c.final_train_loss) ? "-" : fixed(c.final_train_loss, 4),
                    std::isnan(c.best_valid_ppl) ? "-" : fixed(c.best_valid_ppl, 2)});
  }
  return markdown_table(header, rows, right);
}

namespace {

// A table per split of one per-position list of the records (loss by position in the segment
// or in the document): a row per record that has it, a column per shown position.
struct PositionTable {
  std::vector<double> ResultRecord::*field;
  std::string context_name;                                 // the third column's header
  std::function<std::string(const ResultRecord&)> context;  // and its cell
  bool context_left;                                        // aligned left (text), else right
  std::function<std::vector<std::pair<size_t, std::string>>(size_t)> columns;  // index, header
  int decimals;
  std::string heading, text;  // "## heading (split)", then the text
};

std::string position_tables(const std::vector<ResultRecord>& records, const PositionTable& t) {
  std::string md;
  for (const auto& split : splits_in_order(records)) {
    std::vector<const ResultRecord*> rows;
    for (const auto& r : records)
      if (r.split == split && !(r.*t.field).empty()) rows.push_back(&r);
    if (rows.empty()) continue;
    const auto columns = t.columns((rows.front()->*t.field).size());
    std::vector<std::string> header = {"variant", "mode", t.context_name};
    for (const auto& column : columns) header.push_back(column.second);
    std::vector<std::vector<std::string>> cells;
    for (const ResultRecord* r : rows) {
      std::vector<std::string> row = {r->variant, config::to_string(r->eval_mode), t.context(*r)};
      const auto& v = r->*t.field;
      for (const auto& column : columns) {
        const size_t k = column.first;
        row.push_back(k >= v.size()         ? ""
                      : std::isfinite(v[k]) ? fmt::format("{:.{}f}", v[k], t.decimals)
                                            : "-");
      }
      cells.push_back(row);
    }
    std::vector<bool> right(header.size(), true);
    right[0] = right[1] = false;
    right[2] = !t.context_left;
    md += "\n## " + t.heading + " (" + split + ")\n\n" + t.text + "\n\n" +
          markdown_table(header, cells, right);
  }
  return md;
}

// Mean loss by position of the segment: positions 0, 1, 2, 4, 8, ... below Q, and Q - 1.

// "0", "1-2", "3-6", ..., the last bucket open ("1023+").
std::string bucket_label(size_t k, size_t buckets) {
  const std::int64_t low = (std::int64_t{1} << k) - 1, high = (std::int64_t{1} << (k + 1)) - 2;
  if (k + 1 == buckets) return fmt::format("{}+", low);
  return low == high ? std::to_string(low) : fmt::format("{}-{}", low, high);
}

}  // namespace

std::string position_section(const std::vector<ResultRecord>& records) {
  PositionTable t;
  t.field = &ResultRecord::loss_by_position;
  t.context_name = "M";
  t.context = [](const ResultRecord& r) { return std::to_string(r.mem_len); };
  t.context_left = false;
  t.columns = [](size_t q) {
    std::vector<std::pair<size_t, std::string>> out;
    for (size_t p = 0; p < q; p = p == 0 ? 1 : 2 * p) out.emplace_back(p, fmt::format("pos {}", p));
    if (out.back().first != q - 1) out.emplace_back(q - 1, fmt::format("pos {}", q - 1));
    return out;
  };
  t.decimals = 4;
  t.heading = "Loss by position in the segment";
  t.text =
      "Mean loss in nats of the tokens at each position of a segment. Without memory, "
      "position 0 has no context and the first positions little; memory gives every "
      "position M tokens more.";
  return position_tables(records, t);
}

// "0", "1-2", "3-6", ..., the last bucket open ("1023+").
// Mean loss by position in the document, in buckets of powers of two.
std::string document_position_section(const std::vector<ResultRecord>& records) {
  PositionTable t;
  t.field = &ResultRecord::loss_by_document_position;
  t.context_name = "context";
  t.context = [](const ResultRecord& r) { return context_label(r); };
  t.context_left = true;
  t.columns = [](size_t buckets) {
    std::vector<std::pair<size_t, std::string>> out;
    for (size_t k = 0; k < buckets; ++k) out.emplace_back(k, "pos " + bucket_label(k, buckets));
    return out;
  };
  t.decimals = 3;
  t.heading = "Loss by position in the document";
  t.text =
      "Mean loss in nats of the tokens at each position of their document (the corpus "
      "marks where documents start), positions grouped in powers of two: a model that "
      "uses longer context keeps gaining as a document goes on.";
  return position_tables(records, t);
}

}  // namespace txl::experiment::detail

namespace txl::experiment {

using detail::main_records;
using detail::split_table;
using detail::splits_in_order;

std::string format_table(const std::vector<ResultRecord>& records) {
  const auto summaries = summarize_seeds(main_records(records));
  std::string out;
  for (const auto& split : splits_in_order(records)) {
    if (!out.empty()) out += "\n";
    out += "Split: " + split + "\n\n" + split_table(summaries, split);
  }
  return out;
}

}  // namespace txl::experiment
