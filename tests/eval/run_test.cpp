// txl-eval's driver end to end on the tiny synthetic experiment: a checkpoint is evaluated from
// the checkpoint alone, and per-token losses come out as a NumPy file.
#include "txl/eval/run.h"

#include <cmath>
#include <cstring>
#include <sstream>

#include "support/test_support.h"
#include "support/tiny_experiment.h"
#include "txl/train/trainer.h"
#include "txl/util/fs.h"
#include "txl/util/log.h"
#include "txl/util/plot.h"

namespace {

TEST(EvalRun, TokenLossesAreANumpyFileInTextOrder) {
  txl::log::set_level(txl::log::Level::kQuiet);
  txl::test::TempDir dir;
  auto config = txl::test::tiny_experiment(dir.path());
  config.train.max_steps = 3;
  txl::train::train(config, {false, true});

  txl::eval::EvalRequest request;
  request.checkpoint = (dir / "runs/tiny/checkpoint_last.pt").string();
  request.splits = {"valid"};
  request.mode = "sliding";
  request.stride = 4;
  request.threads = 1;
  request.token_losses_path = (dir / "losses.npy").string();
  request.json = true;
  std::ostringstream out;
  txl::eval::run(request, out);

  // {"split":"valid",...,"loss":x,...,"tokens":n,...}
  const std::string json = out.str();
  auto number_after = [&](const std::string& key) {
    auto pos = json.find("\"" + key + "\":");
    EXPECT_NE(pos, std::string::npos) << json;
    return std::stod(json.substr(pos + key.size() + 3));
  };
  const double loss = number_after("loss");
  const auto tokens = static_cast<std::int64_t>(number_after("tokens"));

  const std::string npy = txl::fs::read_file(dir / "losses.npy");
  ASSERT_GT(npy.size(), 10u);
  EXPECT_EQ(npy.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  const size_t header_len = static_cast<unsigned char>(npy[8]) | (static_cast<unsigned char>(npy[9]) << 8);
  EXPECT_EQ((10 + header_len) % 64, 0u);
  const std::string header = npy.substr(10, header_len);
  EXPECT_NE(header.find("'descr': '<f4'"), std::string::npos) << header;
  EXPECT_NE(header.find("'shape': (" + std::to_string(tokens) + ",)"), std::string::npos) << header;
  ASSERT_EQ(npy.size(), 10 + header_len + tokens * sizeof(float));
  double sum = 0;
  for (std::int64_t i = 0; i < tokens; ++i) {
    float v;
    std::memcpy(&v, npy.data() + 10 + header_len + i * sizeof(float), sizeof(float));
    sum += v;
  }
  EXPECT_NEAR(sum / tokens, loss, 1e-5);

  // A folder that does not exist is named before anything is evaluated.
  request.token_losses_path = (dir / "no_such_folder" / "losses.npy").string();
  TXL_EXPECT_THROW_WITH(txl::eval::run(request, out), "no_such_folder does not exist");
  txl::log::set_level(txl::log::Level::kInfo);
}

TEST(EvalRun, SweepPlotIntoAFolderNameAShellWouldSplitRunsNothing) {
  txl::log::set_level(txl::log::Level::kQuiet);
  txl::test::TempDir dir;
  auto config = txl::test::tiny_experiment(dir.path());
  config.train.max_steps = 2;
  txl::train::train(config, {false, true});

  const auto out = dir / txl::test::kShellHostileName / txl::test::kShellHostileName;
  std::filesystem::create_directories(out);
  txl::eval::EvalRequest request;
  request.checkpoint = (dir / "runs/tiny/checkpoint_last.pt").string();
  request.splits = {"valid"};
  request.threads = 1;
  request.max_tokens = 64;
  request.sweep = true;
  request.sweep_mem_lens = {0, 8};
  request.out_dir = out.string();
  std::ostringstream table;
  txl::eval::run(request, table);
  txl::log::set_level(txl::log::Level::kInfo);

  EXPECT_TRUE(txl::test::nothing_executed(out));
  EXPECT_TRUE(std::filesystem::exists(out / "context_sweep.json"));
  if (!txl::plot::matplotlib_available()) {
    GTEST_SKIP() << "PNG part skipped: the plot interpreter " << txl::plot::python_interpreter()
                 << " cannot import matplotlib";
  }
  const std::string png = txl::fs::read_file(out / "context_sweep.png");
  EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n"));
}

TEST(EvalRun, AMissingCheckpointIsNamed) {
  txl::eval::EvalRequest request;
  request.checkpoint = "/nonexistent/ckpt.pt";
  std::ostringstream out;
  TXL_EXPECT_THROW_WITH(txl::eval::run(request, out), "/nonexistent/ckpt.pt");
}

}  // namespace
