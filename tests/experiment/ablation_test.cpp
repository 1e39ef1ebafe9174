// The ablation runner end to end on a tiny synthetic corpus: every variant trained, evaluated in
// its modes and reported; finished work skipped, half-finished work resumed, changed variants
// redone; and txl-ablate's command line, errors and Ctrl-C.
#include "txl/experiment/ablation.h"
#include "txl/experiment/analysis.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/core.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>
#include <tuple>

#include "support/process_as_program.h"
#include "support/test_support.h"
#include "support/tiny_experiment.h"
#include "txl/config/load.h"
#include "txl/train/trainer.h"
#include "txl/util/fs.h"
#include "txl/util/safetensors.h"
#include "txl/util/sha256.h"

namespace {

// The process as txl-ablate sets it for these variants' run.threads: 1 thread.
const auto* const kProcess =
    ::testing::AddGlobalTestEnvironment(new txl::test::ProcessAsProgram(1));

using txl::experiment::AblationStatus;
using txl::test::TempDir;
namespace stdfs = std::filesystem;

// A model and budget small enough that a variant trains and evaluates in about a second.
txl::config::ExperimentConfig tiny_base(const TempDir& dir) {
  txl::config::ExperimentConfig c;
  c.run.seed = 11;
  c.run.threads = 1;
  c.run.log_interval = 2;
  c.data.corpus = txl::config::Corpus::kSynthetic;
  c.data.cache_dir = (dir / "cache").string();
  c.data.tokenizer.type = txl::config::TokenizerType::kWord;
  c.data.synthetic.documents = 24;
  c.data.synthetic.gap = 12;
  c.model.n_layer = 1;
  c.model.d_model = 16;
  c.model.n_head = 2;
  c.model.d_head = 8;
  c.model.d_inner = 32;
  c.model.dropout = 0.0;
  c.model.tgt_len = 8;
  c.model.mem_len = 8;
  c.train.lr = 1e-3;
  c.train.batch_size = 4;
  c.train.max_steps = 6;
  c.train.eval_interval = 3;
  c.train.checkpoint_interval = 3;
  c.train.warmup_steps = 0;
  c.eval.batch_size = 4;
  c.eval.stride = 4;
  c.eval.splits = {"valid", "test"};
  return c;
}

txl::config::AblationConfig tiny_ablation(const TempDir& dir) {
  txl::config::AblationConfig a;
  a.name = "tiny";
  a.output_dir = (dir / "runs" / "tiny").string();
  a.base = tiny_base(dir);
  auto add = [&](const std::string& name, txl::config::AttnType attn, int mem_len) {
    auto c = a.base;
    c.run.name = "tiny/" + name;
    c.run.output_dir = (dir / "runs" / "tiny" / name).string();
    c.model.attn_type = attn;
    c.model.mem_len = mem_len;
    a.variants.emplace_back(name, c);
  };
  add("vanilla", txl::config::AttnType::kVanilla, 0);
  add("rel_no_memory", txl::config::AttnType::kXl, 0);
  add("xl", txl::config::AttnType::kXl, 8);
  return a;
}

txl::experiment::AblationOptions quiet_options() {
  txl::experiment::AblationOptions o;
  o.quiet = true;
  o.report.plots = false;
  o.sweep = false;  // the tests of seeds and sweeps turn it on
  return o;
}

txl::config::ExperimentConfig& variant(txl::config::AblationConfig& a, const std::string& name) {
  for (auto& [n, c] : a.variants) {
    if (n == name) return c;
  }
  throw std::runtime_error("no variant " + name);
}

stdfs::path run_dir(const txl::config::AblationConfig& a, const std::string& name) {
  return stdfs::path(a.output_dir) / name;
}

std::string read(const stdfs::path& p) { return txl::fs::read_file(p); }

// Writes `j` back as the runner writes its files: with the SHA-256 of the rest under "sha256",
// so that only the cross-checks can find an edit made this way.
void write_signed(const stdfs::path& path, nlohmann::ordered_json j) {
  j.erase("sha256");
  txl::Sha256 sha;
  sha.update(j.dump());
  j["sha256"] = sha.hex_digest();
  txl::fs::write_atomic(path, j.dump(2));
}

std::string losses_sha256(const torch::Tensor& t) {
  const auto c = t.to(torch::kFloat).contiguous();
  txl::Sha256 sha;
  sha.update(std::string_view(static_cast<const char*>(c.data_ptr()), c.nbytes()));
  return sha.hex_digest();
}

// Resets the stop flag whatever a test did with it.
class Ablation : public ::testing::Test {
 protected:
  void SetUp() override { txl::util::stop_signal().store(0); }
  void TearDown() override { txl::util::stop_signal().store(0); }
};

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
  // Main plans (2 + 2 + 4) and 3 sweep points per variant, per seed.
  ASSERT_EQ(result.records.size(), 2u * (2 + 2 + 4 + 3 * 3));
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
  for (const char* section :
       {"## Significance (test)", "## Context sweep (test)",
        "## Relative effective context length (test)", " ± ", "blocks of 64 contiguous tokens",
        "2 seeds (1, 2)", "## Loss by position in the document (test)"}) {
    EXPECT_NE(md.find(section), std::string::npos) << section << "\n" << md;
  }
  EXPECT_TRUE(stdfs::exists(stdfs::path(a.output_dir) / "results_summary.csv"));

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

// ------------------------------------------------------------------ what a rerun trusts

// The bytes of every checkpoint and metrics file of the ablation's variants.
std::map<std::string, std::string> training_files(const txl::config::AblationConfig& a) {
  std::map<std::string, std::string> out;
  for (const auto& [name, cfg] : a.variants) {
    for (const char* file :
         {"checkpoint_last.safetensors", "checkpoint_best.safetensors", "metrics.jsonl"}) {
      const auto path = stdfs::path(cfg.run.output_dir) / file;
      if (stdfs::exists(path)) out[name + "/" + file] = read(path);
    }
  }
  return out;
}

// The figures of the records, with what training and evaluation measured (not their timings).
void expect_same_figures(const std::vector<txl::experiment::ResultRecord>& a,
                         const std::vector<txl::experiment::ResultRecord>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    SCOPED_TRACE(a[i].variant + " " + a[i].split + " " + txl::config::to_string(a[i].eval_mode));
    EXPECT_EQ(a[i].variant, b[i].variant);
    EXPECT_EQ(a[i].loss, b[i].loss);
    EXPECT_EQ(a[i].ppl, b[i].ppl);
    EXPECT_EQ(a[i].tokens, b[i].tokens);
    EXPECT_EQ(a[i].train_steps, b[i].train_steps);
    EXPECT_EQ(a[i].train_tokens, b[i].train_tokens);
    EXPECT_EQ(a[i].params, b[i].params);
    EXPECT_GT(b[i].params, 0);
  }
}

