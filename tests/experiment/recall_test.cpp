// The context-use instrument on the task made to need long context (label slow, ~3 minutes):
// experiments/synthetic_recall.yaml as shipped, trained and evaluated by the ablation runner with
// its context sweep. Each recalled value sits 47 tokens after its statement and segments are 16
// tokens long, so a model that uses its memory has a RECL of at least 47 and one that cannot
// (vanilla, absolute positions, no memory) at most its segment length.
#include <gtest/gtest.h>

#include "support/process_as_program.h"
#include "support/test_support.h"
#include "txl/config/load.h"
#include "txl/experiment/ablation.h"
#include "txl/experiment/analysis.h"
#include "txl/train/trainer.h"

namespace {

const auto* const kProcess =
    ::testing::AddGlobalTestEnvironment(new txl::test::ProcessAsProgram(1));

constexpr std::int64_t kRecallDistance = 47;  // the file's header: statement to recalled value

TEST(SyntheticRecall, XlsReclCoversTheRecallAndVanillasStaysWithinItsSegment) {
  txl::test::TempDir dir;
  auto a = txl::config::load_ablation(
      (txl::test::source_dir() / "experiments" / "synthetic_recall.yaml").string());
  a.output_dir = (dir / "runs").string();
  for (auto& [name, c] : a.variants) {
    c.run.output_dir = (dir / "runs" / name).string();
    c.data.cache_dir = (dir / "cache").string();
  }
  txl::experiment::AblationOptions options;
  options.quiet = true;
  options.report.plots = false;
  const auto result = txl::experiment::run_ablation(a, options);
  ASSERT_EQ(result.status, txl::experiment::AblationStatus::kCompleted);
  const auto table = txl::experiment::group_recl(result.records, "test");
  ASSERT_TRUE(table.note.empty()) << table.note;
  ASSERT_EQ(table.variants, (std::vector<std::string>{"vanilla", "xl"}));
  const std::int64_t segment = a.base.model.tgt_len;
  for (size_t k = 0; k < table.recl.ratios.size(); ++k) {
    SCOPED_TRACE("r = " + std::to_string(table.recl.ratios[k]));
    EXPECT_LE(table.recl.recl[0][k], segment);          // vanilla
    EXPECT_GE(table.recl.recl[1][k], kRecallDistance);  // xl
  }
}

}  // namespace
