// The report's analysis on hand-made records: figures over seeds, the ppl ratio of two variants
// with its interval, the context sweep's Table 6 figures and the group's RECL.
#include "txl/experiment/analysis.h"

#include <nlohmann/json.hpp>

#include <cmath>

#include "support/test_support.h"

namespace {

using txl::config::AttnType;
using txl::config::EvalMode;
using txl::experiment::ResultRecord;

// A record of `variant` with per-token losses `losses` (its loss and ppl follow from them).
ResultRecord record(const std::string& variant, std::int64_t seed, const torch::Tensor& losses,
                    AttnType attn = AttnType::kXl, EvalMode mode = EvalMode::kMemory,
                    int mem_len = 8, bool sweep = false) {
  ResultRecord r;
  r.variant = variant;
  r.seed = seed;
  r.attn_type = attn;
  r.eval_mode = mode;
  r.split = "test";
  r.tgt_len = 8;
  r.mem_len = mode == EvalMode::kMemory ? mem_len : 0;
  r.window = mode == EvalMode::kSliding ? mem_len : 0;
  r.stride = mode == EvalMode::kSliding ? 1 : 0;
  r.train_tgt_len = 8;
  r.train_mem_len = attn == AttnType::kXl ? 8 : 0;
  r.sweep = sweep;
  r.token_losses = losses.to(torch::kFloat);  // float [T]
  r.tokens = losses.size(0);
  r.loss = losses.to(torch::kDouble).mean().item<double>();
  r.ppl = std::exp(r.loss);
  return r;
}

// T losses drawn around `level`, reproducibly.
torch::Tensor noisy(double level, std::int64_t tokens, std::uint64_t seed) {
  torch::manual_seed(seed);
  return level + torch::rand({tokens}, torch::kDouble);  // double [T]
}

TEST(MeanStd, IsTheSampleStatisticOfTheFiniteValues) {
  const auto m = txl::experiment::mean_std({1.0, 2.0, 3.0, std::nan("")});
  EXPECT_EQ(m.n, 3);
  EXPECT_DOUBLE_EQ(m.mean, 2.0);
  EXPECT_DOUBLE_EQ(m.std, 1.0);
  const auto one = txl::experiment::mean_std({5.0});
  EXPECT_DOUBLE_EQ(one.std, 0.0);
  EXPECT_TRUE(std::isnan(txl::experiment::mean_std({}).mean));
}

TEST(SummarizeSeeds, GroupsTheSeedsOfOneEvaluationApart) {
  const auto t = noisy(2.0, 50, 1);
  std::vector<ResultRecord> records = {
      record("xl", 1, t), record("xl", 2, t + 0.2),
      record("xl", 1, t, AttnType::kXl, EvalMode::kMemory, 16),
      record("xl", 1, t, AttnType::kXl, EvalMode::kMemory, 8, true)};
  const auto s = txl::experiment::summarize_seeds(records);
  ASSERT_EQ(s.size(), 3u);  // M=8 over two seeds, M=16, the sweep point
  EXPECT_EQ(s[0].seeds, (std::vector<std::int64_t>{1, 2}));
  EXPECT_NEAR(s[0].ppl.mean, (records[0].ppl + records[1].ppl) / 2, 1e-9);
  EXPECT_NEAR(s[0].ppl.std, std::abs(records[0].ppl - records[1].ppl) / std::sqrt(2.0), 1e-9);
  EXPECT_FALSE(s[0].first.token_losses.defined());
  const auto means = txl::experiment::mean_records(s, records);
  EXPECT_NEAR(means[0].ppl, s[0].ppl.mean, 1e-12);
}

// The ratio is exp of the difference of the seed-averaged mean losses, whatever the noise; a
// constant gap of 0.3 nats is significant, a variant against a copy of itself is not.
TEST(ComparePairs, RatioOfSeedAveragedLossesWithItsInterval) {
  const auto base = noisy(3.0, 640, 2);
  std::vector<ResultRecord> records = {
      record("vanilla", 1, base + 0.3, AttnType::kVanilla, EvalMode::kSegments),
      record("vanilla", 2, base + 0.5, AttnType::kVanilla, EvalMode::kSegments),
      record("vanilla", 1, base, AttnType::kVanilla, EvalMode::kSliding),  // not its headline
      record("xl", 1, base),
      record("xl", 2, base + 0.2),
      record("xl", 1, base + 9.0, AttnType::kXl, EvalMode::kMemory, 16),  // not the training M
      record("copy", 1, base),
      record("copy", 2, base + 0.2),
  };
  const auto pairs = txl::experiment::compare_pairs(records, "test");
  ASSERT_EQ(pairs.size(), 3u);  // vanilla/xl, vanilla/copy, xl/copy
  EXPECT_EQ(pairs[0].a, "vanilla");
  EXPECT_EQ(pairs[0].b, "xl");
  EXPECT_EQ(pairs[0].seeds_a, 2);
  const double expected =
      std::exp((records[0].loss + records[1].loss) / 2 - (records[3].loss + records[4].loss) / 2);
  EXPECT_NEAR(pairs[0].interval.ratio, expected, 1e-6);
  EXPECT_NEAR(pairs[0].interval.ratio, std::exp(0.3), 1e-5);  // a constant gap: every resample
  EXPECT_TRUE(pairs[0].interval.significant());
  EXPECT_EQ(pairs[0].interval.tokens, 640);
  // xl against copy: the same seed-averaged losses, ratio 1 and an interval of [1, 1].
  EXPECT_NEAR(pairs[2].interval.ratio, 1.0, 1e-6);
  EXPECT_FALSE(pairs[2].interval.significant());
}

TEST(ComparePairs, SkipsVariantsWithoutTokenLosses) {
  auto a = record("a", 1, noisy(2.0, 64, 3));
  auto b = record("b", 1, noisy(2.0, 64, 4));
  b.token_losses = torch::Tensor();
  EXPECT_TRUE(txl::experiment::compare_pairs({a, b}, "test").empty());
  auto c = record("c", 1, noisy(2.0, 63, 5));  // other tokens
  EXPECT_TRUE(txl::experiment::compare_pairs({a, c}, "test").empty());
}

// A sweep record of `variant` at context c whose every token has loss `loss`.
ResultRecord at(const std::string& variant, std::int64_t c, double loss, std::int64_t seed = 1,
                AttnType attn = AttnType::kXl) {
  const bool absolute = attn == AttnType::kVanilla;
  return record(variant, seed, torch::full({32}, loss, torch::kDouble), attn,
                absolute ? EvalMode::kSliding : EvalMode::kMemory, static_cast<int>(c), true);
}

TEST(ContextSweeps, TableSixFiguresFromTheGrid) {
  // xl trained with Q 8 + M 8 = 16: init at c = 16; best 2.0 first reached at c = 24.
  std::vector<ResultRecord> records = {at("xl", 8, 3.0), at("xl", 16, 2.5), at("xl", 24, 2.0),
                                       at("xl", 32, 2.0), at("xl", 16, 2.7, 2)};
  // vanilla (Q 8): init at c = 8, best there, worse beyond its training length.
  for (auto [c, l] : std::vector<std::pair<int, double>>{{8, 2.8}, {16, 3.5}, {24, 4.0}})
    records.push_back(at("vanilla", c, l, 1, AttnType::kVanilla));
  const auto sweeps = txl::experiment::context_sweeps(records, "test");
  ASSERT_EQ(sweeps.size(), 2u);
  const auto& xl = sweeps[0];
  EXPECT_EQ(xl.contexts, (std::vector<std::int64_t>{8, 16, 24, 32}));
  EXPECT_EQ(xl.ppl[1].n, 2);
  EXPECT_NEAR(xl.ppl[1].mean, (std::exp(2.5) + std::exp(2.7)) / 2, 1e-5);
  EXPECT_EQ(xl.train_context, 16);
  EXPECT_EQ(xl.init_context, 16);
  EXPECT_NEAR(xl.ppl_init, xl.ppl[1].mean, 1e-12);
  EXPECT_NEAR(xl.ppl_best, std::exp(2.0), 1e-4);
  EXPECT_EQ(xl.attn_len, 24);  // the shortest of the tied best
  const auto& vanilla = sweeps[1];
  EXPECT_EQ(vanilla.init_context, 8);
  EXPECT_EQ(vanilla.attn_len, 8);
  EXPECT_NEAR(vanilla.ppl_best, vanilla.ppl_init, 1e-12);
}

// The group's RECL is eval::relative_effective_context on the seed-averaged per-token losses of
// the shared grid: xl keeps gaining up to c = 24, vanilla (absolute positions, Q 8) stays at 8.
TEST(GroupRecl, IsReclOfTheSeedAveragedLossesOnTheSharedGrid) {
  std::vector<ResultRecord> records;
  for (auto [c, l] :
       std::vector<std::pair<int, double>>{{8, 3.0}, {16, 2.5}, {24, 2.0}, {32, 2.0}}) {
    records.push_back(at("xl", c, l - 0.1, 1));
    records.push_back(at("xl", c, l + 0.1, 2));  // mean l
    // Past its training length (Q 8) vanilla's windows run on positions it never saw; their
    // losses (here lower by chance) do not count: at c > 8 its losses at c = 8 stand in.
    records.push_back(at("vanilla", c, c > 8 ? 2.9 : 3.0, 1, AttnType::kVanilla));
  }
  records.push_back(at("vanilla", 40, 3.0, 1, AttnType::kVanilla));  // not shared: ignored
  const auto t = txl::experiment::group_recl(records, "test");
  ASSERT_TRUE(t.note.empty()) << t.note;
  EXPECT_EQ(t.variants, (std::vector<std::string>{"xl", "vanilla"}));
  EXPECT_EQ(t.recl.contexts, (std::vector<std::int64_t>{8, 16, 24, 32}));
  EXPECT_EQ(t.tokens, 32);
  for (size_t k = 0; k < t.recl.ratios.size(); ++k) {
    EXPECT_EQ(t.recl.recl[0][k], 24) << "r = " << t.recl.ratios[k];
    EXPECT_EQ(t.recl.recl[1][k], 8) << "r = " << t.recl.ratios[k];
  }
  // A variant whose losses are missing at one context: no RECL, and the note says which.
  records[0].token_losses = torch::Tensor();
  records[1].token_losses = torch::Tensor();
  const auto missing = txl::experiment::group_recl(records, "test");
  EXPECT_TRUE(missing.variants.empty());
  EXPECT_NE(missing.note.find("xl at context 8"), std::string::npos) << missing.note;
}

TEST(Analysis, JsonAndCsvHoldEveryFigure) {
  std::vector<ResultRecord> records = {record("a", 1, noisy(2.0, 128, 6)),
                                       record("b", 1, noisy(2.2, 128, 7)),
                                       at("a", 8, 2.0),
                                       at("a", 16, 1.5),
                                       at("b", 8, 2.0),
                                       at("b", 16, 2.0)};
  const auto a = txl::experiment::analyse(records, "test");
  const auto j = nlohmann::json::parse(txl::experiment::analysis_json(a));
  EXPECT_EQ(j["pairs"].size(), 1u);
  EXPECT_EQ(j["sweeps"].size(), 2u);
  EXPECT_EQ(j["recl"]["variants"].size(), 2u);
  EXPECT_EQ(j["recl"]["recl"][0][0], 16);
  EXPECT_EQ(j["recl"]["recl"][1][0], 8);
  const std::string csv = txl::experiment::analysis_csv(a);
  EXPECT_NE(csv.find("pair,a,b,test,headline,0,ppl_ratio,"), std::string::npos) << csv;
  EXPECT_NE(csv.find("sweep,a,,test,sweep,16,attn_len,16"), std::string::npos) << csv;
  EXPECT_NE(csv.find("recl,a,,test,r=0.1,0,recl,16"), std::string::npos) << csv;
}

}  // namespace
