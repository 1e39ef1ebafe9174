// ResultRecord's one field list (JSON out, JSON in, CSV) and the evaluation part of a record.
#include "txl/experiment/records.h"

#include "txl/eval/evaluator.h"
#include "txl/util/error.h"
#include "txl/util/json.h"
#include "txl/util/record.h"

namespace txl::experiment {

using Json = json::OrderedJson;
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
  rec.reset = settings.documents ? "document" : "stream";
  rec.max_tokens = settings.max_tokens;
  rec.loss = result.loss;
  rec.ppl = result.ppl;
  rec.bits_per_byte = result.bits_per_byte;
  rec.bits_per_char = result.bits_per_char;
  rec.word_ppl = result.word_ppl;
  rec.words = result.words;
  rec.tokens = result.tokens;
  rec.tokens_per_s = result.tokens_per_s;
  rec.seconds = result.seconds;
  rec.recall_loss = result.recall_loss;
  rec.recall_tokens = result.recall_tokens;
  rec.loss_by_position = result.loss_by_position;
  rec.token_losses = result.token_losses;
  return rec;
}

namespace {

// Every field of a record, in the order of results.csv's columns (results.json's keys follow
// it). Optional: absent in records written before seeds, sweeps, recall tokens, protocols and
// word counts.
template <typename R, typename Visit>
void fields(R& r, Visit&& visit) {
  visit("variant", r.variant);
  visit("attn_type", r.attn_type);
  visit("eval_mode", r.eval_mode);
  visit("split", r.split);
  visit("tgt_len", r.tgt_len);
  visit("mem_len", r.mem_len);
  visit("window", r.window);
  visit("stride", r.stride);
  visit("reset", r.reset, record::kOptional);
  visit("max_tokens", r.max_tokens, record::kOptional);
  visit("loss", r.loss);
  visit("ppl", r.ppl);
  visit("bits_per_byte", r.bits_per_byte);
  visit("bits_per_char", r.bits_per_char);
  visit("word_ppl", r.word_ppl, record::kOptional);
  visit("words", r.words, record::kOptional);
  visit("tokens", r.tokens);
  visit("tokens_per_s", r.tokens_per_s);
  visit("seconds", r.seconds);
  visit.derived("seconds_per_token", r.seconds_per_token());
  visit("recall_loss", r.recall_loss, record::kOptional);
  visit("recall_tokens", r.recall_tokens, record::kOptional);
  visit("train_tgt_len", r.train_tgt_len);
  visit("train_mem_len", r.train_mem_len);
  visit("train_steps", r.train_steps);
  visit("train_tokens", r.train_tokens);
  visit("train_tokens_per_s", r.train_tokens_per_s);
  visit("train_seconds", r.train_seconds);
  visit("params", r.params);
  visit("seed", r.seed, record::kOptional);
  visit("sweep", r.sweep, record::kOptional);
  // Not in every record, nor in older files.
  visit("loss_by_position", r.loss_by_position);
  visit("loss_by_document_position", r.loss_by_document_position);
}

constexpr const char* kRemedy = "delete the file to recompute it";

}  // namespace

std::string to_json(const std::vector<ResultRecord>& records) {
  Json list = Json::array();
  for (const auto& r : records) {
    Json j;
    fields(r, record::JsonWriter<Json>(j));
    list.push_back(std::move(j));
  }
  return list.dump(2) + "\n";
}

std::vector<ResultRecord> records_from_json(const std::string& text, const std::string& origin) {
  TXL_CHECK(!json::nested_deeper_than(text), origin, ": nests deeper than ", json::kMaxDepth,
            " levels; ", kRemedy);
  Json list;
  try {
    list = Json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    TXL_FAIL(origin, ": not valid JSON (", e.what(), "); ", kRemedy);
  }
  // A report's results.json holds them under "records", a cache as a plain list.
  if (list.is_object() && list.contains("records")) list = Json(list.at("records"));
  TXL_CHECK(list.is_array(), origin, ": expected a JSON list of result records");
  std::vector<ResultRecord> records;
  for (const auto& j : list) {
    ResultRecord r;
    fields(r, record::JsonReader<Json>(j, origin, "result", kRemedy));
    records.push_back(std::move(r));
  }
  return records;
}

std::string to_csv(const std::vector<ResultRecord>& records) {
  std::string header;
  const ResultRecord blank;
  fields(blank, record::CsvHeader(header));
  std::string out = header + "\n";
  for (const auto& r : records) {
    std::string row;
    fields(r, record::CsvRow(row));
    out += row + "\n";
  }
  return out;
}

}  // namespace txl::experiment
