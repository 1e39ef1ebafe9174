#include "txl/experiment/report.h"

#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "support/test_support.h"
#include "txl/util/error.h"
#include "txl/util/fs.h"
#include "txl/util/plot.h"
#include "txl/util/process.h"

namespace {

using txl::config::AttnType;
using txl::config::EvalMode;
using txl::experiment::ResultRecord;
using txl::test::TempDir;
namespace stdfs = std::filesystem;

ResultRecord make(const std::string& variant, AttnType attn, EvalMode mode,
                  const std::string& split, int mem_len, int window, double ppl, double seconds,
                  std::int64_t tokens = 1000) {
  ResultRecord r;
  r.variant = variant;
  r.attn_type = attn;
  r.eval_mode = mode;
  r.split = split;
  r.tgt_len = 128;
  r.mem_len = mem_len;
  r.window = window;
  r.stride = window > 0 ? 1 : 0;
  r.ppl = ppl;
  r.loss = std::log(ppl);
  r.bits_per_byte = r.loss / std::log(2.0) / 4.0;
  r.tokens = tokens;
  r.seconds = seconds;
  r.tokens_per_s = tokens / seconds;
  r.train_tgt_len = 128;
  r.train_mem_len = attn == AttnType::kXl ? 128 : 0;
  r.train_steps = 500;
  r.train_tokens = 500 * 16 * 128;
  r.train_tokens_per_s = attn == AttnType::kXl ? 3000.5 : 4000.25;
  r.train_seconds = 123.5;
  r.params = attn == AttnType::kXl ? 1234567 : 1200000;
  return r;
}

// Two variants, two splits, every mode the runner produces for them.
std::vector<ResultRecord> sample_records() {
  std::vector<ResultRecord> records;
  for (const std::string split : {"valid", "test"}) {
    double shift = split == "test" ? 1.0 : 0.0;
    records.push_back(
        make("vanilla", AttnType::kVanilla, EvalMode::kSegments, split, 0, 0, 60.0 + shift, 0.5));
    records.push_back(
        make("vanilla", AttnType::kVanilla, EvalMode::kSliding, split, 0, 128, 48.0 + shift, 20.0));
    records.push_back(
        make("xl", AttnType::kXl, EvalMode::kMemory, split, 128, 0, 42.0 + shift, 0.8));
    records.push_back(
        make("xl", AttnType::kXl, EvalMode::kMemory, split, 256, 0, 40.5 + shift, 1.0));
    records.push_back(
        make("xl", AttnType::kXl, EvalMode::kSegments, split, 0, 0, 58.0 + shift, 0.5));
  }
  return records;
}

std::vector<txl::experiment::TrainingCurve> sample_curves(const TempDir& dir) {
  // metrics.jsonl as the trainer writes it; the xl file ends with a line cut short by a crash.
  txl::test::write_text(
      dir / "vanilla" / "metrics.jsonl",
      R"({"kind":"train","step":10,"loss":6.5,"ppl":665.1,"lr":0.001,"tokens":20480,"tokens_per_s":4000,"seconds":5.1})"
      "\n"
      R"({"kind":"train","step":20,"loss":5.25,"ppl":190.5,"lr":0.001,"tokens":40960,"tokens_per_s":4000,"seconds":10.2})"
      "\n"
      R"({"kind":"eval","step":20,"split":"valid","loss":4.2,"ppl":66.69})"
      "\n");
  txl::test::write_text(
      dir / "xl" / "metrics.jsonl",
      R"({"kind":"train","step":10,"loss":6.25,"ppl":518.0,"lr":0.001,"tokens":20480,"tokens_per_s":3000,"seconds":6.8})"
      "\n"
      R"({"kind":"eval","step":10,"split":"valid","loss":4.1,"ppl":60.34})"
      "\n"
      R"({"kind":"train","step":20,"loss":4.875,"ppl":131.0,"lr":0.001,"tokens":40960,"tokens_per_s":3000,"seconds":13.6})"
      "\n"
      R"({"kind":"eval","step":20,"split":"valid","loss":3.9,"ppl":49.40})"
      "\n"
      R"({"kind":"train","step":30,"lo)");
  // The figures are the trainer's summary of the same runs (the last complete progress record,
  // the best validation).
  txl::experiment::TrainingCurve vanilla{"vanilla", dir / "vanilla" / "metrics.jsonl"};
  vanilla.final_train_loss = 5.25;
  vanilla.best_valid_ppl = 66.69;
  txl::experiment::TrainingCurve xl{"xl", dir / "xl" / "metrics.jsonl"};
  xl.final_train_loss = 4.875;
  xl.best_valid_ppl = 49.40;
  return {vanilla, xl};
}

txl::experiment::ReportOptions no_plots() {
  txl::experiment::ReportOptions options;
  options.plots = false;
  return options;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

bool matplotlib_available() { return txl::plot::matplotlib_available(); }

std::string no_matplotlib() {
  return "the plot interpreter " + txl::plot::python_interpreter() +
         " cannot import matplotlib (configure with -DTXL_PYTHON=... or set TXL_PYTHON)";
}

stdfs::path plot_script() { return txl::test::source_dir() / "tools" / "plot_report.py"; }

// ------------------------------------------------------------------------------- json / csv

TEST(Report, JsonHoldsEveryRecordWithItsNumbers) {
  TempDir dir;
  auto records = sample_records();
  txl::experiment::write_report(dir.path(), "toy", records, sample_curves(dir), no_plots());
  // The records, then the analysis of each split (analysis_test.cpp).
  auto json = nlohmann::json::parse(txl::fs::read_file(dir / "results.json"))["records"];
  ASSERT_TRUE(json.is_array());
  ASSERT_EQ(json.size(), records.size());
  for (size_t i = 0; i < records.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(json[i]["variant"], records[i].variant);
    EXPECT_EQ(json[i]["attn_type"], txl::config::to_string(records[i].attn_type));
    EXPECT_EQ(json[i]["eval_mode"], txl::config::to_string(records[i].eval_mode));
    EXPECT_EQ(json[i]["split"], records[i].split);
    EXPECT_EQ(json[i]["tgt_len"], records[i].tgt_len);
    EXPECT_EQ(json[i]["mem_len"], records[i].mem_len);
    EXPECT_EQ(json[i]["window"], records[i].window);
    EXPECT_DOUBLE_EQ(json[i]["ppl"].get<double>(), records[i].ppl);
    EXPECT_DOUBLE_EQ(json[i]["bits_per_byte"].get<double>(), records[i].bits_per_byte);
    EXPECT_DOUBLE_EQ(json[i]["tokens_per_s"].get<double>(), records[i].tokens_per_s);
    EXPECT_DOUBLE_EQ(json[i]["seconds"].get<double>(), records[i].seconds);
    EXPECT_EQ(json[i]["params"], records[i].params);
    EXPECT_DOUBLE_EQ(json[i]["seconds_per_token"].get<double>(), records[i].seconds / 1000.0);
  }
  // What the runner caches between runs reads back field for field.
  auto back = txl::experiment::records_from_json(txl::fs::read_file(dir / "results.json"), "x");
  ASSERT_EQ(back.size(), records.size());
  for (size_t i = 0; i < records.size(); ++i) {
    EXPECT_EQ(txl::experiment::to_json({back[i]}), txl::experiment::to_json({records[i]}));
  }
}

// A variant name with quotes, a backslash and control characters, and figures that are not
// finite: results.json stays valid JSON, the name reads back byte for byte, and each non-finite
// number is null with its reason and reads back as the same number.
TEST(Report, JsonStaysValidForAnyNameAndForNonFiniteFigures) {
  TempDir dir;
  auto records = sample_records();
  records[0].variant = "odd \"name\" \\ with\nnew line,\ttab and \x01";
  records[0].ppl = std::numeric_limits<double>::infinity();
  records[0].loss = std::nan("");
  records[1].bits_per_byte = -std::numeric_limits<double>::infinity();
  txl::experiment::write_report(dir.path(), "toy", records, {}, no_plots());
  const std::string text = txl::fs::read_file(dir / "results.json");
  auto json = nlohmann::json::parse(text)["records"];
  EXPECT_EQ(json[0]["variant"], records[0].variant);
  EXPECT_TRUE(json[0]["ppl"].is_null());
  EXPECT_EQ(json[0]["null_because"]["ppl"], "+inf");
  EXPECT_EQ(json[0]["null_because"]["loss"], "nan");
  EXPECT_EQ(json[1]["null_because"]["bits_per_byte"], "-inf");
  EXPECT_FALSE(json[2].contains("null_because"));
  auto back = txl::experiment::records_from_json(text, "results.json");
  ASSERT_EQ(back.size(), records.size());
  EXPECT_EQ(back[0].variant, records[0].variant);
  EXPECT_EQ(back[0].ppl, std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::isnan(back[0].loss));
  EXPECT_EQ(back[1].bits_per_byte, -std::numeric_limits<double>::infinity());
  EXPECT_EQ(txl::experiment::to_json(back), txl::experiment::to_json(records));
}

TEST(Report, RecordsFromJsonNamesTheFileAndTheMissingField) {
  TXL_EXPECT_THROW_WITH(txl::experiment::records_from_json(R"([{"variant":"xl"}])", "cache.json"),
                        "cache.json: result record lacks \"attn_type\"");
  TXL_EXPECT_THROW_WITH(txl::experiment::records_from_json("[{", "cache.json"),
                        "cache.json: not valid JSON");
  // Names are read through the enums' tables: another name is an error listing the valid ones.
  auto json = nlohmann::json::parse(txl::experiment::to_json(sample_records()));
  json[1]["attn_type"] = "transformer";
  TXL_EXPECT_THROW_WITH(txl::experiment::records_from_json(json.dump(), "cache.json"),
                        "cache.json: result field \"attn_type\" is 'transformer', not one of "
                        "xl | shaw | vanilla | vanilla_learned");
  json[1]["attn_type"] = "vanilla";
  json[2]["eval_mode"] = "beam";
  TXL_EXPECT_THROW_WITH(txl::experiment::records_from_json(json.dump(), "cache.json"),
                        "cache.json: result field \"eval_mode\" is 'beam', not one of "
                        "memory | segments | sliding");
  TXL_EXPECT_THROW_WITH(txl::experiment::records_from_json("{}", "cache.json"),
                        "expected a JSON list");
}

TEST(Report, CsvHasAHeaderAndOneParsableLinePerRecord) {
  TempDir dir;
  auto records = sample_records();
  records[0].variant = "vanilla, \"quoted\"";  // must survive CSV quoting
  txl::experiment::write_report(dir.path(), "toy", records, {}, no_plots());
  std::istringstream in(txl::fs::read_file(dir / "results.csv"));
  std::string header;
  std::getline(in, header);
  EXPECT_EQ(header.rfind("variant,attn_type,eval_mode,split,tgt_len,mem_len,window,stride,reset,"
                         "max_tokens,loss,ppl,bits_per_byte,bits_per_char,word_ppl,words,tokens,",
                         0),
            0u);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), records.size());
  EXPECT_EQ(
      lines[0].rfind(R"("vanilla, ""quoted""",vanilla,segments,valid,128,0,0,0,stream,0,)", 0), 0u)
      << lines[0];
  // Column 12 (ppl) of the xl memory M=256 test row holds its exact value.
  const std::string& row = lines[8];
  std::vector<std::string> cells;
  std::stringstream cells_in(row);
  for (std::string cell; std::getline(cells_in, cell, ',');) cells.push_back(cell);
  ASSERT_EQ(cells.size(), 31u) << row;  // the last two: seed, sweep
  EXPECT_EQ(cells[0], "xl");
  EXPECT_EQ(cells[2], "memory");
  EXPECT_EQ(cells[3], "test");
  EXPECT_EQ(cells[5], "256");
  EXPECT_EQ(cells[8], "stream");
  EXPECT_DOUBLE_EQ(std::stod(cells[11]), 41.5);
  EXPECT_EQ(cells[16], "1000");
  EXPECT_DOUBLE_EQ(std::stod(cells[18]), 1.0);
}

// --------------------------------------------------------------------------------- markdown

TEST(Report, MarkdownHasEveryVariantSplitAndFigure) {
  TempDir dir;
  auto report = txl::experiment::write_report(dir.path(), "toy_ablation", sample_records(),
                                              sample_curves(dir), no_plots());
  std::string md = txl::fs::read_file(dir / "report.md");
  EXPECT_TRUE(contains(md, "# Ablation: toy_ablation"));
  EXPECT_TRUE(contains(md, "## Results on valid"));
  EXPECT_TRUE(contains(md, "## Results on test"));
  // Each row of the test table: variant, mode, context and perplexity.
  for (const std::string row :
       {"| vanilla | vanilla | segments |", "| vanilla | vanilla | sliding  |",
        "| xl      | xl      | memory   |"}) {
    EXPECT_TRUE(contains(md, row)) << row << "\n" << md;
  }
  for (const std::string figure :
       {"61.00", "49.00", "43.00", "41.50", "59.00", "L=128 s=1", "M=256"}) {
    EXPECT_TRUE(contains(md, figure)) << figure;
  }
  // Sliding cost relative to the same variant's segments pass: 20 s vs 0.5 s per 1000 tokens.
  EXPECT_TRUE(contains(md, "40.0x"));
  // Training table: parameters, throughput, and the curves' final loss and best valid ppl.
  EXPECT_TRUE(contains(md, "1,234,567"));
  EXPECT_TRUE(contains(md, "4.8750"));  // xl's last complete train line
  EXPECT_TRUE(contains(md, "49.40"));   // xl's best validation perplexity
  EXPECT_TRUE(contains(md, "5.2500"));
  EXPECT_TRUE(contains(md, "66.69"));
  EXPECT_TRUE(contains(md, "Plots were skipped: plots were disabled."));
  // The printed table is the report's tables.
  EXPECT_TRUE(contains(report.table, "Split: test"));
  EXPECT_TRUE(contains(report.table, "41.50"));
  EXPECT_TRUE(report.plots.empty());
  // Nothing but the report files (no temporaries) is left in the directory.
  for (const auto& entry : stdfs::directory_iterator(dir.path())) {
    EXPECT_EQ(entry.path().string().find(".tmp."), std::string::npos) << entry.path();
  }
}

TEST(Report, MarkdownSplitsTheMarginIntoPositionsAndRecurrence) {
  TempDir dir;
  auto records = sample_records();
  auto rel = make("rel_no_memory", AttnType::kXl, EvalMode::kSegments, "test", 0, 0, 50.0, 0.5);
  rel.train_mem_len = 0;
  records.push_back(rel);
  txl::experiment::write_report(dir.path(), "toy", records, {}, no_plots());
  std::string md = txl::fs::read_file(dir / "report.md");
  // vanilla 61 -> rel_no_memory 50 (11 ppl, 18.0%) -> xl 43 (7 ppl, 14.0%).
  EXPECT_TRUE(contains(md,
                       "Of that margin on test, relative positions without recurrence "
                       "(rel_no_memory, fixed segments) reach 50.00 ppl, 11.00 ppl (18.0%) below "
                       "vanilla; recurrence then takes xl to 43.00 ppl, a further 7.00 ppl "
                       "(14.0%)."))
      << md;
  // No such sentence without a no-memory relative variant.
  txl::experiment::write_report(dir.path(), "toy", sample_records(), {}, no_plots());
  EXPECT_FALSE(contains(txl::fs::read_file(dir / "report.md"), "Of that margin"));
}

TEST(Report, RecallLossIsReportedForTheSyntheticTask) {
  TempDir dir;
  auto records = sample_records();
  for (auto& r : records) {
    r.recall_tokens = 120;
    r.recall_loss = r.attn_type == AttnType::kXl ? 0.25 : 4.125;
  }
  txl::experiment::write_report(dir.path(), "toy", records, {}, no_plots());
  std::string md = txl::fs::read_file(dir / "report.md");
  EXPECT_TRUE(contains(md, "| recall loss |")) << md;
  EXPECT_TRUE(contains(md, "4.125")) << md;
  EXPECT_TRUE(contains(md,
                       "Recall on test (120 recalled values; ln 64 = 4.159 nats is chance, 0 "
                       "perfect): xl with memory M=128 0.250 nats, vanilla with fixed segments "
                       "4.125 nats."))
      << md;
  auto back = txl::experiment::records_from_json(txl::fs::read_file(dir / "results.json"), "x");
  EXPECT_EQ(back[0].recall_tokens, 120);
  EXPECT_DOUBLE_EQ(back[0].recall_loss, 4.125);
  // Without recall tokens there is neither the column nor the sentence.
  txl::experiment::write_report(dir.path(), "toy", sample_records(), {}, no_plots());
  md = txl::fs::read_file(dir / "report.md");
  EXPECT_FALSE(contains(md, "recall"));
}

TEST(Report, MarkdownListsWhatEachVariantChanges) {
  TempDir dir;
  auto options = no_plots();
  options.variant_changes = {{"vanilla", "model.attn_type: xl -> vanilla; model.mem_len: 128 -> 0"},
                             {"xl", ""},
                             {"not_run", "model.n_layer: 4 -> 2"}};
  txl::experiment::write_report(dir.path(), "toy", sample_records(), {}, options);
  std::string md = txl::fs::read_file(dir / "report.md");
  EXPECT_TRUE(
      contains(md, "- `vanilla`: model.attn_type: xl -> vanilla; model.mem_len: 128 -> 0\n"));
  EXPECT_TRUE(contains(md, "- `xl`: the base experiment\n"));
  EXPECT_FALSE(contains(md, "not_run"));  // no results, not in the report
}

TEST(Report, MarkdownStatesTheMarginAndTheEvaluationCost) {
  TempDir dir;
  txl::experiment::write_report(dir.path(), "toy", sample_records(), {}, no_plots());
  std::string md = txl::fs::read_file(dir / "report.md");
  // test: xl at its training memory 43.00 vs vanilla segments 61.00 -> 18.00 ppl, 29.5%.
  EXPECT_TRUE(contains(md,
                       "On test, Transformer-XL (xl, memory M=128) reaches 43.00 ppl against "
                       "61.00 for vanilla with fixed segments (vanilla) at the same segment "
                       "length Q=128: xl beat vanilla by 18.00 ppl (29.5% lower perplexity)."))
      << md;
  // sliding: 20 s / 1000 tokens = 20 ms per token; memory M=128: 0.8 ms per token -> 25x.
  EXPECT_TRUE(contains(md, "20.0000 ms per token"));
  EXPECT_TRUE(contains(md, "0.8000 ms per token"));
  EXPECT_TRUE(contains(md, "costs 25.0x as much per token as memory evaluation"));
  // The memory sweep of xl, shortest memory first.
  EXPECT_TRUE(contains(md,
                       "xl on test with longer evaluation memory (trained with M=128): "
                       "M=128 43.00, M=256 41.50 ppl."))
      << md;
}

// A family of many variants: the headline compares each with the first (the reference); every
// pair stays in the significance section. Three variants keep every pair in the headline.
TEST(Report, HeadlineOfManyVariantsComparesEachWithTheFirst) {
  const std::vector<std::string> names = {"xl", "rope", "alibi", "t5", "knn"};
  std::vector<ResultRecord> records;
  torch::manual_seed(0);
  for (size_t i = 0; i < names.size(); ++i) {
    auto r = make(names[i], AttnType::kXl, EvalMode::kMemory, "test", 128, 0, 40.0 + i, 1.0);
    r.token_losses = torch::rand({1000}) + 3.0 + 0.01 * static_cast<double>(i);
    records.push_back(r);
  }
  const auto headline = [](const std::string& md) {  // the section alone
    const auto begin = md.find("## Headline (test)");
    return md.substr(begin, md.find("\n## ", begin + 1) - begin);
  };
  TempDir dir;
  txl::experiment::write_report(dir.path(), "family", records, {}, no_plots());
  const std::string md = txl::fs::read_file(dir / "report.md"), head = headline(md);
  EXPECT_TRUE(contains(head, "5 variants: the comparisons with xl, the first")) << md;
  for (size_t i = 1; i < names.size(); ++i) {
    EXPECT_TRUE(contains(head, "- ppl(xl) / ppl(" + names[i] + ") = ")) << names[i] << "\n" << md;
  }
  EXPECT_FALSE(contains(head, "- ppl(rope) / ppl(alibi)") ||
               contains(head, "- ppl(t5) / ppl(knn)"));
  // Every pair in the significance table, rope / alibi among them.
  std::istringstream lines(md.substr(md.find("## Significance (test)")));
  bool rope_alibi = false;
  for (std::string line; std::getline(lines, line);) {
    rope_alibi = rope_alibi || (line.rfind("| rope ", 0) == 0 && contains(line, "| alibi "));
  }
  EXPECT_TRUE(rope_alibi) << md;
  records.resize(3);  // three variants: every pair in the headline
  txl::experiment::write_report(dir.path(), "three", records, {}, no_plots());
  const std::string three = headline(txl::fs::read_file(dir / "report.md"));
  EXPECT_FALSE(contains(three, "the comparisons with")) << three;
  EXPECT_TRUE(contains(three, "- ppl(rope) / ppl(alibi) = ")) << three;
}

// ----------------------------------------------------------------------------------- margin

TEST(Margin, ComparesXlAtItsTrainingMemoryWithVanillaSegmentsAtTheSameLength) {
  auto records = sample_records();
  // A vanilla segments evaluation at another length, better than everything, must be ignored.
  auto shorter = make("vanilla", AttnType::kVanilla, EvalMode::kSegments, "test", 0, 0, 10.0, 0.1);
  shorter.tgt_len = 64;
  records.insert(records.begin(), shorter);
  auto m = txl::experiment::compute_margin(records, "test");
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->xl_variant, "xl");
  EXPECT_EQ(m->vanilla_variant, "vanilla");
  EXPECT_EQ(m->tgt_len, 128);
  EXPECT_EQ(m->mem_len, 128);  // the training memory, not the better M=256
  EXPECT_DOUBLE_EQ(m->xl_ppl, 43.0);
  EXPECT_DOUBLE_EQ(m->vanilla_ppl, 61.0);
  EXPECT_DOUBLE_EQ(m->margin_ppl, 18.0);
  EXPECT_NEAR(m->margin_percent, 100.0 * 18.0 / 61.0, 1e-12);
  EXPECT_TRUE(m->xl_better);
}

TEST(Margin, SaysSoWhenXlLoses) {
  std::vector<ResultRecord> records = {
      make("base", AttnType::kVanillaLearned, EvalMode::kSegments, "valid", 0, 0, 50.0, 1.0),
      make("recurrent", AttnType::kXl, EvalMode::kMemory, "valid", 128, 0, 55.0, 1.0)};
  auto m = txl::experiment::compute_margin(records, "valid");
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->vanilla_variant, "base");  // vanilla_learned when there is no plain vanilla
  EXPECT_DOUBLE_EQ(m->margin_ppl, -5.0);
  EXPECT_DOUBLE_EQ(m->margin_percent, -10.0);
  EXPECT_FALSE(m->xl_better);
  std::string sentence = txl::experiment::margin_sentence(*m);
  EXPECT_TRUE(contains(sentence, "xl did not beat vanilla; its perplexity is 5.00 higher (10.0%)."))
      << sentence;
}

TEST(Margin, AbsentWithoutBothSides) {
  auto records = sample_records();
  EXPECT_FALSE(txl::experiment::compute_margin(records, "train").has_value());
  std::vector<ResultRecord> only_xl;
  for (const auto& r : records) {
    if (r.attn_type == AttnType::kXl) only_xl.push_back(r);
  }
  EXPECT_FALSE(txl::experiment::compute_margin(only_xl, "test").has_value());
  // rel_no_memory (relative positions, M = 0) is not the xl side of the headline.
  std::vector<ResultRecord> no_memory = {
      make("vanilla", AttnType::kVanilla, EvalMode::kSegments, "test", 0, 0, 50.0, 1.0),
      make("rel_no_memory", AttnType::kXl, EvalMode::kMemory, "test", 0, 0, 45.0, 1.0)};
  no_memory[1].train_mem_len = 0;
  EXPECT_FALSE(txl::experiment::compute_margin(no_memory, "test").has_value());
  TempDir dir;
  txl::experiment::write_report(dir.path(), "toy", no_memory, {}, no_plots());
  EXPECT_TRUE(contains(txl::fs::read_file(dir / "report.md"), "No headline comparison"));
}

// ------------------------------------------------------------------------------------ plots

TEST(ReportPlots, WritesThreeValidPngs) {
  if (!matplotlib_available()) GTEST_SKIP() << no_matplotlib();
  TempDir dir;
  txl::experiment::ReportOptions options;
  options.plot_script = plot_script();
  auto report = txl::experiment::write_report(dir.path(), "toy", sample_records(),
                                              sample_curves(dir), options);
  EXPECT_EQ(report.plot_note, "");
  ASSERT_EQ(report.plots.size(), 3u);
  const std::string signature = "\x89PNG\r\n\x1a\n";
  for (const std::string name : {"training_loss.png", "context_ppl.png", "eval_cost.png"}) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(stdfs::exists(dir / name));
    std::string bytes = txl::fs::read_file(dir / name);
    EXPECT_GT(bytes.size(), 1000u);
    EXPECT_EQ(bytes.substr(0, signature.size()), signature);
  }
  std::string md = txl::fs::read_file(dir / "report.md");
  EXPECT_TRUE(contains(md, "![Training loss against step](training_loss.png)"));
  EXPECT_FALSE(contains(md, "Plots were skipped"));
  for (const auto& entry : stdfs::directory_iterator(dir.path())) {
    EXPECT_EQ(entry.path().string().find(".tmp."), std::string::npos) << entry.path();
  }
}

TEST(ReportPlots, SweepSubcommandPlotsPerplexityAgainstMemory) {
  if (!matplotlib_available()) GTEST_SKIP() << no_matplotlib();
  TempDir dir;
  // The list txl-eval --sweep writes (eval::to_json per result).
  txl::test::write_text(dir / "context_sweep.json",
                        R"([{"split":"valid","mode":"memory","tgt_len":8,"mem_len":0,"ppl":9.5},)"
                        R"({"split":"valid","mode":"memory","tgt_len":8,"mem_len":8,"ppl":7.25}])");
  const std::string python = txl::plot::python_interpreter();
  auto run = txl::process::run_program({python, plot_script().string(), "sweep",
                                        (dir / "context_sweep.json").string(),
                                        (dir / "context_sweep.png").string()});
  ASSERT_TRUE(run.ok()) << run.status() << ": " << run.stderr_tail;
  std::string bytes = txl::fs::read_file(dir / "context_sweep.png");
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x89PNG\r\n\x1a\n"));
  // Wrong arguments are a usage error, not a crash.
  run = txl::process::run_program({python, plot_script().string(), "sweep"});
  EXPECT_EQ(run.exit_code, 2) << run.status();
}

TEST(ReportPlots, AFolderNameAShellWouldSplitRunsNothingAndGetsItsPlots) {
  TempDir dir;
  const auto out = dir / txl::test::kShellHostileName / txl::test::kShellHostileName;
  // Default options: the interpreter configured at build time, the script in build/share/txl.
  auto report = txl::experiment::write_report(out, "toy", sample_records(), sample_curves(dir));
  EXPECT_TRUE(txl::test::nothing_executed(out));
  EXPECT_TRUE(stdfs::exists(out / "report.md"));
  if (!matplotlib_available()) GTEST_SKIP() << "PNG part skipped: " << no_matplotlib();
  EXPECT_EQ(report.plot_note, "");
  ASSERT_EQ(report.plots.size(), 3u);
  for (const auto& png : report.plots) {
    EXPECT_EQ(png.parent_path(), out);
    EXPECT_EQ(txl::fs::read_file(png).substr(0, 8), std::string("\x89PNG\r\n\x1a\n")) << png;
  }
}

TEST(ReportPlots, MissingPythonSkipsPlotsWithoutFailing) {
  TempDir dir;
  txl::experiment::ReportOptions options;
  options.python = (dir / "no" / "python3").string();
  options.plot_script = plot_script();
  txl::experiment::Report report;
  ASSERT_NO_THROW(report = txl::experiment::write_report(dir.path(), "toy", sample_records(),
                                                         sample_curves(dir), options));
  EXPECT_TRUE(report.plots.empty());
  EXPECT_TRUE(contains(report.plot_note, "was not found")) << report.plot_note;
  std::string md = txl::fs::read_file(dir / "report.md");
  EXPECT_TRUE(contains(md, "Plots were skipped: " + options.python + " was not found")) << md;
  EXPECT_FALSE(stdfs::exists(dir / "training_loss.png"));
  // The numbers are still all there.
  EXPECT_TRUE(stdfs::exists(dir / "results.json"));
  EXPECT_TRUE(contains(md, "41.50"));
}

TEST(ReportPlots, MissingMatplotlibOrScriptSkipsPlotsWithTheReason) {
  TempDir dir;
  // A stand-in interpreter that behaves like the script does without matplotlib (exit 3).
  auto fake = dir / "python3";
  txl::test::write_text(fake, "#!/bin/sh\necho 'matplotlib is not installed' >&2\nexit 3\n");
  stdfs::permissions(fake, stdfs::perms::owner_all);
  txl::experiment::ReportOptions options;
  options.python = fake.string();
  options.plot_script = plot_script();
  auto report = txl::experiment::write_report(dir / "out", "toy", sample_records(), {}, options);
  EXPECT_TRUE(report.plots.empty());
  EXPECT_TRUE(contains(report.plot_note, "exited with status 3: matplotlib is not installed"))
      << report.plot_note;
  EXPECT_TRUE(contains(txl::fs::read_file(dir / "out" / "report.md"),
                       "Plots were skipped: plot_report.py exited with status 3"));

  options.python = txl::plot::python_interpreter();
  options.plot_script = dir / "missing.py";
  report = txl::experiment::write_report(dir / "out", "toy", sample_records(), {}, options);
  EXPECT_TRUE(contains(report.plot_note, "missing.py was not found")) << report.plot_note;
}

TEST(Report, UnwritableDirectoryIsAnError) {
  TempDir dir;
  txl::test::write_text(dir / "file", "x");
  TXL_EXPECT_THROW_WITH(
      txl::experiment::write_report(dir / "file" / "sub", "toy", sample_records(), {}, no_plots()),
      "file");
}

}  // namespace

namespace {

// Records with losses by position: results.json keeps them (a NaN as null, and back), records
// without them stay without, and report.md tabulates positions 0, 1, 2, 4, ..., Q - 1.
TEST(Report, LossByPositionIsKeptAndTabulated) {
  TempDir dir;
  auto records = sample_records();
  std::vector<double> xl(8), vanilla(8);
  for (int p = 0; p < 8; ++p) {
    xl[static_cast<size_t>(p)] = 4.0 + 0.01 * p;
    vanilla[static_cast<size_t>(p)] = 5.0 - 0.1 * p;
  }
  vanilla[3] = NAN;
  for (auto& r : records) {
    if (r.split != "test") continue;
    if (r.variant == "xl" && r.mem_len == 128) r.loss_by_position = xl;
    if (r.variant == "vanilla" && r.eval_mode == EvalMode::kSegments) r.loss_by_position = vanilla;
  }
  txl::experiment::write_report(dir.path(), "toy_ablation", records, sample_curves(dir),
                                no_plots());
  const auto back =
      txl::experiment::records_from_json(txl::fs::read_file(dir / "results.json"), "x");
  ASSERT_EQ(back.size(), records.size());
  for (size_t i = 0; i < back.size(); ++i) {
    ASSERT_EQ(back[i].loss_by_position.size(), records[i].loss_by_position.size()) << i;
    for (size_t p = 0; p < back[i].loss_by_position.size(); ++p) {
      const double want = records[i].loss_by_position[p], got = back[i].loss_by_position[p];
      EXPECT_TRUE(std::isnan(want) ? std::isnan(got) : got == want) << i << " " << p;
    }
  }
  const std::string md = txl::fs::read_file(dir / "report.md");
  EXPECT_TRUE(contains(md, "## Loss by position in the segment (test)")) << md;
  EXPECT_FALSE(contains(md, "## Loss by position in the segment (valid)"));
  EXPECT_TRUE(contains(md, "|  pos 0 |  pos 1 |  pos 2 |  pos 4 |  pos 7 |")) << md;
  EXPECT_TRUE(contains(md, "| 5.0000 | 4.9000 | 4.8000 | 4.6000 | 4.3000 |")) << md;
  EXPECT_TRUE(contains(md, "| 4.0000 | 4.0100 | 4.0200 | 4.0400 | 4.0700 |")) << md;
}

}  // namespace
