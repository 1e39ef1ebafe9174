// The gain tables of the memory-gain analysis (memory_gain.h): each group's losses, ppl ratio
// with its paired bootstrap interval and share of the summed gain, and their markdown.
#include "txl/eval/memory_gain.h"

#include <cmath>
#include <limits>
#include <sstream>

#include "txl/eval/evaluator.h"
#include "txl/util/error.h"

namespace txl::eval {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// A loss vector as double [T] on the CPU, checked.
torch::Tensor checked_losses(const torch::Tensor& losses, const char* which, std::int64_t t) {
  TXL_CHECK(losses.defined() && losses.dim() == 1 && losses.is_floating_point(),
            "where memory helps: loss_", which, " must be a floating [T] tensor");
  TXL_CHECK(losses.size(0) == t, "where memory helps: loss_", which, " has ", losses.size(0),
            " tokens for an evaluation that scored ", t);
  auto out = losses.to(torch::kCPU, torch::kDouble).contiguous();  // [T]
  TXL_CHECK(torch::isfinite(out).all().item<bool>(), "where memory helps: loss_", which,
            " holds a non-finite loss");
  return out;
}

void check_options(const GainOptions& o) {
  TXL_CHECK(o.block >= 1, "where memory helps: bootstrap block ", o.block, " must be >= 1");
  TXL_CHECK(o.samples >= 2, "where memory helps: bootstrap samples ", o.samples, " must be >= 2");
  TXL_CHECK(o.confidence > 0.0 && o.confidence < 1.0, "where memory helps: confidence ",
            o.confidence, " must lie in (0, 1)");
}

// One group's row from its tokens' losses (double [n] each).
GainRow row_of(const std::string& name, const torch::Tensor& a, const torch::Tensor& b,
               double total_gain, const GainOptions& o) {
  GainRow row;
  row.group = name;
  row.tokens = a.numel();
  if (row.tokens == 0) {
    row.loss_a = row.loss_b = kNaN;
    row.ratio.ratio = row.ratio.low = row.ratio.high = kNaN;
    row.ratio.confidence = o.confidence;
    row.share = 0.0;
    return row;
  }
  row.loss_a = a.mean().item<double>();
  row.loss_b = b.mean().item<double>();
  row.gain = (a - b).sum().item<double>();
  row.share = total_gain != 0.0 ? row.gain / total_gain : kNaN;
  row.ratio = paired_bootstrap_ppl_ratio(a, b, o.block, o.samples, o.seed, o.confidence);
  return row;
}

// The rows of one grouping: groups[k] in [0, names.size()) for every token.
GainTable table_of(const std::string& title, const std::vector<std::string>& names,
                   const torch::Tensor& groups, const torch::Tensor& a, const torch::Tensor& b,
                   double total_gain, const GainOptions& o) {
  GainTable table;
  table.title = title;
  for (size_t g = 0; g < names.size(); ++g) {
    const auto mask = groups == static_cast<std::int64_t>(g);  // [T]
    table.rows.push_back(
        row_of(names[g], a.masked_select(mask), b.masked_select(mask), total_gain, o));
  }
  return table;
}

std::vector<std::string> frequency_names(const std::vector<std::int64_t>& edges) {
  std::vector<std::string> names;
  std::int64_t from = 0;
  for (std::int64_t edge : edges) {
    names.push_back("ranks " + std::to_string(from) + "-" + std::to_string(edge - 1));
    from = edge;
  }
  names.push_back("ranks " + std::to_string(from) + "+");
  return names;
}

std::vector<std::string> names_of(int count, const char* (*name)(std::int64_t)) {
  std::vector<std::string> names;
  for (int g = 0; g < count; ++g) names.emplace_back(name(g));
  return names;
}

}  // namespace

