// The bench's arithmetic and plumbing on a tiny model. No test asserts a speed: only that the
// figures exist, are positive and agree with each other (MFU = achieved / peak, GFLOP/s =
// tokens/s x FLOPs per token, ...), and that sliding-window evaluation costs more per token
// than memory evaluation.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "support/process_as_program.h"
#include "support/test_support.h"
#include "txl/bench/bench.h"
#include "txl/bench/measure.h"
#include "txl/bench/members.h"
#include "txl/bench/products.h"
#include "txl/bench/profile.h"
#include "txl/bench/sweep.h"
#include "txl/models/flops.h"
#include "txl/modules/position_scheme.h"
#include "txl/util/fs.h"
#include "txl/util/plot.h"

namespace txl::bench {
namespace {

// The process as txl-bench --threads 1 sets it (BenchOptions::threads = 1 below): 1 thread.
const auto* const kProcess =
    ::testing::AddGlobalTestEnvironment(new txl::test::ProcessAsProgram(1));

constexpr std::int64_t kVocab = 50;

config::ExperimentConfig tiny() {
  auto c = bench_experiment();
  c.model.n_layer = 2;
  c.model.d_model = 16;
  c.model.n_head = 2;
  c.model.d_head = 8;
  c.model.d_inner = 32;
  c.model.tgt_len = 8;
  c.model.mem_len = 8;
  c.train.batch_size = 2;
  c.eval.batch_size = 2;
  return c;
}

BenchOptions tiny_options() {
  BenchOptions o;
  o.vocab = kVocab;
  o.threads = 1;
  auto& s = o.settings;
  s.warmup = 1;
  s.repetitions = 2;
  s.peak_sizes = {16, 32};
  s.peak_repetitions = 1;
  s.attention_lengths = {24, 40};
  s.sliding_batch = 2;
  s.sliding_warmup = 1;
  s.sliding_repetitions = 1;
  s.generate_new_tokens = 6;
  s.generate_repetitions = 1;
  s.generate_contexts = {8, 24};
  return o;
}

// The number under `key` of a parsed report; fails the test when the key is missing or holds
// no number.
double json_number(const nlohmann::json& json, const std::string& key) {
  const auto it = json.find(key);
  EXPECT_TRUE(it != json.end() && it->is_number())
      << "no number under " << key << " in " << json.dump();
  return it != json.end() && it->is_number() ? it->get<double>() : 0.0;
}

TEST(Bench, ReportHasTheKeysOfRecordAndConsistentArithmetic) {
  const auto config = tiny();
  const auto report = run_bench(config, tiny_options());
  const auto json = nlohmann::json::parse(to_json(report));
  ASSERT_TRUE(json.is_object());
  for (const char* key :
       {"train_tokens_per_s", "train_tokens_per_s_bf16", "eval_tokens_per_s", "flops_per_token",
        "peak_gflops_fp32", "peak_gflops_bf16", "mfu", "peak_rss_mb", "sliding_over_memory_cost_24",
        "sliding_over_memory_cost_40"}) {
    EXPECT_GT(json_number(json, key), 0.0) << key;
  }
  // FLOPs: the training figure of models/flops.h, three times the forward one.
  const auto flops = models::count_flops_per_token(config.model, kVocab, 8, 8);
  EXPECT_NEAR(json_number(json, "flops_per_token"), flops.training, 1e-6 * flops.training);
  EXPECT_NEAR(report.flops_per_token, 3 * report.flops_per_token_forward,
              1e-9 * report.flops_per_token);
  // Achieved GFLOP/s and MFU recomputed from the printed figures.
  const double achieved =
      json_number(json, "train_tokens_per_s") * json_number(json, "flops_per_token") / 1e9;
  EXPECT_NEAR(json_number(json, "train_gflops"), achieved, 1e-5 * achieved);
  const double mfu = achieved / json_number(json, "peak_gflops_fp32");
  EXPECT_NEAR(json_number(json, "mfu"), mfu, 1e-5 * mfu);
  EXPECT_NEAR(report.mfu, report.train_gflops / report.peak_fp32.gflops, 1e-12);
  // Tokens per second are tokens per step over the median step time.
  EXPECT_EQ(report.train_fp32.tokens_per_step, 2 * 8);
  EXPECT_NEAR(report.train_fp32.tokens_per_s,
              report.train_fp32.tokens_per_step / report.train_fp32.timing.median_s, 1e-6);
  EXPECT_LE(report.train_fp32.timing.best_s, report.train_fp32.timing.median_s);
  // The process peak covers every phase's peak; losses are finite and near ln V at the start.
  for (const auto* p : {&report.train_fp32, &report.train_bf16, &report.eval_fp32}) {
    EXPECT_GE(report.peak_rss_mb + 1e-9, p->peak_rss_mb);
    EXPECT_GT(p->loss, 0.5 * std::log(static_cast<double>(kVocab)));
    EXPECT_LT(p->loss, 2.0 * std::log(static_cast<double>(kVocab)));
  }
  ASSERT_EQ(report.sliding_vs_memory.size(), 2u);
  EXPECT_EQ(report.sliding_vs_memory[1].mem_len, 40 - 8);
  EXPECT_NEAR(json_number(json, "sliding_over_memory_cost_40"), report.sliding_vs_memory[1].ratio,
              1e-5 * report.sliding_vs_memory[1].ratio);
  // The counted work of each comparison, and its ratio, are in the JSON too.
  const auto& compared = json["sliding_vs_memory"];
  ASSERT_EQ(compared.size(), 2u);
  EXPECT_EQ(json_number(compared[1], "counted_flop_ratio"),
            report.sliding_vs_memory[1].counted_flop_ratio);
  EXPECT_GT(json_number(compared[1], "counted_flop_ratio"), 1.0);
  // Generation: tokens/s of a batch is B / the time of one step.
  EXPECT_GT(json_number(json, "generate_tokens_per_s_b1"), 0.0);
  EXPECT_GT(json_number(json, "generate_tokens_per_s_b16"), 0.0);
  EXPECT_GT(json_number(json, "generate_ms_per_token_ctx8"), 0.0);
  EXPECT_GT(json_number(json, "generate_ms_per_token_ctx24"), 0.0);
  EXPECT_EQ(report.generate_b16.batch_size, 16);
  EXPECT_NEAR(report.generate_b16.tokens_per_s, 16 * 1e3 / report.generate_b16.ms_per_token,
              1e-6 * report.generate_b16.tokens_per_s);
  ASSERT_EQ(report.generate_by_context.size(), 2u);
  EXPECT_EQ(report.generate_by_context[1].mem_len, 24);
  EXPECT_EQ(json["generation"].size(), 4u);
  // The table names the same figures.
  const auto table = format_table(report);
  EXPECT_NE(table.find("generation (greedy"), std::string::npos);
  EXPECT_NE(table.find("training fp32"), std::string::npos);
  EXPECT_NE(table.find("MFU"), std::string::npos);
}

// A name with quotes, a backslash and control characters, and figures that are not finite:
// the report stays one valid JSON object, names read back byte for byte and every non-finite
// figure is null with its reason.
TEST(Bench, JsonIsValidForAnyNameAndForNonFiniteFigures) {
  BenchReport r;
  r.source = "experiments/\"odd\" \\ name\n\t\x01.yaml";
  r.attn_type = "xl";
  r.train_fp32.loss = std::nan("");
  r.mfu = std::numeric_limits<double>::infinity();
  r.sliding_vs_memory.push_back({});
  r.sliding_vs_memory[0].attention_length = 24;
  r.sliding_vs_memory[0].ratio = -std::numeric_limits<double>::infinity();
  const std::string text = to_json(r);
  EXPECT_EQ(text.find('\n'), std::string::npos) << "one line: " << text;
  const auto json = nlohmann::json::parse(text);
  EXPECT_EQ(json["source"], r.source);
  EXPECT_TRUE(json["mfu"].is_null());
  EXPECT_EQ(json["null_because"]["mfu"], "+inf");
  EXPECT_EQ(json["null_because"]["sliding_over_memory_cost_24"], "-inf");
  EXPECT_TRUE(json["train_fp32"]["loss"].is_null());
  EXPECT_EQ(json["train_fp32"]["null_because"]["loss"], "nan");
  EXPECT_EQ(json["sliding_vs_memory"][0]["null_because"]["ratio"], "-inf");
}

// The work of each mode per scored token, counted from the matrix products it ran: a sliding
// window recomputes all 32 positions for one scored token, memory mode computes each position
// once. The seconds are measured and reported, never compared.
TEST(Bench, SlidingWindowCostsMoreThanMemoryPerToken) {
  torch::set_num_threads(1);
  PhaseOptions sliding;
  sliding.batch_size = 2;
  sliding.warmup = 1;
  sliding.repetitions = 3;
  PhaseOptions memory = sliding;
  const auto c = sliding_over_memory_cost(tiny(), kVocab, 32, sliding, memory);
  EXPECT_EQ(c.attention_length, 32);
  EXPECT_EQ(c.tgt_len, 8);
  EXPECT_EQ(c.mem_len, 24);
  EXPECT_GT(c.sliding_s_per_token, 0.0);
  EXPECT_GT(c.memory_s_per_token, 0.0);
  EXPECT_NEAR(c.ratio, c.sliding_s_per_token / c.memory_s_per_token, 1e-9 * c.ratio);
  // Counted work: sliding costs more per scored token than memory.
  EXPECT_NEAR(c.counted_flop_ratio, c.sliding_flops_per_token / c.memory_flops_per_token,
              1e-12 * c.counted_flop_ratio);
  EXPECT_GT(c.counted_flop_ratio, 1.0);
  // FLOPs: 32 vanilla positions per scored token against one xl token with 32 keys, whose
  // memory's keys and values are carried from the previous segment (as the evaluator does).
  auto vanilla = tiny().model;
  vanilla.attn_type = txl::config::AttnType::kVanilla;
  const double window = models::count_flops_per_token(vanilla, kVocab, 32, 0).forward;
  const double xl = models::count_flops_per_token(tiny().model, kVocab, 8, 24, true).forward;
  EXPECT_NEAR(c.flop_ratio, 32 * window / xl, 1e-9 * c.flop_ratio);
  EXPECT_GT(c.flop_ratio, 1.0);
  // The counts agree with models/flops.h: a sliding window recomputes all 32 positions for its
  // one scored token; memory mode computes each position once, plus the projection of the
  // relative encodings (once per segment for all B rows, 2 K d^2 per layer), which flops.h
  // leaves out: 2 x 2 x 32 x 16^2 / (2 x 8) = 2048 per token here.
  EXPECT_NEAR(c.sliding_flops_per_token, 32 * window, 1e-9 * c.sliding_flops_per_token);
  const auto& m = tiny().model;
  const double positions = m.n_layer * 2.0 * 32 * m.d_model * (m.n_head * m.d_head) /
                           (static_cast<double>(memory.batch_size) * 8);
  EXPECT_NEAR(c.memory_flops_per_token, xl + positions, 1e-9 * xl);
}

TEST(Bench, SlidingComparisonNeedsALengthAboveTheSegment) {
  PhaseOptions o;
  o.batch_size = 1;
  o.repetitions = 1;
  TXL_EXPECT_THROW_WITH(sliding_over_memory_cost(tiny(), kVocab, 8, o, o), "eval.tgt_len");
}

TEST(Bench, TimeRepeatedCallsWarmupPlusRepetitions) {
  int calls = 0;
  const auto t = time_repeated([&] { ++calls; }, 2, 5);
  EXPECT_EQ(calls, 7);
  EXPECT_EQ(t.repetitions, 5);
  EXPECT_LE(t.best_s, t.median_s);
  TXL_EXPECT_THROW_WITH(time_repeated([] {}, 0, 0), "repetitions");
}

TEST(Bench, MatmulPeakAndResidentMemory) {
  torch::set_num_threads(1);
  const auto p = probe_matmul_peak(torch::kFloat, {16, 32}, 2);
  EXPECT_GT(p.gflops, 0.0);
  EXPECT_TRUE(p.size == 16 || p.size == 32);
  EXPECT_GT(probe_matmul_peak(torch::kBFloat16, {16}, 1).gflops, 0.0);
  TXL_EXPECT_THROW_WITH(probe_matmul_peak(torch::kFloat, {}, 1), "sizes");
  EXPECT_GT(current_rss_mb(), 0.0);
  EXPECT_GE(peak_rss_mb() + 1e-9, current_rss_mb() - 1.0);
  // A 64 MiB buffer touched after a reset shows in the new window's peak.
  if (reset_peak_rss()) {
    const double before = peak_rss_mb();
    auto big = torch::ones({16 * 1024 * 1024});  // 64 MiB of float
    EXPECT_GE(peak_rss_mb(), before + 48.0);
  }
}

TEST(Bench, SummarizeOpsGroupsCopiesAndFills) {
  const auto p = summarize_ops({{"aten::mm", 6.0},
                                {"aten::copy_", 1.0},
                                {"aten::cat", 0.5},
                                {"aten::fill_", 1.0},
                                {"aten::zero_", 0.5},
                                {"aten::masked_fill_", 0.5},
                                {"aten::mm", 0.5}});
  EXPECT_DOUBLE_EQ(p.total_ms, 10.0);
  ASSERT_EQ(p.ops.size(), 6u);
  EXPECT_EQ(p.ops[0].name, "aten::mm");
  EXPECT_EQ(p.ops[0].calls, 2);
  EXPECT_DOUBLE_EQ(p.ops[0].self_ms, 6.5);
  EXPECT_DOUBLE_EQ(p.ops[0].share, 0.65);
  EXPECT_DOUBLE_EQ(p.copy_share, 0.15);
  EXPECT_DOUBLE_EQ(p.fill_share, 0.15);
  EXPECT_DOUBLE_EQ(p.masked_fill_share, 0.05);
}

TEST(Bench, ProfileOfATrainingStepFindsTheMatrixProducts) {
  torch::set_num_threads(1);
  PhaseOptions o;
  o.batch_size = 2;
  o.warmup = 1;
  const auto p = profile_training_step(tiny(), kVocab, o);
  ASSERT_FALSE(p.ops.empty());
  EXPECT_GT(p.total_ms, 0.0);
  double shares = 0;
  bool products = false;
  for (const auto& op : p.ops) {
    EXPECT_GE(op.self_ms, -1e-3) << op.name;  // self time: never (noticeably) negative
    shares += op.share;
    products |= op.name == "aten::mm" || op.name == "aten::bmm" || op.name == "aten::addmm";
  }
  EXPECT_NEAR(shares, 1.0, 1e-9);
  EXPECT_TRUE(products) << format_profile(p);
  EXPECT_GE(p.copy_share, 0.0);
  EXPECT_LE(p.copy_share + p.fill_share + p.masked_fill_share, 1.0 + 1e-9);
  EXPECT_NE(format_profile(p, 5).find("copies"), std::string::npos);
  // By shape: the same step, ops keyed with their input shapes, groups still recognised.
  const auto shaped = profile_training_step(tiny(), kVocab, o, true);
  bool shapes = false;
  for (const auto& op : shaped.ops) shapes |= op.name.find(" [") != std::string::npos;
  EXPECT_TRUE(shapes) << format_profile(shaped);
  EXPECT_GT(shaped.copy_share + shaped.fill_share, 0.0);
}

// One evaluation segment: forward only (no backward node, no optimizer), products present, and
// the output layer's no-gradient path writes no softmax (no aten::div_ of its blocks).
TEST(Bench, ProfileOfAnEvaluationSegmentHasNoBackward) {
  PhaseOptions o;
  o.batch_size = 2;
  o.warmup = 1;
  const auto p = profile_eval_segment(tiny(), kVocab, o);
  ASSERT_FALSE(p.ops.empty());
  bool products = false;
  for (const auto& op : p.ops) {
    EXPECT_EQ(op.name.find("Backward"), std::string::npos) << op.name;
    EXPECT_NE(op.name, "aten::div_");
    EXPECT_NE(op.name, "aten::addcdiv_");  // Adam
    products |= op.name == "aten::mm" || op.name == "aten::bmm";
  }
  EXPECT_TRUE(products) << format_profile(p);
  EXPECT_NE(format_profile(p).find("evaluation segment"), std::string::npos);
  const auto step = profile_training_step(tiny(), kVocab, o);
  bool backward = false;
  for (const auto& op : step.ops) backward |= op.name.find("Backward") != std::string::npos;
  EXPECT_TRUE(backward) << format_profile(step);  // the check above can see a backward node
}

TEST(Bench, SweepWritesTablesAndData) {
  test::TempDir dir;
  SweepOptions o;
  o.out_dir = dir / "bench";
  o.vocab = kVocab;
  o.lengths = {4, 8};
  o.length_batch = 2;
  o.batches = {1, 2};
  o.attention_mem_lens = {0, 8, 16};
  o.attention_batch = 1;
  o.warmup = 0;
  o.repetitions = 1;
  o.plot = false;
  torch::set_num_threads(1);
  const auto s = run_sweep(tiny(), o);
  ASSERT_EQ(s.points.size(), 4u);
  EXPECT_EQ(s.points[1].series, "length");
  EXPECT_EQ(s.points[1].tgt_len, 8);
  EXPECT_EQ(s.points[1].mem_len, 8);
  EXPECT_EQ(s.points[3].series, "batch");
  EXPECT_EQ(s.points[3].batch, 2);
  for (const auto& p : s.points) {
    EXPECT_GT(p.tokens_per_s, 0.0);
    EXPECT_NEAR(p.gflops, p.tokens_per_s * p.flops_per_token / 1e9, 1e-9 * p.gflops);
  }
  ASSERT_EQ(s.attention.points.size(), 3u);
  EXPECT_GT(s.attention.r2, -1e-9);
  EXPECT_LE(s.attention.r2, 1.0 + 1e-9);
  EXPECT_FALSE(s.plotted);
  // Data only: the plot is drawn by the one plot script (plot_report.py bench-sweep).
  ASSERT_EQ(s.files.size(), 3u);
  for (const char* name : {"sweep.md", "sweep.csv", "sweep.json"}) {
    EXPECT_TRUE(std::filesystem::exists(o.out_dir / name)) << name;
  }
  std::ifstream csv(o.out_dir / "sweep.csv");
  std::string line;
  int lines = 0;
  while (std::getline(csv, line)) ++lines;
  EXPECT_EQ(lines, 1 + 4 + 3);
  // sweep.json holds the same points, for the plot script.
  const auto json = nlohmann::json::parse(fs::read_file(o.out_dir / "sweep.json"));
  ASSERT_EQ(json["points"].size(), s.points.size());
  for (size_t i = 0; i < s.points.size(); ++i) {
    EXPECT_EQ(json["points"][i]["series"], s.points[i].series);
    EXPECT_EQ(json["points"][i]["batch"], s.points[i].batch);
    EXPECT_EQ(json["points"][i]["tokens_per_s"].get<double>(), s.points[i].tokens_per_s);
  }
  ASSERT_EQ(json["attention"]["points"].size(), 3u);
  EXPECT_EQ(json["attention"]["points"][2]["mem_len"], 16);
  EXPECT_EQ(json["attention"]["tgt_len"], 8);
  EXPECT_EQ(json["attention"]["r2"].get<double>(), s.attention.r2);
  EXPECT_NE(sweep_markdown(s).find("| 2 | 8 | 8 |"), std::string::npos) << sweep_markdown(s);
}

TEST(Bench, SweepPlotIntoAFolderNameAShellWouldSplitRunsNothing) {
  test::TempDir dir;
  SweepOptions o;
  o.out_dir = dir / test::kShellHostileName / test::kShellHostileName;
  o.vocab = kVocab;
  o.lengths = {4, 8};
  o.length_batch = 1;
  o.batches = {1};
  o.attention_mem_lens = {0, 8};
  o.attention_batch = 1;
  o.warmup = 0;
  o.repetitions = 1;
  torch::set_num_threads(1);
  const auto s = run_sweep(tiny(), o);
  EXPECT_TRUE(test::nothing_executed(o.out_dir));
  EXPECT_TRUE(std::filesystem::exists(o.out_dir / "sweep.json"));
  if (!plot::matplotlib_available()) {
    EXPECT_FALSE(s.plotted);
    EXPECT_NE(s.plot_message.find("matplotlib"), std::string::npos) << s.plot_message;
    GTEST_SKIP() << "PNG part skipped: the plot interpreter " << plot::python_interpreter()
                 << " cannot import matplotlib";
  }
  EXPECT_TRUE(s.plotted) << s.plot_message;
  ASSERT_EQ(s.files.size(), 4u);
  EXPECT_EQ(s.files.back(), o.out_dir / "sweep.png");
  EXPECT_EQ(fs::read_file(o.out_dir / "sweep.png").substr(0, 8), std::string("\x89PNG\r\n\x1a\n"));
}

// --products: each of the model's five products at 1 and 16 rows, the three ways agreeing (or
// the measurement throws), with the shapes of the model and the table and JSON naming each.
TEST(Bench, ProductsAreTheModelsShapesAndAgree) {
  const auto timings = time_products(tiny(), kVocab, 1);
  ASSERT_EQ(timings.size(), 10u);
  EXPECT_EQ(timings[0].name, "qkv");
  EXPECT_EQ(timings[0].out, 3 * 2 * 8);
  EXPECT_EQ(timings[3].in, 32);  // ff2: d_inner -> d
  EXPECT_EQ(timings[4].out, kVocab);
  for (const auto& t : timings) {
    EXPECT_TRUE(t.rows == 1 || t.rows == 16) << t.name;
    EXPECT_GT(t.libtorch_us, 0) << t.name;
    EXPECT_GT(t.packed_us, 0) << t.name;
  }
  EXPECT_EQ(timings[9].rows, 16);
  const auto json = nlohmann::json::parse(products_json(timings));
  EXPECT_EQ(json.at("products").size(), 10u);
  EXPECT_NE(products_table(timings).find("| vocab | 16 -> 50 | 16 |"), std::string::npos);
}

// --members: every member trains and decodes at the experiment's sizes; xl_bptt1, rmt and
// rmt_xl read two segments a step; the state a stream carries is (L (M + N) + m) d floats (none
// without memory; compressive splits xl's M into M' + N; rmt keeps m = 8 tokens); table and JSON
// name each.
TEST(Bench, MembersEachTrainAtTheExperimentsSizes) {
  PhaseOptions phase;
  phase.batch_size = 2;
  phase.warmup = 1;
  phase.repetitions = 1;
  GenerationOptions decoding;
  decoding.new_tokens = 10;
  decoding.warmup = 0;
  decoding.repetitions = 1;
  const auto costs = time_members(tiny(), kVocab, phase, decoding);
  // xl, rel_no_memory, xl_bptt1, every other scheme that carries memory, compressive, rmt, rmt_xl,
  // knn.
  std::vector<std::string> schemes;
  for (const auto* scheme : modules::memory_schemes()) {
    if (scheme->name() != "xl") schemes.emplace_back(scheme->name());
  }
  ASSERT_EQ(costs.size(), 7 + schemes.size());
  EXPECT_EQ(costs[0].name, "xl");
  for (size_t i = 0; i < schemes.size(); ++i) EXPECT_EQ(costs[3 + i].name, schemes[i]);
  EXPECT_EQ(costs.back().name, "knn");
  for (const auto& m : costs) {
    EXPECT_GT(m.tokens_per_s, 0) << m.name;
    EXPECT_GT(m.decode_b1, 0) << m.name;
    EXPECT_GT(m.decode_b16, 0) << m.name;
    const int64_t state = m.name == "rel_no_memory" ? 0
                          : m.name == "rmt"         ? 8 * 16 * 4
                          : m.name == "rmt_xl"      ? (2 * 8 + 8) * 16 * 4
                          : m.name == "knn"         ? (2 * 8 + 32) * 16 * 4
                                                    : 2 * 8 * 16 * 4;
    EXPECT_EQ(m.state_bytes, state) << m.name;
    const bool two = m.name == "xl_bptt1" || m.name == "rmt" || m.name == "rmt_xl";
    EXPECT_EQ(m.tokens_per_step, (two ? 2 : 1) * 2 * 8) << m.name;
  }
  const auto json = nlohmann::json::parse(members_json(costs));
  EXPECT_EQ(json.at("members").size(), costs.size());
  EXPECT_NE(members_table(costs).find("| rope | attn_type rope |"), std::string::npos);
}

}  // namespace
}  // namespace txl::bench