// Issue 32: a rerun with --set run.log_interval=20 (a key the resume check lets change) retrained
// every variant from scratch. Every key that cannot change what a run computes is left out of
// the training fingerprint: changing any of them trains nothing and keeps every result.
TEST_F(Ablation, ARerunWithAKeyThatCannotChangeTheRunTrainsNothing) {
  TempDir dir;
  auto a = tiny_ablation(dir);
  const auto first = txl::experiment::run_ablation(a, quiet_options());
  ASSERT_EQ(first.status, AblationStatus::kCompleted);
  const auto files = training_files(a);
  using Change = std::function<void(txl::config::ExperimentConfig&)>;
  const std::vector<std::pair<std::string, Change>> changes = {
      {"run.threads", [](auto& c) { c.run.threads = 2; }},
      {"run.device", [](auto& c) { c.run.device = txl::config::Device::kAuto; }},
      {"run.log_interval", [](auto& c) { c.run.log_interval = 20; }},
      {"run.dist_timeout", [](auto& c) { c.run.dist_timeout = 30; }},
      {"data.cache_dir", [&](auto& c) { c.data.cache_dir = (dir / "other_cache").string(); }},
      {"train.checkpoint_interval", [](auto& c) { c.train.checkpoint_interval = 1; }},
  };
  // The list is every such key but run.output_dir (the moved folder below) and eval.* (which
  // change only the evaluations they affect): a key added to the table must be tested here.
  std::set<std::string> tested = {"run.output_dir"};
  for (const auto& [key, change] : changes) tested.insert(key);
  for (const auto& key : txl::config::result_neutral_keys())
    if (key.rfind("eval.", 0) != 0) EXPECT_TRUE(tested.count(key)) << key << " is not tested";
  for (const auto& [key, change] : changes) {
    SCOPED_TRACE(key);
    auto changed = a;
    for (auto& [name, cfg] : changed.variants) change(cfg);
    ::testing::internal::CaptureStderr();
    const auto rerun = txl::experiment::run_ablation(changed, quiet_options());
    const std::string err = ::testing::internal::GetCapturedStderr();
    ASSERT_EQ(rerun.status, AblationStatus::kCompleted);
    EXPECT_EQ(err.find("training it again"), std::string::npos) << err;
    EXPECT_EQ(training_files(a), files);
    expect_same_figures(first.records, rerun.records);
    for (size_t i = 0; i < first.records.size(); ++i)
      EXPECT_EQ(rerun.records[i].seconds, first.records[i].seconds);  // cached, not measured
  }
  // The ablation's folder moved, and output_dir points at the new place.
  auto moved = a;
  moved.output_dir = (dir / "moved" / "tiny").string();
  stdfs::create_directories(dir / "moved");
  stdfs::rename(a.output_dir, moved.output_dir);
  for (auto& [name, cfg] : moved.variants)
    cfg.run.output_dir = (dir / "moved" / "tiny" / name).string();
  const auto there = txl::experiment::run_ablation(moved, quiet_options());
  ASSERT_EQ(there.status, AblationStatus::kCompleted);
  EXPECT_EQ(training_files(moved), files);
  expect_same_figures(first.records, there.records);
  // The control: a key that changes the run (the learning rate) trains that variant again.
  variant(moved, "xl").train.lr = 2e-3;
  ::testing::internal::CaptureStderr();
  txl::experiment::run_ablation(moved, quiet_options());
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("variant xl changed since it was trained (train.lr: 0.001 -> 0.002)"),
            std::string::npos)
      << err;
}

