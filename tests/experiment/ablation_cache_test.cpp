// What an ablation's rerun trusts: keys that cannot change a run, and damaged cached results.
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

#include "ablation_test_support.h"
#include "support/test_support.h"
#include "txl/config/load.h"
#include "txl/experiment/ablation.h"
#include "txl/util/fs.h"
#include "txl/util/safetensors.h"
#include "txl/util/sha256.h"

namespace {

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

std::string losses_sha256(const torch::Tensor& t) {
  const auto c = t.to(torch::kFloat).contiguous();
  txl::Sha256 sha;
  sha.update(std::string_view(static_cast<const char*>(c.data_ptr()), c.nbytes()));
  return sha.hex_digest();
}

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
  for (const auto& key : txl::config::result_neutral_keys()) {
    if (key.rfind("eval.", 0) == 0) continue;
    EXPECT_TRUE(tested.count(key)) << key << " is not tested";
  }
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
  for (const std::string& damaged : {read(done).substr(0, 40), std::string("{}"), [&] {
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

}  // namespace
