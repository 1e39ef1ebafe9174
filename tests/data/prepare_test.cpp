// tools/txl-prepare: an experiment (--config FILE, --set key=value) -> load_dataset ->
// statistics. The cache it writes is the one training the same experiment reads; errors name the
// file or the override and exit 1.

#include <cstdio>

#include "support/test_support.h"
#include "support/tiny_experiment.h"
#include "txl/config/load.h"
#include "txl/data/dataset.h"
#include "txl/util/fs.h"
#include "txl/util/process.h"

namespace {

namespace stdfs = std::filesystem;

struct Result {
  int status;
  std::string output;  // stdout, then the end of stderr
};

// The program `name` beside this test binary (both land in build/bin), else in TXL_BIN_DIR.
stdfs::path tool(const std::string& name = "txl-prepare") {
  std::error_code ec;
  auto here = stdfs::read_symlink("/proc/self/exe", ec).parent_path() / name;
  return !ec && stdfs::exists(here) ? here : txl::test::bin_dir() / name;
}

Result run(std::vector<std::string> args, const std::string& program = "txl-prepare") {
  args.insert(args.begin(), tool(program).string());
  const auto r = txl::process::run_program(args);
  EXPECT_TRUE(r.started) << r.error;
  return {r.exit_code, r.out + r.stderr_tail};
}

TEST(PrepareTool, BuildsThenHitsTheCache) {
  txl::test::TempDir dir;
  const std::vector<std::string> args = {"--set", "data.corpus=synthetic",
                                         "--set", "data.tokenizer.type=word",
                                         "--set", "data.synthetic.documents=20",
                                         "--set", "data.synthetic.gap=40",
                                         "--set", "data.cache_dir=" + (dir / "cache").string()};
  Result first = run(args);
  ASSERT_EQ(first.status, 0) << first.output;
  EXPECT_NE(first.output.find("tokenizer   word"), std::string::npos) << first.output;
  EXPECT_NE(first.output.find("train       1440 tokens"), std::string::npos) << first.output;
  EXPECT_NE(first.output.find("rebuilt 3 of 3 splits"), std::string::npos) << first.output;
  EXPECT_NE(first.output.find("tokens/s"), std::string::npos) << first.output;
  Result second = run(args);
  ASSERT_EQ(second.status, 0) << second.output;
  EXPECT_NE(second.output.find("(hit)"), std::string::npos) << second.output;
  EXPECT_NE(second.output.find("from cache"), std::string::npos) << second.output;
}

// txl-prepare --config FILE leaves nothing for training to rebuild: the same loader reads the
// same file (its data section differs from the defaults everywhere that matters: corpus size,
// tokenizer, cache folder), and --dump-config shows the experiment txl-train would resolve.
TEST(PrepareTool, PreparesWhatTrainingTheSameExperimentReads) {
  txl::test::TempDir dir;
  const auto path = dir / "tiny.yaml";
  txl::fs::write_atomic(path, txl::config::dump_experiment(txl::test::tiny_experiment(dir.path())));
  Result prepared = run({"--config", path.string()});
  ASSERT_EQ(prepared.status, 0) << prepared.output;
  EXPECT_NE(prepared.output.find("rebuilt 3 of 3 splits"), std::string::npos) << prepared.output;
  const auto config = txl::config::load_experiment(path.string());
  const auto dataset = txl::data::load_dataset(config.data);
  EXPECT_EQ(dataset.stats.splits_reused, 3);
  EXPECT_TRUE(dataset.stats.tokenizer_reused);
  EXPECT_NE(prepared.output.find("cache       " + dataset.stats.cache_path.string() + " ("),
            std::string::npos)
      << prepared.output;
  Result dump = run({"--config", path.string(), "--set", "train.max_steps=7", "--dump-config"});
  ASSERT_EQ(dump.status, 0) << dump.output;
  EXPECT_EQ(dump.output, txl::config::dump_experiment(
                             txl::config::load_experiment(path.string(), {"train.max_steps=7"})));
}

// The shipped default experiment resolves in txl-prepare exactly as in txl-train, its own
// sentencepiece vocabulary (4000) included, not the 8000 of config.h's defaults: the cache
// txl-prepare builds for it is the folder txl-train reads.
TEST(PrepareTool, ResolvesTheDefaultExperimentAsTxlTrainDoes) {
  const auto path = (txl::test::source_dir() / "experiments" / "kjv_base.yaml").string();
  const std::vector<std::string> args = {"--config", path, "--set", "data.cache_dir=/c",
                                         "--dump-config"};
  Result prepare = run(args);
  Result train = run(args, "txl-train");
  ASSERT_EQ(prepare.status, 0) << prepare.output;
  ASSERT_EQ(train.status, 0) << train.output;
  EXPECT_EQ(prepare.output, train.output);
  const auto config = txl::config::load_experiment(path, {"data.cache_dir=/c"});
  ASSERT_EQ(config.data.tokenizer.vocab_size, 4000);
  ASSERT_NE(txl::config::ExperimentConfig{}.data.tokenizer.vocab_size, 4000);
  EXPECT_EQ(prepare.output, txl::config::dump_experiment(config));
}

TEST(PrepareTool, ErrorsExitOne) {
  Result bad = run({"--set", "data.corpus=nope"});
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.output.find("error: --set data.corpus=nope: data.corpus: 'nope' is not one of"),
            std::string::npos)
      << bad.output;
  txl::test::TempDir dir;
  Result missing = run({"--set", "data.corpus=ptb", "--set", "data.path=/nonexistent/ptb", "--set",
                        "data.cache_dir=" + (dir / "c").string()});
  EXPECT_EQ(missing.status, 1);
  EXPECT_NE(missing.output.find("/nonexistent/ptb/ptb.train.txt"), std::string::npos)
      << missing.output;
  // A file's mistakes are named with line:column, as txl-train names them.
  const auto path = dir / "typo.yaml";
  txl::fs::write_atomic(path, "data:\n  tokenizer: {vocab_sise: 4000}\n");
  Result typo = run({"--config", path.string()});
  EXPECT_EQ(typo.status, 1);
  EXPECT_NE(typo.output.find(path.string() + ":2:"), std::string::npos) << typo.output;
  EXPECT_NE(typo.output.find("did you mean 'data.tokenizer.vocab_size'?"), std::string::npos)
      << typo.output;
}

}  // namespace