// Issue 32: eval_results.json and token_losses.safetensors were trusted unchecked: an edited ppl
// went into report.md, halved losses gave "ratio 0.0664, significant", one NaN failed every
// rerun without naming the file. Each damage, plain or with the checksums made to fit, is
// found, named in a warning, and the evaluation is run again: the same figures as before.
TEST_F(Ablation, EditedOrDamagedCachedEvaluationsAreFoundAndRunAgain) {
  TempDir dir;
  auto a = tiny_ablation(dir);
  auto options = quiet_options();
  const auto first = txl::experiment::run_ablation(a, options);
  ASSERT_EQ(first.status, AblationStatus::kCompleted);
  const auto xl = run_dir(a, "xl");
  const std::string json_file = (xl / "eval_results.json").string();
  const std::string losses_file = (xl / "token_losses.safetensors").string();
  const std::string json_bytes = read(json_file), losses_bytes = read(losses_file);
  auto json = [&] { return nlohmann::ordered_json::parse(json_bytes); };
  auto losses = [&] { return txl::safetensors::parse(losses_bytes, losses_file); };
  auto write_losses = [&](txl::safetensors::File f) {
    txl::fs::write_atomic(losses_file, txl::safetensors::serialize(f.tensors, f.metadata));
  };
  auto halve = [&] {
    auto f = losses();
    f.tensors[0].second = f.tensors[0].second / 2;
    return f;
  };
  auto with_nan = [&] {
    auto f = losses();
    f.tensors[0].second = f.tensors[0].second.clone();
    f.tensors[0].second[0] = std::nan("");
    return f;
  };
  // The hashes of eval_results.json made to fit new losses.
  auto signed_for = [&](const txl::safetensors::File& f) {
    auto j = json();
    for (size_t i = 0; i < j["keys"].size(); ++i)
      if (j["keys"][i] == f.tensors[0].first)
        j["token_losses_sha256"][i] = losses_sha256(f.tensors[0].second);
    write_signed(json_file, j);
  };
  const std::vector<std::tuple<std::string, std::function<void()>, std::string, std::string>>
      cases = {
          {"an edited ppl",
           [&] {
             auto j = json();
             j["records"][0]["ppl"] = 1.5;
             txl::fs::write_atomic(json_file, j.dump(2));
           },
           json_file, "fails its checksum"},
          {"an edited ppl, signed",
           [&] {
             auto j = json();
             j["records"][0]["ppl"] = 1.5;
             write_signed(json_file, j);
           },
           json_file, "is not exp(loss"},
          {"halved losses", [&] { write_losses(halve()); }, losses_file, "fail their checksum"},
          {"halved losses, signed",
           [&] {
             const auto f = halve();
             write_losses(f);
             signed_for(f);
           },
           losses_file, "is not the record's loss"},
          {"a NaN loss, signed",
           [&] {
             const auto f = with_nan();
             write_losses(f);
             signed_for(f);
           },
           losses_file, "a loss that is not finite"},
          {"a cut file", [&] { txl::fs::write_atomic(losses_file, losses_bytes.substr(0, 100)); },
           losses_file, losses_file},
      };
  for (const auto& [what, damage, file, reason] : cases) {
    SCOPED_TRACE(what);
    damage();
    ::testing::internal::CaptureStderr();
    const auto rerun = txl::experiment::run_ablation(a, options);
    const std::string err = ::testing::internal::GetCapturedStderr();
    ASSERT_EQ(rerun.status, AblationStatus::kCompleted) << err;
    EXPECT_NE(err.find(file), std::string::npos) << err;
    EXPECT_NE(err.find(reason), std::string::npos) << err;
    expect_same_figures(first.records, rerun.records);
    // Repaired: the next rerun finds nothing to redo.
    ::testing::internal::CaptureStderr();
    txl::experiment::run_ablation(a, options);
    EXPECT_EQ(::testing::internal::GetCapturedStderr().find("warning"), std::string::npos);
  }
}