MemoryGain memory_gain(const GainInputs& in, const GainOptions& options) {
  check_options(options);
  const std::int64_t t = in.reach.target.numel();
  const auto a = checked_losses(in.loss_a, "a", t);                        // [T]
  const auto b = checked_losses(in.loss_b, "b", t);                        // [T]
  const auto distance = distance_groups(in.ids, in.doc_starts, in.reach);  // [T], checks ids
  const auto at = in.reach.target.to(torch::kCPU);                         // [T] target offsets
  const auto targets = in.ids.to(torch::kCPU).index_select(0, at);         // [T] target ids
  const auto ranks = frequency_ranks(in.train_counts);                     // [V]
  const auto frequency = frequency_groups(targets, ranks, options.rank_edges);  // [T]
  TXL_CHECK(static_cast<std::int64_t>(in.words.separator.size()) == ranks.numel(),
            "where memory helps: word flags for ", in.words.separator.size(),
            " ids, train counts for ", ranks.numel());
  const auto word_case = case_groups(in.ids, in.doc_starts, in.words).index_select(0, at);  // [T]

  MemoryGain out;
  const double total_gain = (a - b).sum().item<double>();
  out.total = row_of("all tokens", a, b, total_gain, options);
  out.by_distance =
      table_of("by distance to the previous occurrence",
               names_of(kDistanceGroups, distance_group_name), distance, a, b, total_gain, options);
  out.by_frequency = table_of("by train frequency rank", frequency_names(options.rank_edges),
                              frequency, a, b, total_gain, options);
  out.by_case = table_of("by the case of the word", names_of(kCaseGroups, case_group_name),
                         word_case, a, b, total_gain, options);
  return out;
}

MemoryGain compare_memory(const torch::Tensor& loss_a, const torch::Tensor& loss_b,
                          const data::EncodedSplit& split, const Settings& settings_b,
                          const torch::Tensor& train_counts, const WordFlags& words,
                          const GainOptions& options) {
  const data::EncodedSplit text = scored_prefix(split, settings_b.max_tokens);
  GainInputs in;
  in.loss_a = loss_a;
  in.loss_b = loss_b;
  in.ids = text.ids;
  in.doc_starts = text.doc_starts;
  in.reach = segment_reach(text.ids.size(0), text.doc_starts, reach_options(settings_b));
  in.train_counts = train_counts;
  in.words = words;
  return memory_gain(in, options);
}

namespace {

std::string fixed(double value, int digits) {
  if (!std::isfinite(value)) return "n/a";
  std::ostringstream out;
  out.setf(std::ios::fixed);
  out.precision(digits);
  out << value;
  return out.str();
}

// A name in a table cell: '|' would end the cell.
std::string cell(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '|') out += '\\';
    out += c == '\n' ? ' ' : c;
  }
  return out;
}

void put_row(std::ostringstream& md, const GainRow& r) {
  md << "| " << cell(r.group) << " | " << r.tokens << " | " << fixed(r.loss_a, 4) << " | "
     << fixed(r.loss_b, 4) << " | " << fixed(r.ratio.ratio, 4) << " | [" << fixed(r.ratio.low, 4)
     << ", " << fixed(r.ratio.high, 4) << "] | " << fixed(100.0 * r.share, 1) << "% |\n";
}

}  // namespace

std::string gain_markdown(const MemoryGain& gain, const std::string& name_a,
                          const std::string& name_b) {
  std::ostringstream md;
  const std::string a = cell(name_a), b = cell(name_b);
  const std::string level = fixed(100.0 * gain.total.ratio.confidence, 0) + "%";
  for (const GainTable* table : {&gain.by_distance, &gain.by_frequency, &gain.by_case}) {
    md << "**Where memory helps, " << table->title << "** (gain = loss of " << a << " - loss of "
       << b << "; ppl ratio = ppl " << a << " / ppl " << b << ", > 1 where " << b
       << " is better; share = the group's part of the summed gain)\n\n";
    md << "| group | tokens | loss " << a << " | loss " << b << " | ppl ratio | " << level
       << " interval | share of gain |\n";
    md << "| --- | ---: | ---: | ---: | ---: | --- | ---: |\n";
    for (const GainRow& row : table->rows) put_row(md, row);
    put_row(md, gain.total);
    md << "\n";
  }
  return md.str();
}

}  // namespace txl::eval
