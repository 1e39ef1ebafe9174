#pragma once
// What the report's files share: record lists in order, labels, markdown tables and number
// formats (tables.cpp), and the findings (findings.cpp). Private to src/experiment.

#include <cstdint>
#include <string>
#include <vector>

#include "txl/experiment/analysis.h"
#include "txl/experiment/report.h"

namespace txl::experiment::detail {

// Variant names and splits in first-appearance order.
std::vector<std::string> variants_in_order(const std::vector<ResultRecord>& records);
std::vector<std::string> splits_in_order(const std::vector<ResultRecord>& records);

// The first variant (in record order) satisfying `pred` on its records; "" when none does.
template <typename Pred>
std::string first_variant(const std::vector<ResultRecord>& records, Pred pred) {
  for (const auto& r : records) {
    if (pred(r)) return r.variant;
  }
  return "";
}

std::string join(const std::vector<std::string>& parts, const std::string& separator);

// "M=128", "L=512 s=64" or "-"; and in words: "memory M=128", "fixed segments Q=128".
std::string context_label(const ResultRecord& r);
std::string describe_eval(const ResultRecord& r);

// A markdown table whose columns are padded, so that it reads well in a terminal too.
std::string markdown_table(const std::vector<std::string>& header,
                           const std::vector<std::vector<std::string>>& rows,
                           const std::vector<bool>& right_aligned);

// `x` with `digits` decimals ("nan" for NaN); `n` with thousands separated by commas;
// "127.83" for one seed, "127.83 ± 0.41" over several.
std::string fixed(double x, int digits);
std::string count(std::int64_t n);
std::string with_spread(const MeanStd& m, int digits);

// The main evaluations (no sweep points), whose tables and findings the report shows.
std::vector<ResultRecord> main_records(const std::vector<ResultRecord>& records);

// The report's tables: one row per evaluation of `split` (seeds averaged), the variants'
// training, and the loss by position in the segment and in the document (a table per split).
std::string split_table(const std::vector<SeedSummary>& summaries, const std::string& split);
std::string training_table(const std::vector<ResultRecord>& records,
                           const std::vector<TrainingCurve>& curves);
std::string position_section(const std::vector<ResultRecord>& records);
std::string document_position_section(const std::vector<ResultRecord>& records);

// The findings, one sentence a line (margins, decompositions, recall, memory sweeps, costs),
// and the significance of each pair of variants as findings.
std::string findings_section(const std::vector<ResultRecord>& records);
std::string pair_findings(const std::vector<Analysis>& analyses);

}  // namespace txl::experiment::detail