// Issue 32: a damaged done.json gave "params 0" once the variant was resumed from its cached
// evaluations. Its figures now come back from the checkpoint's training state.
TEST_F(Ablation, ADamagedDoneJsonIsRebuiltFromTheCheckpoint) {
  TempDir dir;
  auto a = tiny_ablation(dir);
  const auto first = txl::experiment::run_ablation(a, quiet_options());
  ASSERT_EQ(first.status, AblationStatus::kCompleted);
  const auto done = run_dir(a, "xl") / "done.json";
  for (const std::string damaged : {read(done).substr(0, 40), std::string("{}"), [&] {
                                      auto j = nlohmann::ordered_json::parse(read(done));
                                      j["params"] = 0;  // checksum left as it was
                                      return j.dump(2);
                                    }()}) {
    SCOPED_TRACE(damaged);
    txl::fs::write_atomic(done, damaged);
    ::testing::internal::CaptureStderr();
    const auto rerun = txl::experiment::run_ablation(a, quiet_options());
    const std::string err = ::testing::internal::GetCapturedStderr();
    ASSERT_EQ(rerun.status, AblationStatus::kCompleted) << err;
    EXPECT_NE(err.find(done.string()), std::string::npos) << err;
    EXPECT_EQ(err.find("training it again"), std::string::npos) << err;
    expect_same_figures(first.records, rerun.records);
  }
  // A variant that stopped early (train.patience): its figures come back without a step more.
  TempDir dir2;
  auto b = tiny_ablation(dir2);
  for (auto& [name, cfg] : b.variants) {
    cfg.train.optimizer = txl::config::Optimizer::kSgd;
    cfg.train.schedule = txl::config::Schedule::kConstant;
    cfg.train.lr = 1e-30;  // no update moves an fp32 weight: no validation improves on the first
    cfg.train.eval_interval = 1;
    cfg.train.patience = 1;
  }
  const auto early = txl::experiment::run_ablation(b, quiet_options());
  ASSERT_EQ(early.status, AblationStatus::kCompleted);
  ASSERT_EQ(early.records.front().train_steps, 2) << "the variants did not stop early";
  const auto files = training_files(b);
  txl::fs::write_atomic(run_dir(b, "xl") / "done.json", "{}");
  const auto resumed = txl::experiment::run_ablation(b, quiet_options());
  ASSERT_EQ(resumed.status, AblationStatus::kCompleted);
  expect_same_figures(early.records, resumed.records);
  EXPECT_EQ(training_files(b).at("xl/checkpoint_best.safetensors"),
            files.at("xl/checkpoint_best.safetensors"));
}

// ------------------------------------------------------------------------------ txl-ablate

struct Child {
  int status = -1;
  std::string out, err;
};

