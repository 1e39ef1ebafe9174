// Tests of load_ablation: variants in file order, precedence base < shared < variant < --set,
// names and output folders, and errors inside variants.

#include <gtest/gtest.h>

#include "config_test_util.h"
#include "support/test_support.h"
#include "txl/config/load.h"
#include "txl/util/error.h"

namespace txl::config {
namespace {

using test::TempDir;
using test::write_yaml;

const ExperimentConfig& variant(const AblationConfig& ablation, const std::string& name) {
  for (const auto& [variant_name, config] : ablation.variants) {
    if (variant_name == name) return config;
  }
  throw std::runtime_error("no variant " + name);
}

std::vector<std::string> variant_names(const AblationConfig& ablation) {
  std::vector<std::string> names;
  for (const auto& entry : ablation.variants) names.push_back(entry.first);
  return names;
}

class LoadAblation : public ::testing::Test {
 protected:
  void SetUp() override {
    write_yaml(dir_, "experiments/base.yaml",
               "run: {name: base_run, output_dir: runs/base_run}\n"
               "model: {n_layer: 3, d_model: 64, n_head: 2, mem_len: 32}\n"
               "train: {max_steps: 500, lr: 0.001}\n");
  }
  std::string write(const std::string& text) {
    return write_yaml(dir_, "ablations/abl.yaml", text);
  }
  TempDir dir_;
};

TEST_F(LoadAblation, VariantsKeepFileOrderAndApplyTheirOverrides) {
  const std::string path = write(
      "# what it asks\n"
      "name: mem\n"
      "base: ../experiments/base.yaml\n"
      "train: {max_steps: 100}\n"
      "variants:\n"
      "  zeta: {}\n"
      "  vanilla: {model.attn_type: vanilla, model.mem_len: 0}\n"
      "  alpha:\n"
      "    model: {attn_type: shaw, n_layer: 5}\n"
      "  own_dir: {run.output_dir: elsewhere, run.name: custom}\n");
  AblationConfig a = load_ablation(path);
  EXPECT_EQ(a.name, "mem");
  EXPECT_EQ(a.output_dir, "");
  EXPECT_EQ(variant_names(a), (std::vector<std::string>{"zeta", "vanilla", "alpha", "own_dir"}));

  // The resolved base: base file plus the shared sections.
  EXPECT_EQ(a.base.model.n_layer, 3);
  EXPECT_EQ(a.base.train.max_steps, 100);

  const ExperimentConfig& zeta = variant(a, "zeta");
  EXPECT_TRUE(same_settings(zeta,
                            [&] {
                              ExperimentConfig expected = a.base;
                              expected.run.name = "mem/zeta";
                              expected.run.output_dir = "runs/mem/zeta";
                              return expected;
                            }()))
      << ::testing::PrintToString(diff_experiments(a.base, zeta));

  const ExperimentConfig& vanilla = variant(a, "vanilla");
  EXPECT_EQ(vanilla.model.attn_type, AttnType::kVanilla);
  EXPECT_EQ(vanilla.model.mem_len, 0);
  EXPECT_EQ(vanilla.model.d_model, 64);     // base
  EXPECT_EQ(vanilla.train.max_steps, 100);  // shared override beats the base
  EXPECT_DOUBLE_EQ(vanilla.train.lr, 0.001);
  EXPECT_EQ(vanilla.run.name, "mem/vanilla");
  EXPECT_EQ(vanilla.run.output_dir, "runs/mem/vanilla");
  EXPECT_EQ(vanilla.source, path);

  const ExperimentConfig& alpha = variant(a, "alpha");
  EXPECT_EQ(alpha.model.attn_type, AttnType::kShaw);
  EXPECT_EQ(alpha.model.n_layer, 5);
  EXPECT_EQ(alpha.model.mem_len, 32);

  const ExperimentConfig& own = variant(a, "own_dir");
  EXPECT_EQ(own.run.name, "custom");
  EXPECT_EQ(own.run.output_dir, "elsewhere");
}

TEST_F(LoadAblation, SetOverridesEveryVariantLast) {
  const std::string path = write(
      "name: mem\noutput_dir: results/mem\nbase: ../experiments/base.yaml\n"
      "variants:\n  small: {model.n_layer: 1}\n  big: {model.n_layer: 8}\n");
  AblationConfig a = load_ablation(path, {"train.max_steps=7", "model.n_layer=2"});
  EXPECT_EQ(a.base.train.max_steps, 7);
  for (const auto& [name, config] : a.variants) {
    EXPECT_EQ(config.train.max_steps, 7) << name;
    EXPECT_EQ(config.model.n_layer, 2) << name;  // --set beats the variant
    EXPECT_EQ(config.run.output_dir, "results/mem/" + name);
  }
  TXL_EXPECT_THROW_WITH(load_ablation(path, {"run.name=x"}),
                        "--set run.name=x: run.name: an ablation names its variants itself");
  TXL_EXPECT_THROW_WITH(
      load_ablation(path, {"model.n_leyer=2"}),
      "--set model.n_leyer=2: unknown key 'model.n_leyer'; did you mean 'model.n_layer'?");
}

// The process's threads are set once for every variant: a variant asking for others is named
// where it asks; the same threads everywhere (shared section or --set) are fine.
TEST_F(LoadAblation, VariantsShareTheProcesssThreads) {
  const std::string path = write(
      "name: threads\nbase: ../experiments/base.yaml\nrun: {threads: 1}\n"
      "variants:\n  one: {}\n  two: {run.threads: 2}\n");
  TXL_EXPECT_THROW_WITH(
      load_ablation(path),
      "abl.yaml:6:22: run.threads: variant 'two' asks for 2, variant 'one' for 1");
  for (const auto& [name, config] : load_ablation(path, {"run.threads=3"}).variants)
    EXPECT_EQ(config.run.threads, 3) << name;
  const std::string same = write(
      "name: threads\nbase: ../experiments/base.yaml\n"
      "variants:\n  one: {run.threads: 2}\n  two: {run.threads: 2}\n");
  EXPECT_EQ(load_ablation(same).variants.size(), 2u);
}

TEST_F(LoadAblation, InlineBaseMapping) {
  const std::string path = write(
      "name: inline\n"
      "base:\n"
      "  base: ../experiments/base.yaml\n"
      "  model: {d_model: 48}\n"
      "variants:\n  one: {}\n");
  AblationConfig a = load_ablation(path);
  ASSERT_EQ(a.variants.size(), 1u);
  EXPECT_EQ(a.variants[0].second.model.d_model, 48);
  EXPECT_EQ(a.variants[0].second.model.n_layer, 3);  // from the inline base's own base
}

TEST_F(LoadAblation, ErrorsInVariantsHavePositions) {
  const std::string path = write(
      "name: bad\n"
      "base: ../experiments/base.yaml\n"
      "variants:\n"
      "  ok: {}\n"
      "  typo: {model.n_layers: 2}\n"
      "  nested:\n"
      "    model: {atn_type: shaw}\n"
      "  vanilla: {model.attn_type: vanilla}\n"
      "  shallow: {model.n_layer: 0}\n");
  std::string message;
  try {
    load_ablation(path);
  } catch (const Error& e) {
    message = e.what();
  }
  EXPECT_NE(
      message.find(path + ":5:10: unknown key 'model.n_layers'; did you mean 'model.n_layer'?"),
      std::string::npos)
      << message;
  EXPECT_NE(
      message.find(path + ":7:13: unknown key 'model.atn_type'; did you mean 'model.attn_type'?"),
      std::string::npos)
      << message;
  // mem_len 32 came from the base file: the error points there and names the variant.
  EXPECT_NE(message.find("experiments/base.yaml:2:54: variant 'vanilla': model.mem_len: attn_type "
                         "vanilla uses absolute positions"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find(path + ":9:28: variant 'shallow': model.n_layer: must be >= 1, got 0"),
            std::string::npos)
      << message;
}

// seeds, contexts and sbatch: read with the ablation, errors at the item that is wrong.
TEST_F(LoadAblation, SeedsContextsAndSbatchAreCheckedWhereWritten) {
  const auto a = load_ablation(write(
      "name: x\nseeds: [3, 1]\ncontexts: [32, 64]\nsbatch: [\"--time=5\"]\nvariants: {a: {}}\n"));
  EXPECT_EQ(a.seeds, (std::vector<std::int64_t>{3, 1}));
  EXPECT_EQ(a.contexts, (std::vector<std::int64_t>{32, 64}));
  EXPECT_EQ(a.sbatch, (std::vector<std::string>{"--time=5"}));
  EXPECT_TRUE(load_ablation(write("name: x\nvariants: {a: {}}\n")).seeds.empty());
  TXL_EXPECT_THROW_WITH(load_ablation(write("name: x\nseeds: [1, 1]\nvariants: {a: {}}\n")),
                        "abl.yaml:2:12: seeds: 1 is listed twice");
  TXL_EXPECT_THROW_WITH(load_ablation(write("name: x\nseeds: [1, b]\nvariants: {a: {}}\n")),
                        "abl.yaml:2:12: seeds: expected an integer");
  TXL_EXPECT_THROW_WITH(load_ablation(write("name: x\nseeds: 3\nvariants: {a: {}}\n")),
                        "seeds: expected a non-empty list of integers");
  TXL_EXPECT_THROW_WITH(
      load_ablation(write("name: x\ncontexts: [64, 32]\nvariants: {a: {}}\n")),
      "abl.yaml:2:16: contexts: 32 comes after 64; list them in increasing order");
  TXL_EXPECT_THROW_WITH(load_ablation(write("name: x\ncontexts: [0]\nvariants: {a: {}}\n")),
                        "contexts: 0 is below the least allowed, 1");
  TXL_EXPECT_THROW_WITH(load_ablation(write("name: x\nsbatch: [[1]]\nvariants: {a: {}}\n")),
                        "sbatch: expected a string");
}

TEST_F(LoadAblation, FileLevelErrors) {
  TXL_EXPECT_THROW_WITH(load_ablation((dir_ / "none.yaml").string()),
                        "ablation file not found: " + (dir_ / "none.yaml").string());
  TXL_EXPECT_THROW_WITH(load_ablation(write("base: ../experiments/base.yaml\nvariants: {a: {}}\n")),
                        "name: missing");
  TXL_EXPECT_THROW_WITH(load_ablation(write("name: x\nbase: ../experiments/base.yaml\n")),
                        "variants: missing or empty");
  TXL_EXPECT_THROW_WITH(load_ablation(write("name: x\nvariants: {a: 3}\n")),
                        "abl.yaml:2:15: variant 'a': expected a mapping of overrides");
  TXL_EXPECT_THROW_WITH(load_ablation(write("name: x\nvariants: {a/b: {}}\n")),
                        "variant name 'a/b' must be letters, digits");
  TXL_EXPECT_THROW_WITH(load_ablation(write("name: x\nvariants: {a: {}, a: {}}\n")),
                        "abl.yaml:2:19: variant 'a' is listed twice");
  TXL_EXPECT_THROW_WITH(load_ablation(write("name: x\nvariant: {a: {}}\n")),
                        "abl.yaml:2:1: unknown key 'variant'; did you mean 'variants'?");
  TXL_EXPECT_THROW_WITH(load_ablation(write("name: x\nbase: missing.yaml\nvariants: {a: {}}\n")),
                        "abl.yaml:2:7: base file not found");
}

// Variant and ablation names make up run.name "<ablation>/<variant>", a folder under runs/: a
// name that is not a plain folder name is refused where the ablation file writes it.
TEST_F(LoadAblation, NamesThatAreNotPlainFolderNamesAreRefusedWhereWritten) {
  const std::string rule =
      " must be letters, digits, '_', '-' or '.' only (it names a folder "
      "under runs/): ";
  struct Case {
    std::string variants;  // the variants: line's mapping
    std::string message;   // after "<path>:"
  };
  const std::vector<Case> cases = {
      {"{-x: {}}", "2:12: variant name '-x'" + rule + "it starts with '-'"},
      {"{'..': {}}", "2:12: variant name '..'" + rule + "it is '..'"},
      {"{'a b': {}}", "2:12: variant name 'a b'" + rule + "it holds ' '"},
      {"{" + std::string(201, 'v') + ": {}}", "2:12: variant name '" + std::string(60, 'v') +
                                                  "...' (201 bytes)" + rule +
                                                  "it is longer than 200 bytes"},
  };
  for (const Case& c : cases) {
    const std::string path = write("name: x\nvariants: " + c.variants + "\n");
    TXL_EXPECT_THROW_WITH(load_ablation(path), path + ":" + c.message);
  }
  const std::string bad_name = write("name: ../x\nvariants: {a: {}}\n");
  TXL_EXPECT_THROW_WITH(load_ablation(bad_name),
                        bad_name + ":1:7: name: '../x'" + rule + "it holds '/'");

  // Each name fits, together they do not: the generated run.name is refused at the variant.
  const std::string long_name = std::string(150, 'a');
  const std::string variant_name = std::string(60, 'v');
  const std::string path =
      write("name: " + long_name + "\nvariants:\n  ok: {}\n  " + variant_name + ": {}\n");
  TXL_EXPECT_THROW_WITH(load_ablation(path), path + ":4:3: variant '" + variant_name +
                                                 "': run.name: must be a plain name: letters, "
                                                 "digits, '.', '_' and '-', with '/' only between "
                                                 "parts (e.g. kjv_xl or kjv_ablation/xl; set "
                                                 "run.output_dir for another folder), got '" +
                                                 std::string(60, 'a') +
                                                 "...' (211 bytes): it is longer than 200 bytes");
  // A variant naming its own run is held to the run.name rule where it does so.
  const std::string own = write("name: x\nvariants:\n  a: {run.name: ../../x}\n");
  TXL_EXPECT_THROW_WITH(load_ablation(own), own +
                                                ":3:17: variant 'a': run.name: must be a plain "
                                                "name");
}

TEST(LoadAblationFixture, CommittedAblationLoads) {
  const auto path = test::source_dir() / "tests/config/fixtures/tiny_ablation.yaml";
  AblationConfig a = load_ablation(path.string());
  EXPECT_EQ(a.name, "tiny_ablation");
  EXPECT_EQ(variant_names(a), (std::vector<std::string>{"xl", "rel_no_memory", "shaw", "vanilla"}));
  EXPECT_EQ(variant(a, "xl").model.mem_len, 16);
  EXPECT_EQ(variant(a, "rel_no_memory").model.mem_len, 0);
  EXPECT_EQ(variant(a, "shaw").model.max_rel_dist, 16);
  EXPECT_EQ(variant(a, "vanilla").eval.mode, EvalMode::kSliding);
  EXPECT_EQ(variant(a, "vanilla").run.output_dir, "runs/tiny_ablation/vanilla");
  for (const auto& [name, config] : a.variants) {
    EXPECT_EQ(config.train.max_steps, 10) << name;
    EXPECT_EQ(config.run.name, "tiny_ablation/" + name);
    EXPECT_NO_THROW(validate_experiment(config)) << name;  // run.name is a plain name
  }
}

}  // namespace
}  // namespace txl::config
