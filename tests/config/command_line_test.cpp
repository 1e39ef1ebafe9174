// The shared command-line grammar: --config, --set and --dump-config reach the same loader as
// load_experiment, shorthands are --set written differently, overrides of a stored experiment
// change only what is allowed, and arguments() gives the same command line back.

#include "txl/config/command_line.h"

#include <CLI/CLI.hpp>

#include "config_test_util.h"
#include "support/test_support.h"
#include "txl/config/load.h"

namespace txl::config {
namespace {

using Config = CommandLineOptions::Config;

// Parses `args` (without the program name) into a CommandLine with these options, plus the
// --threads shorthand of run.threads.
CommandLine parse(const std::vector<std::string>& args, Config config = Config::kOptional) {
  CLI::App app{"test"};
  CommandLine line;
  CommandLineOptions options;
  options.config = config;
  add_experiment_options(app, line, options);
  add_set_shorthand(app, line, "--threads", "run.threads", "threads");
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 takes them backwards
  app.parse(reversed);
  return line;
}

class CommandLineTest : public ::testing::Test {
 protected:
  std::string write(const std::string& text) {
    return test::write_yaml(dir_, "experiments/e.yaml", text);
  }
  test::TempDir dir_;
};

TEST_F(CommandLineTest, ReachesTheLoaderInOrder) {
  const auto path = write("model: {n_layer: 3, d_model: 64, n_head: 2}\n");
  const auto line =
      parse({"-c", path, "--set", "model.n_layer=5", "--set", "model.n_layer=6", "--dump-config"});
  EXPECT_EQ(line.config_path, path);
  EXPECT_EQ(line.overrides, (std::vector<std::string>{"model.n_layer=5", "model.n_layer=6"}));
  EXPECT_TRUE(line.dump);
  const auto config = line.experiment();
  EXPECT_TRUE(same_settings(config, load_experiment(path, line.overrides)));
  EXPECT_EQ(config.model.n_layer, 6);  // the later --set wins
  EXPECT_EQ(config.model.d_model, 64);
}

// Without a file: the built-in defaults, with the overrides validated as in a file.
TEST_F(CommandLineTest, WithoutAFileTheDefaultsAndTheOverrides) {
  EXPECT_TRUE(same_settings(parse({}).experiment(), ExperimentConfig{}));
  const auto set = parse({"--set", "data.tokenizer.vocab_size=4000"}).experiment();
  ExperimentConfig expected;
  expected.data.tokenizer.vocab_size = 4000;
  EXPECT_TRUE(same_settings(set, expected));
  TXL_EXPECT_THROW_WITH(parse({"--set", "model.n_layr=2"}).experiment(),
                        "--set model.n_layr=2: unknown key 'model.n_layr'; did you mean "
                        "'model.n_layer'?");
  const auto path = write("model:\n  n_layer: 0\n");
  TXL_EXPECT_THROW_WITH(parse({"--config", path}).experiment(),
                        "e.yaml:2:12: model.n_layer: must be >= 1, got 0");
}

TEST_F(CommandLineTest, ConfigRequiredOrAbsent) {
  EXPECT_THROW(parse({"--set", "model.n_layer=2"}, Config::kRequired), CLI::RequiredError);
  EXPECT_THROW(parse({"--config", "x.yaml"}, Config::kAbsent), CLI::ParseError);
  EXPECT_EQ(parse({"--set", "eval.mem_len=8"}, Config::kAbsent).overrides.size(), 1u);
}

// A shorthand and its --set give the same experiment, and the same mistakes.
TEST_F(CommandLineTest, AShorthandIsItsSet) {
  const auto path = write("run: {threads: 5}\n");
  const auto shorthand = parse({"--config", path, "--threads", "3"});
  const auto set = parse({"--config", path, "--set", "run.threads=3"});
  EXPECT_EQ(shorthand.overrides, set.overrides);
  EXPECT_TRUE(same_settings(shorthand.experiment(), set.experiment()));
  EXPECT_EQ(shorthand.experiment().run.threads, 3);
  TXL_EXPECT_THROW_WITH(parse({"--threads", "-2"}).experiment(),
                        "--set run.threads=-2: run.threads: must be >= 0, got -2");
}

// A shorthand is its --set, after every --set whatever the order on the command line.
TEST_F(CommandLineTest, ShorthandsAreSetsThatComeLast) {
  for (const auto& args :
       std::vector<std::vector<std::string>>{{"--threads", "3", "--set", "run.threads=2"},
                                             {"--set", "run.threads=2", "--threads", "3"}}) {
    const auto line = parse(args);
    EXPECT_EQ(line.overrides, (std::vector<std::string>{"run.threads=2", "run.threads=3"}));
    EXPECT_EQ(line.experiment().run.threads, 3);
  }
  TXL_EXPECT_THROW_WITH(parse({"--threads", "many"}).experiment(),
                        "--set run.threads=many: run.threads: expected an integer, got 'many'");
}

TEST_F(CommandLineTest, ArgumentsGiveTheSameCommandLineBack) {
  const auto path = write("model: {n_layer: 3}\n");
  const auto line = parse({"--set", "train.lr=0.5", "--config", path, "--threads", "1"});
  const auto again = parse(line.arguments());
  EXPECT_EQ(again.config_path, line.config_path);
  EXPECT_EQ(again.overrides, line.overrides);
  EXPECT_EQ(parse({}).arguments(), std::vector<std::string>{});
}

// A stored experiment (a checkpoint's) changes only where allowed; setting a key to the value
// it already has changes nothing and is fine.
TEST_F(CommandLineTest, OverridesOfAStoredExperimentChangeOnlyWhatIsAllowed) {
  ExperimentConfig stored;
  stored.model.n_layer = 2;
  stored.train.lr = 0.5;
  const std::vector<std::string> allowed = {"eval.", "data.", "run.threads"};
  const auto changed = parse({"--set", "eval.mem_len=32", "--set", "data.path=/corpus", "--set",
                              "run.threads=1", "--set", "model.n_layer=2"})
                           .experiment_over(stored, "ckpt.safetensors", allowed);
  EXPECT_EQ(changed.eval.mem_len, 32);
  EXPECT_EQ(changed.data.path, "/corpus");
  EXPECT_EQ(changed.run.threads, 1);
  EXPECT_EQ(changed.model.n_layer, 2);
  TXL_EXPECT_THROW_WITH(
      parse({"--set", "train.lr=1"}).experiment_over(stored, "ckpt.safetensors", allowed),
      "--set: train.lr: 0.5 -> 1.0: only eval.*, data.* and run.threads may be set here; the "
      "rest stays as in ckpt.safetensors");
  TXL_EXPECT_THROW_WITH(
      parse({"--set", "data.path=x"}).experiment_over(stored, "old.pt", {"data.cache_dir"}),
      "only data.cache_dir may be set here");
  EXPECT_TRUE(same_settings(parse({}).experiment_over(stored, "c", allowed), stored));
}

}  // namespace
}  // namespace txl::config