// Writes a tiny ablation YAML using the inline-base form of load_ablation.
std::string write_yaml(const TempDir& dir, std::int64_t max_steps) {
  std::string yaml = fmt::format(
      "# A two-variant smoke ablation on the synthetic corpus; seconds.\n"
      "name: cli\n"
      "output_dir: {0}/runs/cli\n"
      "base:\n"
      "  run: {{seed: 3, threads: 1, log_interval: 2}}\n"
      "  data: {{corpus: synthetic, cache_dir: {0}/cache, tokenizer: {{type: word}},\n"
      "         synthetic: {{documents: 24, gap: 12}}}}\n"
      "  model: {{n_layer: 1, d_model: 16, n_head: 2, d_head: 8, d_inner: 32, dropout: 0.0,\n"
      "          tgt_len: 8, mem_len: 8}}\n"
      "  train: {{batch_size: 4, max_steps: {1}, eval_interval: 3, checkpoint_interval: 3}}\n"
      "  eval: {{batch_size: 4, stride: 4, splits: [test]}}\n"
      "variants:\n"
      "  vanilla: {{model.attn_type: vanilla, model.mem_len: 0}}\n"
      "  xl: {{}}\n",
      dir.path().string(), max_steps);
  auto path = dir / "cli.yaml";
  txl::test::write_text(path, yaml);
  return path.string();
}

Child run_ablate(const std::string& args, const std::string& env = "") {
  TempDir logs;
  std::string cmd = env + " " + (txl::test::bin_dir() / "txl-ablate").string() + " " + args + " >" +
                    (logs / "out").string() + " 2>" + (logs / "err").string();
  Child c;
  c.status = std::system(cmd.c_str());
  c.out = read(logs / "out");
  c.err = read(logs / "err");
  return c;
}

TEST(TxlAblate, PrintsTheTableAndWritesTheReport) {
  TempDir dir;
  auto yaml = write_yaml(dir, 4);
  Child c = run_ablate(yaml + " --no-plots --quiet");
  ASSERT_TRUE(WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0) << c.err;
  EXPECT_NE(c.out.find("| vanilla"), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("| xl"), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("report: "), std::string::npos);
  EXPECT_TRUE(stdfs::exists(dir / "runs" / "cli" / "report.md"));

  Child dump = run_ablate(yaml + " --dump-config --set train.max_steps=9");
  ASSERT_TRUE(WIFEXITED(dump.status) && WEXITSTATUS(dump.status) == 0) << dump.err;
  EXPECT_NE(dump.out.find("# variant: vanilla"), std::string::npos);
  EXPECT_NE(dump.out.find("max_steps: 9"), std::string::npos) << dump.out;

  Child bad = run_ablate(yaml + " --only nope");
  EXPECT_TRUE(WIFEXITED(bad.status) && WEXITSTATUS(bad.status) == 1);
  EXPECT_EQ(bad.err.rfind("error: --only: ablation cli has no variant 'nope'", 0), 0u) << bad.err;

  Child missing = run_ablate((dir / "none.yaml").string());
  EXPECT_TRUE(WIFEXITED(missing.status) && WEXITSTATUS(missing.status) == 1);
  EXPECT_EQ(missing.err.rfind("error: ", 0), 0u) << missing.err;
}

TEST(TxlAblate, SigintCheckpointsAndExits130WithTheResumeCommand) {
  TempDir dir;
  auto yaml = write_yaml(dir, 1000000);  // never finishes on its own
  const stdfs::path metrics = dir / "runs" / "cli" / "vanilla" / "metrics.jsonl";
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::string bin = (txl::test::bin_dir() / "txl-ablate").string();
    std::string err = (dir / "err").string();
    FILE* f = std::freopen(err.c_str(), "w", stderr);
    (void)f;
    ::execl(bin.c_str(), bin.c_str(), yaml.c_str(), "--quiet", "--no-plots", (char*)nullptr);
    ::_exit(127);
  }
  // Wait for training to be under way (a metrics line), then interrupt.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline &&
         (!stdfs::exists(metrics) || stdfs::file_size(metrics) == 0)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(stdfs::exists(metrics)) << "training never started";
  ::kill(pid, SIGINT);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 130);
  std::string err = read(dir / "err");
  EXPECT_NE(err.find("Resume with the same command"), std::string::npos) << err;
  EXPECT_TRUE(stdfs::exists(dir / "runs" / "cli" / "vanilla" / "checkpoint_last.safetensors"));
  EXPECT_FALSE(stdfs::exists(dir / "runs" / "cli" / "report.md"));
}

}  // namespace

