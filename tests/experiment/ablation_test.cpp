// The ablation runner end to end on a tiny synthetic corpus: every variant trained, evaluated in
// its modes and reported; finished work skipped, half-finished work resumed, changed variants
// redone; seeds and sweeps; failed jobs. What a rerun trusts: ablation_cache_test.cpp;
// txl-ablate's command line, errors and Ctrl-C: ablation_cli_test.cpp.
#include "txl/experiment/ablation.h"
#include "txl/experiment/analysis.h"

#include <signal.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "ablation_test_support.h"
#include "support/process_as_program.h"
#include "support/test_support.h"
#include "support/tiny_experiment.h"
#include "txl/config/load.h"
#include "txl/train/trainer.h"
#include "txl/util/fs.h"

namespace {

// The process as txl-ablate sets it for these variants' run.threads: 1 thread.
const auto* const kProcess =
    ::testing::AddGlobalTestEnvironment(new txl::test::ProcessAsProgram(1));

using txl::experiment::AblationStatus;
using txl::test::TempDir;
namespace stdfs = std::filesystem;

using txl::experiment::ablation_test::Ablation;
using txl::experiment::ablation_test::quiet_options;
using txl::experiment::ablation_test::read;
using txl::experiment::ablation_test::run_dir;
using txl::experiment::ablation_test::tiny_ablation;
using txl::experiment::ablation_test::variant;
using txl::experiment::ablation_test::write_signed;

TEST_F(Ablation, EveryVariantIsTrainedEvaluatedAndReported) {
  TempDir dir;
  auto a = tiny_ablation(dir);
  auto result = txl::experiment::run_ablation(a, quiet_options());
  ASSERT_EQ(result.status, AblationStatus::kCompleted);
  // Plans: vanilla segments + sliding, rel_no_memory memory(0) + segments, xl memory 8/16/32 +
  // segments; on two splits.
  ASSERT_EQ(result.records.size(), 2u * (2 + 2 + 4));
  for (const auto& r : result.records) {
    SCOPED_TRACE(r.variant + " " + r.split + " " + txl::config::to_string(r.eval_mode));
    EXPECT_TRUE(std::isfinite(r.ppl));
    EXPECT_GT(r.ppl, 1.0);
    EXPECT_NEAR(r.ppl, std::exp(r.loss), 1e-6 * r.ppl);
    EXPECT_GT(r.tokens, 0);
    EXPECT_EQ(r.train_steps, 6);
    EXPECT_GT(r.params, 0);
    EXPECT_EQ(r.tgt_len, 8);
    EXPECT_GT(r.recall_tokens, 0);  // the synthetic corpus's recalled values, scored alone
    EXPECT_GT(r.recall_loss, 0.0);
  }
  // Each split is scored whole in every mode, so every mode of a split counts the same tokens.
  for (const auto& r : result.records) {
    EXPECT_EQ(r.tokens, result.records[r.split == "valid" ? 0 : 2].tokens)
        << r.variant << r.eval_mode;
  }
  const auto dir_out = stdfs::path(a.output_dir);
  auto json = nlohmann::json::parse(read(dir_out / "results.json"))["records"];
  EXPECT_EQ(json.size(), result.records.size());
  std::string md = read(dir_out / "report.md");
  for (const std::string name : {"vanilla", "rel_no_memory", "xl"}) {
    EXPECT_NE(md.find("| " + name), std::string::npos) << name;
    auto done = nlohmann::json::parse(read(run_dir(a, name) / "done.json"));
    EXPECT_EQ(done["stage"], "evaluated");
    EXPECT_EQ(done["fingerprint"], txl::experiment::training_fingerprint(variant(a, name)));
    EXPECT_TRUE(stdfs::exists(run_dir(a, name) / "eval_results.json"));
  }
  EXPECT_NE(md.find("Transformer-XL (xl, memory M=8)"), std::string::npos) << md;
  // What each variant changes relative to the base.
  EXPECT_NE(md.find("- `vanilla`: model.attn_type: 'xl' -> 'vanilla'; model.mem_len: 8 -> 0"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("- `xl`: the base experiment"), std::string::npos) << md;
  EXPECT_NE(result.report.table.find("sliding"), std::string::npos);
  EXPECT_NE(md.find("Recall on test ("), std::string::npos) << md;
}

TEST_F(Ablation, EvalMaxTokensScoresTheSamePrefixInEveryMode) {
  TempDir dir;
  auto a = tiny_ablation(dir);
  auto options = quiet_options();
  options.eval_max_tokens = 40;
  auto result = txl::experiment::run_ablation(a, options);
  ASSERT_EQ(result.status, AblationStatus::kCompleted);
  for (const auto& r : result.records) {
    EXPECT_EQ(r.tokens, 40) << r.variant << " " << r.split << " " << r.eval_mode;
    EXPECT_GT(r.bits_per_byte, 0.0);
  }
  // A changed limit is another evaluation: computed afresh, not taken from the cache.
  options.eval_max_tokens = 24;
  auto shorter = txl::experiment::run_ablation(a, options);
  for (const auto& r : shorter.records) EXPECT_EQ(r.tokens, 24);
}

TEST_F(Ablation, RerunSkipsFinishedWorkAndRedoesOnlyWhatChanged) {
  TempDir dir;
  auto a = tiny_ablation(dir);
  auto first = txl::experiment::run_ablation(a, quiet_options());
  ASSERT_EQ(first.status, AblationStatus::kCompleted);
  std::map<std::string, std::string> metrics, checkpoints;
  for (const std::string name : {"vanilla", "rel_no_memory", "xl"}) {
    metrics[name] = read(run_dir(a, name) / "metrics.jsonl");
    checkpoints[name] = read(run_dir(a, name) / "checkpoint_last.safetensors");
  }

  // Nothing changed: nothing is trained or evaluated again; the results are the cached ones.
  auto second = txl::experiment::run_ablation(a, quiet_options());
  ASSERT_EQ(second.records.size(), first.records.size());
  for (size_t i = 0; i < first.records.size(); ++i) {
    EXPECT_EQ(second.records[i].seconds, first.records[i].seconds);  // not re-measured
    EXPECT_EQ(second.records[i].loss, first.records[i].loss);
  }
  for (const std::string name : {"vanilla", "rel_no_memory", "xl"}) {
    EXPECT_EQ(read(run_dir(a, name) / "metrics.jsonl"), metrics[name]) << name;
  }

  // An evaluation setting changed: no retraining, only the affected evaluations are redone.
  variant(a, "vanilla").eval.stride = 2;
  // A training setting changed: that variant alone is trained again from scratch.
  variant(a, "xl").train.max_steps = 8;
  auto third = txl::experiment::run_ablation(a, quiet_options());
  ASSERT_EQ(third.status, AblationStatus::kCompleted);
  EXPECT_EQ(read(run_dir(a, "vanilla") / "metrics.jsonl"), metrics["vanilla"]);
  EXPECT_EQ(read(run_dir(a, "vanilla") / "checkpoint_last.safetensors"), checkpoints["vanilla"]);
  EXPECT_EQ(read(run_dir(a, "rel_no_memory") / "checkpoint_last.safetensors"),
            checkpoints["rel_no_memory"]);
  EXPECT_NE(read(run_dir(a, "xl") / "metrics.jsonl"), metrics["xl"]);
  for (size_t i = 0; i < third.records.size(); ++i) {
    const auto& r = third.records[i];
    const auto& before = first.records[i];
    ASSERT_EQ(r.variant, before.variant);
    if (r.variant == "xl") {
      EXPECT_EQ(r.train_steps, 8);
    } else if (r.eval_mode == txl::config::EvalMode::kSliding) {
      EXPECT_EQ(r.stride, 2);
      EXPECT_NE(r.seconds, before.seconds);  // measured again
    } else {
      EXPECT_EQ(r.seconds, before.seconds);  // cached
      EXPECT_EQ(r.loss, before.loss);
    }
  }
}

// done.json keeps a training figure that is not finite as null with its reason; the rerun reads
// it back as that number (not as a type error) and reports it the same way.
TEST_F(Ablation, DoneJsonReadsBackNonFiniteFigures) {
  TempDir dir;
  auto a = tiny_ablation(dir);
  auto options = quiet_options();
  options.only = {"rel_no_memory"};
  ASSERT_EQ(txl::experiment::run_ablation(a, options).status, AblationStatus::kCompleted);
  const auto done_path = run_dir(a, "rel_no_memory") / "done.json";
  auto done = nlohmann::ordered_json::parse(read(done_path));
  ASSERT_TRUE(done["train_tokens_per_s"].is_number());
  done["train_tokens_per_s"] = nullptr;
  done["null_because"]["train_tokens_per_s"] = "+inf";
  write_signed(done_path, done);  // as txl writes such a figure, its checksum included
  auto rerun = txl::experiment::run_ablation(a, options);
  ASSERT_EQ(rerun.status, AblationStatus::kCompleted);
  ASSERT_FALSE(rerun.records.empty());
  // Read from done.json: a retraining would have measured a finite figure.
  for (const auto& r : rerun.records) {
    EXPECT_EQ(r.train_tokens_per_s, std::numeric_limits<double>::infinity());
  }
  EXPECT_EQ(nlohmann::json::parse(read(done_path))["null_because"]["train_tokens_per_s"], "+inf");
  auto results = nlohmann::json::parse(read(stdfs::path(a.output_dir) / "results.json"))["records"];
  EXPECT_TRUE(results[0]["train_tokens_per_s"].is_null());
  EXPECT_EQ(results[0]["null_because"]["train_tokens_per_s"], "+inf");
}

TEST_F(Ablation, HalfFinishedVariantResumesAndAChangedOneRestarts) {
  TempDir dir;
  auto a = tiny_ablation(dir);
  auto& xl = variant(a, "xl");
  // What an interrupted run leaves: a checkpoint at step 3 and config.yaml of the full run.
  auto partial = xl;
  partial.train.max_steps = 3;
  txl::train::train(partial, txl::test::quiet_run());
  txl::fs::write_atomic(run_dir(a, "xl") / "config.yaml", txl::config::dump_experiment(xl));
  // A line only the partial run wrote: kept by a resume, gone after a restart.
  std::ofstream(run_dir(a, "xl") / "metrics.jsonl", std::ios::app)
      << R"({"kind":"note","step":1,"loss":0})"
      << "\n";
  auto options = quiet_options();
  options.only = {"xl"};
  auto result = txl::experiment::run_ablation(a, options);
  ASSERT_EQ(result.status, AblationStatus::kCompleted);
  std::string metrics = read(run_dir(a, "xl") / "metrics.jsonl");
  EXPECT_NE(metrics.find(R"("kind":"note")"), std::string::npos) << "not resumed:\n" << metrics;
  EXPECT_NE(metrics.find(R"("step":6)"), std::string::npos);
  // --only: the other variants were neither run nor reported (they have no results yet).
  EXPECT_FALSE(stdfs::exists(run_dir(a, "vanilla")));
  for (const auto& r : result.records) EXPECT_EQ(r.variant, "xl");

  // The same situation, but the half-finished run had other training settings: restarted.
  TempDir dir2;
  auto b = tiny_ablation(dir2);
  auto& xl2 = variant(b, "xl");
  auto other = xl2;
  other.train.max_steps = 3;
  other.train.lr = 5e-3;
  txl::train::train(other, txl::test::quiet_run());
  std::ofstream(run_dir(b, "xl") / "metrics.jsonl", std::ios::app)
      << R"({"kind":"note","step":1,"loss":0})"
      << "\n";
  auto restarted = txl::experiment::run_ablation(b, options);
  ASSERT_EQ(restarted.status, AblationStatus::kCompleted);
  EXPECT_EQ(read(run_dir(b, "xl") / "metrics.jsonl").find(R"("kind":"note")"), std::string::npos);
}

TEST_F(Ablation, OnlyKeepsTheOtherVariantsCachedResults) {
  TempDir dir;
  auto a = tiny_ablation(dir);
  auto full = txl::experiment::run_ablation(a, quiet_options());
  auto options = quiet_options();
  options.only = {"xl"};
  auto again = txl::experiment::run_ablation(a, options);
  ASSERT_EQ(again.records.size(), full.records.size());
  std::string md = read(stdfs::path(a.output_dir) / "report.md");
  EXPECT_NE(md.find("| vanilla"), std::string::npos);
  options.only = {"xl", "nope"};
  TXL_EXPECT_THROW_WITH(txl::experiment::run_ablation(a, options),
                        "has no variant 'nope'; its variants are: vanilla, rel_no_memory, xl");
}

TEST_F(Ablation, SignalStopsBeforeTheNextPieceOfWorkAndTheRerunFinishes) {
  TempDir dir;
  auto a = tiny_ablation(dir);
  txl::util::stop_signal().store(SIGTERM);
  auto stopped = txl::experiment::run_ablation(a, quiet_options());
  EXPECT_EQ(stopped.status, AblationStatus::kInterrupted);
  EXPECT_EQ(stopped.signal, SIGTERM);
  EXPECT_EQ(stopped.stopped_variant, "vanilla");
  EXPECT_FALSE(stdfs::exists(stdfs::path(a.output_dir) / "report.md"));
  txl::util::stop_signal().store(0);
  auto done = txl::experiment::run_ablation(a, quiet_options());
  EXPECT_EQ(done.status, AblationStatus::kCompleted);
  EXPECT_TRUE(stdfs::exists(stdfs::path(a.output_dir) / "report.md"));
}

// Seeds and the context sweep: every variant trained once per seed in <variant>/seed<k>/, its
// sweep evaluated, per-token losses cached; the report gives mean ± std, ratio intervals whose
// ratio is exactly that of the seed-averaged losses, the sweep and RECL; a rerun recomputes
// nothing.
namespace {

// Where memory helps: one pair (rel_no_memory, xl; vanilla has no memory to take away), whose
// total is the headline ratio and whose every grouping covers every token once.
void expect_memory_help(const nlohmann::json& results, const std::string& md,
                        const std::string& summary_csv, double headline_ratio) {
  ASSERT_EQ(results["memory_help"].size(), 1u);
  const auto& help = results["memory_help"][0];
  EXPECT_EQ(help["a"], "rel_no_memory");
  EXPECT_EQ(help["b"], "xl");
  EXPECT_EQ(help["seeds"], 2);
  EXPECT_NEAR(help["total"]["ratio"].get<double>(), headline_ratio, 1e-5);
  ASSERT_EQ(help["tables"].size(), 3u);
  for (const auto& table : help["tables"]) {
    std::int64_t tokens = 0;
    double share = 0.0;
    for (const auto& row : table["rows"]) {
      tokens += row["tokens"].get<std::int64_t>();
      if (row["tokens"].get<std::int64_t>() > 0) share += row["share"].get<double>();
    }
    EXPECT_EQ(tokens, help["total"]["tokens"].get<std::int64_t>()) << table["title"];
    EXPECT_NEAR(share, 1.0, 1e-6) << table["title"];
  }
  EXPECT_NE(md.find("## Where memory helps: xl over rel_no_memory (test)"), std::string::npos);
  EXPECT_NE(summary_csv.find("memory_gain,xl,rel_no_memory,test,in memory,0,ppl_ratio,"),
            std::string::npos);
  // Where attention looks, for both models of the pair: each layer's shares sum to one; only xl
  // has a memory to put weight on.
  ASSERT_TRUE(help.contains("attention")) << help.dump();
  const auto& attention = help["attention"];
  EXPECT_EQ(attention["seed"], 1);
  for (const char* model : {"a", "b"}) {
    ASSERT_FALSE(attention[model]["mass"].empty());
    for (const auto& layer : attention[model]["mass"]) {
      double sum = 0.0;
      for (const auto& share : layer) sum += share.get<double>();
      EXPECT_NEAR(sum, 1.0, 1e-6) << model;
    }
  }
  for (const auto& share : attention["a"]["memory"]) EXPECT_EQ(share.get<double>(), 0.0);
  for (const auto& share : attention["b"]["memory"]) EXPECT_GT(share.get<double>(), 0.0);
  EXPECT_EQ(attention["seed_a"], 1);
  EXPECT_NE(md.find("Where attention looks (seed 1 of rel_no_memory, seed 1 of xl;"),
            std::string::npos);
  EXPECT_NE(summary_csv.find("attention_mass,xl,layer 1,test,in memory,0,share,"),
            std::string::npos);
}

}  // namespace

TEST_F(Ablation, SeedsAndSweepGiveIntervalsSweepsAndRecl) {
  TempDir dir;
  auto a = tiny_ablation(dir);
  a.seeds = {1, 2};
  a.contexts = {4, 8, 16};
  for (auto& [name, c] : a.variants) c.eval.splits = {"test"};
  auto options = quiet_options();
  options.sweep = true;
  auto result = txl::experiment::run_ablation(a, options);
  ASSERT_EQ(result.status, AblationStatus::kCompleted);
  for (const char* name : {"vanilla", "rel_no_memory", "xl"}) {
    for (const char* seed : {"seed1", "seed2"}) {
      EXPECT_TRUE(stdfs::exists(run_dir(a, name) / seed / "done.json")) << name << " " << seed;
      EXPECT_TRUE(stdfs::exists(run_dir(a, name) / seed / "token_losses.safetensors"));
    }
  }
  // Main plans (2 + 2 + 4) and 3 sweep points per variant, per seed, but vanilla's 2: it is
  // swept up to its training length (8), not at 16.
  ASSERT_EQ(result.records.size(), 2u * (2 + 2 + 4 + 2 + 3 + 3));
  for (const auto& r : result.records) {
    if (r.sweep && r.variant == "vanilla") EXPECT_LE(r.context(), 8) << r.context();
  }
  std::map<std::string, std::vector<double>> headline_loss;
  for (const auto& r : result.records) {
    ASSERT_TRUE(r.token_losses.defined()) << r.variant;
    EXPECT_EQ(r.token_losses.size(0), r.tokens);
    EXPECT_NEAR(r.token_losses.to(torch::kDouble).mean().item<double>(), r.loss, 1e-5);
    if (txl::experiment::is_headline(r)) headline_loss[r.variant].push_back(r.loss);
    // The synthetic corpus marks its documents (a few dozen tokens each): the loss by position
    // in them is kept, finite where documents reach, empty beyond (positions 63 and on).
    ASSERT_EQ(r.loss_by_document_position.size(), 11u);
    for (size_t k = 0; k < 5; ++k) EXPECT_GT(r.loss_by_document_position[k], 0.0) << k;
    EXPECT_TRUE(std::isnan(r.loss_by_document_position[10]));
  }
  ASSERT_EQ(headline_loss["xl"].size(), 2u);
  EXPECT_NE(headline_loss["xl"][0], headline_loss["xl"][1]);  // two seeds, two models
  auto json = nlohmann::json::parse(read(stdfs::path(a.output_dir) / "results.json"));
  ASSERT_EQ(json["analysis"].size(), 1u);
  const auto& analysis = json["analysis"][0];
  ASSERT_EQ(analysis["pairs"].size(), 3u);
  const auto& pair = analysis["pairs"][0];  // vanilla / rel_no_memory
  const auto mean = [&](const std::string& v) {
    return (headline_loss[v][0] + headline_loss[v][1]) / 2;
  };
  EXPECT_NEAR(pair["ratio"].get<double>(), std::exp(mean("vanilla") - mean("rel_no_memory")), 1e-5);
  EXPECT_LE(pair["low"].get<double>(), pair["ratio"].get<double>());
  EXPECT_GE(pair["high"].get<double>(), pair["ratio"].get<double>());
  EXPECT_EQ(analysis["sweeps"].size(), 3u);
  EXPECT_EQ(analysis["recl"]["variants"].size(), 3u);
  EXPECT_EQ(analysis["recl"]["contexts"], nlohmann::json({4, 8, 16}));
  const std::string md = read(stdfs::path(a.output_dir) / "report.md");
  // The headline comes first: each pair's ratio and xl against rel_no_memory's best context.
  EXPECT_LT(md.find("## Headline (test)"), md.find("## What was compared")) << md;
  EXPECT_NE(md.find("- ppl(rel_no_memory) / ppl(xl) = "), std::string::npos) << md;
  EXPECT_NE(md.find("- xl at its training memory (M = "), std::string::npos) << md;
  EXPECT_EQ(md.find("- rel_no_memory at its training memory"), std::string::npos) << md;
  EXPECT_EQ(md.find("vanilla (trained without memory)"), std::string::npos) << md;
  for (const char* section :
       {"## Significance (test)", "## Context sweep (test)",
        "## Relative effective context length (test)", " ± ", "blocks of 64 contiguous tokens",
        "2 seeds (1, 2)", "## Loss by position in the document (test)"}) {
    EXPECT_NE(md.find(section), std::string::npos) << section << "\n" << md;
  }
  EXPECT_TRUE(stdfs::exists(stdfs::path(a.output_dir) / "results_summary.csv"));
  expect_memory_help(json, md, read(stdfs::path(a.output_dir) / "results_summary.csv"),
                     std::exp(mean("rel_no_memory") - mean("xl")));

  const auto losses = run_dir(a, "xl") / "seed2" / "token_losses.safetensors";
  const auto written = stdfs::last_write_time(losses);
  auto again = txl::experiment::run_ablation(a, options);
  ASSERT_EQ(again.status, AblationStatus::kCompleted);
  EXPECT_EQ(stdfs::last_write_time(losses), written);  // nothing evaluated again
  ASSERT_EQ(again.records.size(), result.records.size());
  for (size_t i = 0; i < again.records.size(); ++i) {
    EXPECT_EQ(again.records[i].ppl, result.records[i].ppl);
    EXPECT_TRUE(torch::equal(again.records[i].token_losses, result.records[i].token_losses));
  }
}

// A job that fails (here its data cache cannot be made) is reported, in the result and the
// report, and the other jobs still finish.
TEST_F(Ablation, AFailedJobIsReportedAndTheOthersFinish) {
  TempDir dir;
  auto a = tiny_ablation(dir);
  txl::test::write_text(dir / "a_file", "not a folder");
  variant(a, "rel_no_memory").data.cache_dir = (dir / "a_file" / "cache").string();
  auto result = txl::experiment::run_ablation(a, quiet_options());
  EXPECT_EQ(result.status, AblationStatus::kFailed);
  ASSERT_EQ(result.failed.size(), 1u);
  EXPECT_EQ(result.failed[0].rfind("rel_no_memory: ", 0), 0u) << result.failed[0];
  std::set<std::string> reported;
  for (const auto& r : result.records) reported.insert(r.variant);
  EXPECT_EQ(reported, (std::set<std::string>{"vanilla", "xl"}));
  const std::string md = read(stdfs::path(a.output_dir) / "report.md");
  EXPECT_NE(md.find("## Failed jobs"), std::string::npos);
  EXPECT_NE(md.find("- rel_no_memory: "), std::string::npos) << md;
}

}  // namespace
