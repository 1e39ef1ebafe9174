#include "txl/experiment/report.h"

#include <fmt/core.h>

#include <algorithm>
#include <functional>
#include <cmath>
#include <map>
#include <sstream>

#include "txl/eval/evaluator.h"
#include "txl/experiment/analysis.h"
#include "txl/util/error.h"
#include "txl/util/fs.h"
#include "txl/util/json.h"
#include "txl/util/log.h"
#include "txl/util/plot.h"
#include "txl/util/process.h"

namespace txl::experiment {

namespace stdfs = std::filesystem;
using Json = json::OrderedJson;
using config::AttnType;
using config::EvalMode;

double ResultRecord::seconds_per_token() const {
  return tokens > 0 ? seconds / static_cast<double>(tokens) : 0.0;
}

int ResultRecord::context() const {
  if (eval_mode == EvalMode::kMemory) return mem_len;
  if (eval_mode == EvalMode::kSliding) return window;
  return tgt_len;
}

ResultRecord make_record(const eval::EvalResult& result, const eval::Settings& settings) {
  const eval::Shape shape = eval::shape_of(settings);
  ResultRecord rec;
  rec.eval_mode = settings.mode;
  rec.split = result.split;
  rec.tgt_len = shape.tgt_len;
  rec.mem_len = shape.mem_len;
  rec.window = shape.window;
  rec.stride = shape.stride;
  rec.loss = result.loss;
  rec.ppl = result.ppl;
  rec.bits_per_byte = result.bits_per_byte;
  rec.bits_per_char = result.bits_per_char;
  rec.tokens = result.tokens;
  rec.tokens_per_s = result.tokens_per_s;
  rec.seconds = result.seconds;
  rec.recall_loss = result.recall_loss;
  rec.recall_tokens = result.recall_tokens;
  rec.loss_by_position = result.loss_by_position;
  rec.token_losses = result.token_losses;
  return rec;
}

// ------------------------------------------------------------------------------ JSON and CSV

namespace {

Json record_to_json(const ResultRecord& r) {
  Json j;
  j["variant"] = r.variant;
  j["seed"] = r.seed;
  j["sweep"] = r.sweep;
  j["attn_type"] = config::to_string(r.attn_type);
  j["eval_mode"] = config::to_string(r.eval_mode);
  j["split"] = r.split;
  j["tgt_len"] = r.tgt_len;
  j["mem_len"] = r.mem_len;
  j["window"] = r.window;
  j["stride"] = r.stride;
  json::put_number(j, "loss", r.loss);
  json::put_number(j, "ppl", r.ppl);
  json::put_number(j, "bits_per_byte", r.bits_per_byte);
  json::put_number(j, "bits_per_char", r.bits_per_char);
  j["tokens"] = r.tokens;
  json::put_number(j, "tokens_per_s", r.tokens_per_s);
  json::put_number(j, "seconds", r.seconds);
  json::put_number(j, "seconds_per_token", r.seconds_per_token());
  json::put_number(j, "recall_loss", r.recall_loss);
  j["recall_tokens"] = r.recall_tokens;
  j["train_tgt_len"] = r.train_tgt_len;
  j["train_mem_len"] = r.train_mem_len;
  j["train_steps"] = r.train_steps;
  j["train_tokens"] = r.train_tokens;
  json::put_number(j, "train_tokens_per_s", r.train_tokens_per_s);
  json::put_number(j, "train_seconds", r.train_seconds);
  j["params"] = r.params;
  if (!r.loss_by_position.empty()) {
    j["loss_by_position"] = json::number_list(r.loss_by_position);  // nothing scored there: null
  }
  if (!r.loss_by_document_position.empty()) {
    j["loss_by_document_position"] = json::number_list(r.loss_by_document_position);
  }
  return j;
}

// A field of a cached record; a missing or mistyped one means the cache is from another version.
template <typename T>
T field(const Json& j, const char* key, const std::string& origin) {
  auto it = j.find(key);
  TXL_CHECK(it != j.end(), origin, ": result record lacks \"", key,
            "\" (written by another txl version?); delete the file to recompute it");
  // A number that is not finite was written as null, with its reason under null_because.
  if constexpr (std::is_floating_point_v<T>) {
    if (it->is_null()) return json::get_number(j, key, std::nan(""));
  }
  try {
    return it->template get<T>();
  } catch (const nlohmann::json::exception& e) {
    TXL_FAIL(origin, ": result field \"", key, "\" has the wrong type (", e.what(),
             "); delete the file to recompute it");
  }
}

// An enum field of a cached record, by its name in the enum's table.
template <typename E>
E enum_field(const Json& j, const char* key, const std::string& origin) {
  const std::string name = field<std::string>(j, key, origin);
  const std::optional<E> value = config::parse_enum<E>(name);
  TXL_CHECK(value.has_value(), origin, ": result field \"", key, "\" is '", name,
            "', not one of ", config::enum_choices<E>(), "; delete the file to recompute it");
  return *value;
}

// An optional list of numbers (null = NaN: nothing scored there); empty when absent.
std::vector<double> number_list_field(const Json& j, const char* key, const std::string& origin) {
  std::vector<double> out;
  if (!j.contains(key)) return out;
  const Json& list = j.at(key);
  TXL_CHECK(list.is_array(), origin, ": result field \"", key, "\" must be an array");
  for (const Json& v : list) {
    TXL_CHECK(v.is_null() || v.is_number(), origin, ": \"", key, "\" holds a non-number");
    out.push_back(v.is_null() ? std::nan("") : v.get<double>());
  }
  return out;
}

ResultRecord record_from_json(const Json& j, const std::string& origin) {
  TXL_CHECK(j.is_object(), origin, ": expected a JSON object per result record");
  ResultRecord r;
  r.variant = field<std::string>(j, "variant", origin);
  // Optional: absent in records written before seeds and sweeps.
  r.seed = j.contains("seed") ? field<std::int64_t>(j, "seed", origin) : 0;
  r.sweep = j.contains("sweep") ? field<bool>(j, "sweep", origin) : false;
  r.attn_type = enum_field<AttnType>(j, "attn_type", origin);
  r.eval_mode = enum_field<EvalMode>(j, "eval_mode", origin);
  r.split = field<std::string>(j, "split", origin);
  r.tgt_len = field<int>(j, "tgt_len", origin);
  r.mem_len = field<int>(j, "mem_len", origin);
  r.window = field<int>(j, "window", origin);
  r.stride = field<int>(j, "stride", origin);
  r.loss = field<double>(j, "loss", origin);
  r.ppl = field<double>(j, "ppl", origin);
  r.bits_per_byte = field<double>(j, "bits_per_byte", origin);
  r.bits_per_char = field<double>(j, "bits_per_char", origin);
  r.tokens = field<std::int64_t>(j, "tokens", origin);
  r.tokens_per_s = field<double>(j, "tokens_per_s", origin);
  r.seconds = field<double>(j, "seconds", origin);
  // Optional: absent in records of corpora without recall tokens.
  r.recall_loss = j.contains("recall_loss") ? field<double>(j, "recall_loss", origin) : 0.0;
  r.recall_tokens =
      j.contains("recall_tokens") ? field<std::int64_t>(j, "recall_tokens", origin) : 0;
  r.train_tgt_len = field<int>(j, "train_tgt_len", origin);
  r.train_mem_len = field<int>(j, "train_mem_len", origin);
  r.train_steps = field<std::int64_t>(j, "train_steps", origin);
  r.train_tokens = field<std::int64_t>(j, "train_tokens", origin);
  r.train_tokens_per_s = field<double>(j, "train_tokens_per_s", origin);
  r.train_seconds = field<double>(j, "train_seconds", origin);
  r.params = field<std::int64_t>(j, "params", origin);
  // Optional: not in every record, nor in older files.
  r.loss_by_position = number_list_field(j, "loss_by_position", origin);
  r.loss_by_document_position = number_list_field(j, "loss_by_document_position", origin);
  return r;
}

// RFC 4180 quoting: only when the field holds a comma, quote or line break.
std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

// Shortest round-tripping text of a double for CSV (17 significant digits at most).
std::string csv_number(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  return fmt::format("{}", x);
}

}  // namespace

std::string to_json(const std::vector<ResultRecord>& records) {
  Json list = Json::array();
  for (const auto& r : records) list.push_back(record_to_json(r));
  return list.dump(2) + "\n";
}

std::vector<ResultRecord> records_from_json(const std::string& text, const std::string& origin) {
  TXL_CHECK(!json::nested_deeper_than(text), origin, ": nests deeper than ", json::kMaxDepth,
            " levels; delete the file to recompute it");
  Json list;
  try {
    list = Json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    TXL_FAIL(origin, ": not valid JSON (", e.what(), "); delete the file to recompute it");
  }
  // A report's results.json holds them under "records", a cache as a plain list.
  if (list.is_object() && list.contains("records")) list = Json(list.at("records"));
  TXL_CHECK(list.is_array(), origin, ": expected a JSON list of result records");
  std::vector<ResultRecord> records;
  for (const auto& j : list) records.push_back(record_from_json(j, origin));
  return records;
}

std::string to_csv(const std::vector<ResultRecord>& records) {
  std::string out =
      "variant,attn_type,eval_mode,split,tgt_len,mem_len,window,stride,loss,ppl,bits_per_byte,"
      "bits_per_char,tokens,tokens_per_s,seconds,seconds_per_token,recall_loss,recall_tokens,"
      "train_tgt_len,train_mem_len,train_steps,train_tokens,train_tokens_per_s,train_seconds,"
      "params,seed,sweep\n";
  for (const auto& r : records) {
    out += fmt::format(
        "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n",
        csv_field(r.variant), csv_field(config::to_string(r.attn_type)),
        csv_field(config::to_string(r.eval_mode)), csv_field(r.split),
        r.tgt_len, r.mem_len, r.window, r.stride, csv_number(r.loss), csv_number(r.ppl),
        csv_number(r.bits_per_byte), csv_number(r.bits_per_char), r.tokens,
        csv_number(r.tokens_per_s), csv_number(r.seconds), csv_number(r.seconds_per_token()),
        csv_number(r.recall_loss), r.recall_tokens, r.train_tgt_len, r.train_mem_len, r.train_steps,
        r.train_tokens, csv_number(r.train_tokens_per_s), csv_number(r.train_seconds), r.params,
        r.seed, r.sweep ? 1 : 0);
  }
  return out;
}

// ------------------------------------------------------------------------------------ margin

namespace {

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

// The first variant (in record order) satisfying `pred` on its records.
template <typename Pred>
std::string first_variant(const std::vector<ResultRecord>& records, Pred pred) {
  for (const auto& r : records) {
    if (pred(r)) return r.variant;
  }
  return "";
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

// ------------------------------------------------------------------------------------ tables

namespace {

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

// One row per evaluation of `split` (seeds averaged: ppl as mean ± std).
std::string split_table(const std::vector<SeedSummary>& summaries, const std::string& split) {
  bool any_bpb = false, any_bpc = false, any_recall = false, any_seeds = false;
  for (const auto& s : summaries) {
    if (s.first.split != split) continue;
    any_bpb = any_bpb || s.first.bits_per_byte > 0;
    any_bpc = any_bpc || s.first.bits_per_char > 0;
    any_recall = any_recall || s.first.recall_tokens > 0;
    any_seeds = any_seeds || s.seeds.size() > 1;
  }
  std::vector<std::string> header = {"variant", "attn", "mode", "Q", "context", "ppl"};
  std::vector<bool> right = {false, false, false, true, false, true};
  if (any_seeds) header.push_back("seeds"), right.push_back(true);
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
    std::vector<std::string> row = {r.variant,        config::to_string(r.attn_type),
                                    config::to_string(r.eval_mode), std::to_string(r.tgt_len),
                                    context_label(r), with_spread(s.ppl, 2)};
    if (any_seeds) row.push_back(std::to_string(s.seeds.size()));
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
  return markdown_table(header, rows, right);
}

// The main evaluations (no sweep points), whose tables and findings the report shows.
std::vector<ResultRecord> main_records(const std::vector<ResultRecord>& records) {
  std::vector<ResultRecord> out;
  for (const auto& r : records) {
    if (!r.sweep) out.push_back(r);
  }
  return out;
}

}  // namespace

std::string format_table(const std::vector<ResultRecord>& records) {
  const auto summaries = summarize_seeds(main_records(records));
  std::string out;
  for (const auto& split : splits_in_order(records)) {
    if (!out.empty()) out += "\n";
    out += "Split: " + split + "\n\n" + split_table(summaries, split);
  }
  return out;
}

// ----------------------------------------------------------------------------- training curves

namespace {

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

// ------------------------------------------------------------------------------------- plots

constexpr const char* kPlotFiles[] = {"training_loss.png", "context_ppl.png", "eval_cost.png"};
// Drawn when the records have what they show: the context sweep, RECL, loss by position.
constexpr const char* kOptionalPlotFiles[] = {"context_sweep.png", "recl.png",
                                              "loss_by_position.png",
                                              "loss_by_document_position.png"};

// Draws the plots with the plot script (plot.h); returns "" on success, else the reason they
// were skipped.
std::string draw_plots(const stdfs::path& dir, const std::vector<TrainingCurve>& curves,
                       const ReportOptions& options, std::vector<stdfs::path>& plots) {
  if (!options.plots) return "plots were disabled";
  std::vector<std::string> args = {"--results", (dir / "results.json").string(), "--out",
                                   dir.string(), "--split", options.plot_split};
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

}  // namespace

// ------------------------------------------------------------------------------------ report

namespace {

// What was compared: the variants and what each changes.
std::string compared_section(const std::vector<std::string>& variants, const ReportOptions& options) {
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
      {"loss_by_document_position.png", "Mean loss by position in the document"}};
  std::string md;
  for (const auto& [file, caption] : captions) {
    const bool drawn = std::any_of(report.plots.begin(), report.plots.end(),
                                   [&](const stdfs::path& p) { return p.filename() == file; });
    if (drawn) md += "![" + caption + "](" + file + ")\n\n";
  }
  return md;
}

// A table per split of one per-position list of the records (loss by position in the segment
// or in the document): a row per record that has it, a column per shown position.
struct PositionTable {
  std::vector<double> ResultRecord::*field;
  std::string context_name;                                  // the third column's header
  std::function<std::string(const ResultRecord&)> context;   // and its cell
  bool context_left;                                         // aligned left (text), else right
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
        row.push_back(k >= v.size() ? "" : std::isfinite(v[k]) ? fmt::format("{:.{}f}", v[k], t.decimals) : "-");
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
  t.text = "Mean loss in nats of the tokens at each position of a segment. Without memory, "
           "position 0 has no context and the first positions little; memory gives every "
           "position M tokens more.";
  return position_tables(records, t);
}

// "0", "1-2", "3-6", ..., the last bucket open ("1023+").
std::string bucket_label(size_t k, size_t buckets) {
  const std::int64_t low = (std::int64_t{1} << k) - 1, high = (std::int64_t{1} << (k + 1)) - 2;
  if (k + 1 == buckets) return fmt::format("{}+", low);
  return low == high ? std::to_string(low) : fmt::format("{}-{}", low, high);
}

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
  t.text = "Mean loss in nats of the tokens at each position of their document (the corpus "
           "marks where documents start), positions grouped in powers of two: a model that "
           "uses longer context keeps gaining as a document goes on.";
  return position_tables(records, t);
}

// Jobs that failed, so that a missing variant or seed is never silent.
std::string failed_section(const ReportOptions& options) {
  if (options.failed.empty()) return "";
  std::string md = "\n## Failed jobs\n\nThese jobs failed; the report leaves them out. Fix the "
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

std::string significance_section(const Analysis& a, const ReportOptions& options) {
  std::string md = "\n## Significance (" + a.split + ")\n\n" + method_sentence(a, options);
  if (a.pairs.empty()) return md + "No pair of variants kept per-token losses on the same tokens.\n";
  std::vector<std::vector<std::string>> rows;
  for (const auto& p : a.pairs) {
    rows.push_back({p.a, p.b, fixed(p.interval.ratio, 4),
                    fmt::format("[{}, {}]", fixed(p.interval.low, 4), fixed(p.interval.high, 4)),
                    p.interval.significant() ? "yes" : "no",
                    p.interval.ratio < 1 ? p.a : p.b, count(p.interval.tokens)});
  }
  return md + markdown_table({"a", "b", "ppl(a)/ppl(b)", "95% interval", "significant",
                              "lower ppl", "tokens"},
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
         fmt::format("Perplexity against the attention length c, the tokens each scored token "
                     "sees: relative-position models with memory M = c and same_length (every "
                     "query sees c keys, as the paper evaluates; each stream warmed up with c "
                     "unscored tokens), absolute-position models with a sliding window L = c "
                     "scoring c/{} tokens per window (so each scored token sees 7c/8 to c). PPL "
                     "init is at the longest context of training (Q + M), PPL best the lowest over "
                     "the grid and Attn Len the shortest c that reaches it (the paper's Table 6).\n\n",
                     options.sweep_stride_divisor) +
         markdown_table(header, rows, right);
}

std::string recl_section(const Analysis& a) {
  const ReclTable& t = a.recl;
  if (t.variants.empty()) {
    return t.note.empty() ? "" : "\n## Relative effective context length (" + a.split +
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

}  // namespace

namespace {

// results.json: every record, then the analysis of each split.
std::string results_json(const std::vector<ResultRecord>& records,
                         const std::vector<Analysis>& analyses) {
  Json j;
  j["records"] = Json::parse(to_json(records));
  j["analysis"] = Json::array();
  for (const auto& a : analyses) j["analysis"].push_back(Json::parse(analysis_json(a)));
  return j.dump(2) + "\n";
}

std::string summary_csv(const std::vector<Analysis>& analyses) {
  std::string out = "table,variant,versus,split,eval,context,figure,value\n";
  for (const auto& a : analyses) out += analysis_csv(a);
  return out;
}

// report.md from its parts.
std::string report_markdown(const std::string& ablation_name, const std::vector<ResultRecord>& records,
                            const std::vector<TrainingCurve>& curves,
                            const std::vector<Analysis>& analyses, const ReportOptions& options,
                            const Report& report) {
  const auto main = main_records(records);
  const auto summaries = summarize_seeds(main);
  const auto means = mean_records(summaries, main);
  std::string md = "# Ablation: " + ablation_name + "\n" + failed_section(options) +
                   "\n## What was compared\n\n";
  md += compared_section(variants_in_order(records), options);
  md += training_table(means, curves);
  for (const auto& split : splits_in_order(main)) {
    md += "\n## Results on " + split + "\n\n" + split_table(summaries, split);
  }
  for (const auto& a : analyses) {
    md += significance_section(a, options) + sweep_section(a, options) + recl_section(a);
  }
  md += position_section(means) + document_position_section(means);
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
  fs::write_atomic(dir / "results.json", results_json(records, analyses));
  fs::write_atomic(dir / "results.csv", to_csv(records));
  fs::write_atomic(dir / "results_summary.csv", summary_csv(analyses));
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