namespace {

// Two jobs at a time, each its own single-thread process, give exactly the numbers of one
// process running them in turn; each job keeps its log.
TEST(TxlAblate, JobsInParallelProcessesEqualOneProcess) {
  TempDir serial_dir, parallel_dir;
  Child serial = run_ablate(write_yaml(serial_dir, 4) + " --no-plots --quiet --no-sweep --jobs 1");
  ASSERT_TRUE(WIFEXITED(serial.status) && WEXITSTATUS(serial.status) == 0) << serial.err;
  Child parallel =
      run_ablate(write_yaml(parallel_dir, 4) + " --no-plots --quiet --no-sweep --jobs 2");
  ASSERT_TRUE(WIFEXITED(parallel.status) && WEXITSTATUS(parallel.status) == 0) << parallel.err;
  EXPECT_NE(parallel.err.find("2 at a time with 1 thread(s) each"), std::string::npos)
      << parallel.err;
  auto records = [](const TempDir& d) {
    return nlohmann::json::parse(read(d / "runs" / "cli" / "results.json"))["records"];
  };
  const auto a = records(serial_dir), b = records(parallel_dir);
  ASSERT_EQ(a.size(), b.size());
  ASSERT_GT(a.size(), 0u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i]["loss"], b[i]["loss"]) << i;
  EXPECT_TRUE(stdfs::exists(parallel_dir / "runs" / "cli" / "xl" / "job.log"));
}

// The bytes of a finished ablation's results and every variant's checkpoints under `root`.
std::map<std::string, std::string> finished_files(const stdfs::path& root) {
  std::map<std::string, std::string> out;
  for (const auto& entry : stdfs::recursive_directory_iterator(root)) {
    const std::string name = entry.path().filename().string();
    if (name.find("checkpoint_") == 0 || name == "metrics.jsonl" || name == "eval_results.json" ||
        name == "token_losses.safetensors")
      out[stdfs::relative(entry.path(), root).string()] = read(entry.path());
  }
  return out;
}

// results.json without the figures that are timings.
nlohmann::json results_without_timing(const stdfs::path& file) {
  auto records = nlohmann::json::parse(read(file))["records"];
  for (auto& r : records)
    for (const char* key : {"seconds", "tokens_per_s", "train_seconds", "train_tokens_per_s"})
      r.erase(key);
  return records;
}

// Issue 32, as it was seen: after a finished `txl-ablate FILE`, `--set run.log_interval=20`, or
// the ablation's folder moved and output_dir pointed there, warned "changed since it was
// trained" and trained every variant again. Now neither trains anything; results.json is the
// same but for timings.
TEST(TxlAblate, ARerunWithASafeKeyOrFromAMovedFolderTrainsNothing) {
  TempDir dir;
  const auto yaml = write_yaml(dir, 4);
  Child first = run_ablate(yaml + " --no-plots --quiet --no-sweep --jobs 1");
  ASSERT_TRUE(WIFEXITED(first.status) && WEXITSTATUS(first.status) == 0) << first.err;
  const auto files = finished_files(dir / "runs" / "cli");
  const auto results = results_without_timing(dir / "runs" / "cli" / "results.json");
  Child again =
      run_ablate(yaml + " --no-plots --quiet --no-sweep --jobs 1 --set run.log_interval=20");
  ASSERT_TRUE(WIFEXITED(again.status) && WEXITSTATUS(again.status) == 0) << again.err;
  EXPECT_EQ(again.err.find("training it again"), std::string::npos) << again.err;
  EXPECT_EQ(finished_files(dir / "runs" / "cli"), files);
  EXPECT_EQ(results_without_timing(dir / "runs" / "cli" / "results.json"), results);

  stdfs::rename(dir / "runs", dir / "moved");
  std::string text = read(yaml);
  const std::string from = "output_dir: " + (dir / "runs").string();
  text.replace(text.find(from), from.size(), "output_dir: " + (dir / "moved").string());
  txl::test::write_text(yaml, text);
  Child moved = run_ablate(yaml + " --no-plots --quiet --no-sweep --jobs 1");
  ASSERT_TRUE(WIFEXITED(moved.status) && WEXITSTATUS(moved.status) == 0) << moved.err;
  EXPECT_EQ(moved.err.find("training it again"), std::string::npos) << moved.err;
  EXPECT_EQ(finished_files(dir / "moved" / "cli"), files);
  EXPECT_EQ(results_without_timing(dir / "moved" / "cli" / "results.json"), results);
}

