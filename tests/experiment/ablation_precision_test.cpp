// run.precision: auto in an ablation: measured once for every job (paired comparisons need one
// precision), kept in <ablation>/precision.json, and read, not measured again, by later runs.

#include <gtest/gtest.h>

#include <fstream>

#include "ablation_test_support.h"
#include "support/process_as_program.h"
#include "support/test_support.h"
#include "txl/config/load.h"
#include "txl/experiment/ablation.h"
#include "txl/util/fs.h"

namespace {

const auto* const kProcess =
    ::testing::AddGlobalTestEnvironment(new txl::test::ProcessAsProgram(1));

using txl::config::Precision;
using txl::experiment::AblationStatus;
using txl::experiment::ablation_test::Ablation;
using txl::experiment::ablation_test::quiet_options;
using txl::experiment::ablation_test::run_dir;
using txl::experiment::ablation_test::tiny_ablation;
using txl::test::TempDir;
namespace stdfs = std::filesystem;

// The tiny ablation asking for auto everywhere; `only_xl` keeps one variant (a quicker run).
txl::config::AblationConfig asking_auto(const TempDir& dir, bool only_xl) {
  auto a = tiny_ablation(dir);
  a.base.run.precision = Precision::kAuto;
  for (auto& [name, cfg] : a.variants) cfg.run.precision = Precision::kAuto;
  if (only_xl) a.variants.erase(a.variants.begin(), a.variants.begin() + 2);
  return a;
}

Precision job_precision(const txl::config::AblationConfig& a, const std::string& variant) {
  const auto path = run_dir(a, variant) / "config.yaml";
  return txl::config::parse_experiment_string(txl::fs::read_file(path), path.string())
      .run.precision;
}

TEST_F(Ablation, AutoPrecisionIsMeasuredOnceAndEveryJobRunsWithIt) {
  TempDir dir;
  const auto a = asking_auto(dir, false);
  ASSERT_EQ(txl::experiment::run_ablation(a, quiet_options()).status, AblationStatus::kCompleted);
  const auto kept = stdfs::path(a.output_dir) / "precision.json";
  ASSERT_TRUE(stdfs::exists(kept));
  const auto record = nlohmann::json::parse(txl::fs::read_file(kept));
  const std::string name = record.at("precision");
  ASSERT_TRUE(name == "fp32" || name == "bf16") << name;
  EXPECT_FALSE(record.at("reason").get<std::string>().empty());
  const Precision chosen = name == "bf16" ? Precision::kBf16 : Precision::kFp32;
  for (const auto& [variant, cfg] : a.variants) EXPECT_EQ(job_precision(a, variant), chosen);
}

// The kept answer is what a run uses, whichever it is (this CPU would measure only one of them).
TEST_F(Ablation, AKeptAutoPrecisionIsReadNotMeasuredAgain) {
  for (const std::string kept : {"bf16", "fp32"}) {
    SCOPED_TRACE(kept);
    TempDir dir;
    const auto a = asking_auto(dir, true);
    txl::fs::ensure_dir(a.output_dir);
    txl::fs::write_atomic(stdfs::path(a.output_dir) / "precision.json",
                          "{\"precision\": \"" + kept + "\"}\n");
    ASSERT_EQ(txl::experiment::run_ablation(a, quiet_options()).status, AblationStatus::kCompleted);
    EXPECT_EQ(job_precision(a, "xl"), kept == "bf16" ? Precision::kBf16 : Precision::kFp32);
  }
}

TEST_F(Ablation, AMalformedKeptPrecisionIsAnErrorNamingIt) {
  for (const std::string text : {"not json", "{\"precision\": \"auto\"}", "{\"other\": 1}"}) {
    SCOPED_TRACE(text);
    TempDir dir;
    const auto a = asking_auto(dir, true);
    txl::fs::ensure_dir(a.output_dir);
    txl::fs::write_atomic(stdfs::path(a.output_dir) / "precision.json", text);
    TXL_EXPECT_THROW_WITH(txl::experiment::run_ablation(a, quiet_options()), "precision.json");
    EXPECT_FALSE(stdfs::exists(run_dir(a, "xl")));  // no job started
  }
}

}  // namespace