// Issue 32: every `--jobs N` rerun truncated each job's job.log, finished and failed jobs' too,
// and a job's warnings reached only its job.log. A rerun now starts no process for a finished
// job, a job's log keeps every run (one header line each), and its warnings reach the parent's
// stderr as they happen, naming the job.
TEST(TxlAblate, JobLogsKeepEveryRunAndWarningsReachTheParent) {
  TempDir dir;
  const auto yaml = write_yaml(dir, 4);
  Child first = run_ablate(yaml + " --no-plots --quiet --no-sweep --jobs 2");
  ASSERT_TRUE(WIFEXITED(first.status) && WEXITSTATUS(first.status) == 0) << first.err;
  const auto xl = dir / "runs" / "cli" / "xl";
  const std::string vanilla_log = read(dir / "runs" / "cli" / "vanilla" / "job.log");
  const std::string xl_log = read(xl / "job.log");
  ASSERT_NE(xl_log.find("==== txl-ablate job xl, "), std::string::npos) << xl_log;
  // A damaged cache of xl: its job runs again and warns about it.
  std::string cache = read(xl / "eval_results.json");
  cache[cache.find("\"loss\": ") + 8] ^= 1;  // its first digit, another digit
  txl::fs::write_atomic(xl / "eval_results.json", cache);
  Child again = run_ablate(yaml + " --no-plots --quiet --no-sweep --jobs 2");
  ASSERT_TRUE(WIFEXITED(again.status) && WEXITSTATUS(again.status) == 0) << again.err;
  EXPECT_NE(again.err.find("[ablate] job xl: [ablate] warning: " +
                           (xl / "eval_results.json").string() + " fails its checksum"),
            std::string::npos)
      << again.err;
  EXPECT_NE(again.err.find("job vanilla: trained and evaluated earlier; nothing to do"),
            std::string::npos)
      << again.err;
  EXPECT_EQ(read(dir / "runs" / "cli" / "vanilla" / "job.log"), vanilla_log);
  const std::string both = read(xl / "job.log");
  EXPECT_EQ(both.rfind(xl_log, 0), 0u) << "the first run's log is gone:\n" << both;
  EXPECT_NE(both.find("==== txl-ablate job xl, ", xl_log.size()), std::string::npos) << both;
  EXPECT_NE(both.find("fails its checksum", xl_log.size()), std::string::npos) << both;
}

// --slurm submits the unfinished jobs as an array and the report after it, through sbatch's
// argv; the array's script runs a job when Slurm gives it a task id.
TEST(TxlAblate, SlurmSubmitsAnArrayAndTheReportAfterIt) {
  TempDir dir;
  const auto yaml = write_yaml(dir, 4);
  const stdfs::path bin = dir / "fake_bin";
  stdfs::create_directories(bin);
  txl::test::write_text(
      bin / "sbatch", "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done >> " +
                          (dir / "calls").string() + "\necho ---- >> " + (dir / "calls").string() +
                          "\necho 4242\n");
  stdfs::permissions(bin / "sbatch", stdfs::perms::owner_all);
  Child c = run_ablate(yaml + " --slurm --sbatch=--time=5 --no-sweep",
                       "PATH=" + bin.string() + ":\"$PATH\"");
  ASSERT_TRUE(WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0) << c.err;
  const std::string calls = read(dir / "calls");
  EXPECT_NE(calls.find("--parsable\n--time=5\n" + (dir / "runs/cli/slurm/jobs.sh").string()),
            std::string::npos)
      << calls;
  EXPECT_NE(calls.find("--dependency=afterany:4242\n--time=5\n"), std::string::npos) << calls;
  const std::string script = read(dir / "runs/cli/slurm/jobs.sh");
  EXPECT_NE(script.find("#SBATCH --array=0-1"), std::string::npos) << script;
  EXPECT_NE(script.find("labels=( vanilla xl)"), std::string::npos) << script;
  // Task 1 of the array trains and evaluates xl alone.
  const std::string task = "cd " + dir.path().string() + " && SLURM_ARRAY_TASK_ID=1 bash " +
                           (dir / "runs/cli/slurm/jobs.sh").string() + " >/dev/null 2>&1";
  ASSERT_EQ(std::system(task.c_str()), 0);
  EXPECT_TRUE(stdfs::exists(dir / "runs/cli/xl/done.json"));
  EXPECT_FALSE(stdfs::exists(dir / "runs/cli/vanilla/done.json"));
}

}  // namespace
