// Tests of dump_experiment, fingerprint and diff_experiments: the dump is complete, ordered and
// reads back to the same experiment; every key reaches its own field.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "config_test_util.h"
#include "support/test_support.h"
#include "txl/config/load.h"

namespace txl::config {
namespace {

using test::kEveryField;

ExperimentConfig round_trip(const ExperimentConfig& config) {
  return parse_experiment_string(dump_experiment(config), "dump.yaml");
}

TEST(DumpExperiment, DefaultRoundTrips) {
  const ExperimentConfig defaults;
  ExperimentConfig back = round_trip(defaults);
  EXPECT_TRUE(same_settings(back, defaults))
      << ::testing::PrintToString(diff_experiments(defaults, back));
}

TEST(DumpExperiment, NonDefaultConfigRoundTripsExactly) {
  ExperimentConfig config = parse_experiment_string(kEveryField, "every.yaml");
  // Strings YAML would otherwise read as something else, and doubles without a short form.
  config.run.name = "yes";
  config.run.output_dir = "";
  config.data.path = "a: b #c";
  config.data.cache_dir = "123";
  config.data.tokenizer.user_symbols = {"null", "a, b", "\"quoted\"", "~", "", "1e5"};
  config.model.dropout = 1.0 / 3.0;
  config.model.init_std = 1e-7;
  config.train.lr = 0.1 + 0.2;  // 0.30000000000000004
  config.train.max_minutes = 12345678.9;
  config.run.seed = std::numeric_limits<std::uint64_t>::max();
  config.model.cutoffs = {1, 2, 9000000000};
  config.eval.sweep_mem_lens = {};

  const std::string text = dump_experiment(config);
  ExperimentConfig back = parse_experiment_string(text, "dump.yaml");
  EXPECT_TRUE(same_settings(back, config))
      << ::testing::PrintToString(diff_experiments(config, back)) << "\n"
      << text;
  // same_settings compares canonical text; check a few values bit for bit too.
  EXPECT_EQ(back.train.lr, config.train.lr);
  EXPECT_EQ(back.model.dropout, config.model.dropout);
  EXPECT_EQ(back.run.name, "yes");
  EXPECT_EQ(back.data.path, "a: b #c");
  EXPECT_EQ(back.data.tokenizer.user_symbols, config.data.tokenizer.user_symbols);
  EXPECT_EQ(back.run.seed, config.run.seed);
  EXPECT_EQ(back.model.cutoffs, config.model.cutoffs);
  EXPECT_EQ(dump_experiment(back), text);  // the dump is a fixed point
}

// Nested: "data.tokenizer.vocab_size" is written as "    vocab_size: " under "  tokenizer:".
std::string dump_line(const std::string& key) {
  const std::size_t depth = static_cast<std::size_t>(std::count(key.begin(), key.end(), '.'));
  return "\n" + std::string(2 * depth, ' ') + key.substr(key.rfind('.') + 1) + ":";
}

// The keys added after experiments were stored: left out of the dump at their default, so that
// older dumps and fingerprints stay as they were.
const std::vector<std::string> kAddedLater = {
    "model.final_norm",    "model.mem_init",         "model.cmem_len",        "model.cmem_rate",
    "model.cmem_compress", "model.cmem_loss_weight", "model.mem_tokens",      "train.bptt_segments",
    "eval.mem_init",       "model.t5_buckets",       "model.t5_max_distance", "model.knn_layer",
    "model.knn_topk",      "model.knn_size"};

bool added_later(const std::string& key) {
  return std::find(kAddedLater.begin(), kAddedLater.end(), key) != kAddedLater.end();
}

TEST(DumpExperiment, WritesEveryKeyInStructOrderAsNestedYaml) {
  const std::string text = dump_experiment(ExperimentConfig{});
  std::size_t position = 0;
  for (const std::string& key : experiment_keys()) {
    if (added_later(key)) {
      EXPECT_EQ(text.find(dump_line(key) + " "), std::string::npos) << key << " at its default";
      continue;
    }
    const std::size_t found = text.find(dump_line(key), position);
    ASSERT_NE(found, std::string::npos) << "key " << key << " missing or out of order in\n" << text;
    position = found + 1;
  }
  // Set away from their defaults, they are written too, in struct order.
  const std::string every = dump_experiment(parse_experiment_string(kEveryField, "every.yaml"));
  position = 0;
  for (const std::string& key : experiment_keys()) {
    const std::size_t found = every.find(dump_line(key), position);
    ASSERT_NE(found, std::string::npos) << "key " << key << " missing or out of order in\n"
                                        << every;
    position = found + 1;
  }
  EXPECT_EQ(text.rfind("run:\n", 0), 0u) << text;
  EXPECT_NE(text.find("\n  tokenizer:\n    type: sentencepiece\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\n  dropout: 0.1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\n  lr: 0.00025\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\n  output_dir: \"\"\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\n  splits: [valid, test]\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\n  divergence_factor: 3.0\n  divergence_patience: 20\n"), std::string::npos)
      << text;
  EXPECT_EQ(text.find("source"), std::string::npos) << text;
}

// Each key, set alone, changes exactly its own field: no key is ignored, none writes another
// key's member, and the fingerprint sees every one of them.
TEST(DumpExperiment, EveryKeyReachesItsOwnFieldAndTheFingerprint) {
  const ExperimentConfig every = parse_experiment_string(kEveryField, "every.yaml");
  const ExperimentConfig defaults;
  const std::vector<std::string> keys = experiment_keys();
  const std::vector<std::string> lines = diff_experiments(every, defaults);
  ASSERT_EQ(lines.size(), keys.size());
  const std::string every_fingerprint = fingerprint(every);
  for (std::size_t i = 0; i < keys.size(); ++i) {
    // "model.n_layer: 6 -> 4": set the default value back on top of the every-field config
    // (with a companion the rules tie it to, kCompanions, and then both lines differ).
    const std::string& line = lines[i];
    ASSERT_EQ(line.rfind(keys[i] + ": ", 0), 0u) << line;
    std::vector<std::size_t> changed;
    ExperimentConfig one = parse_experiment_string(
        kEveryField, "every.yaml", txl::test::back_to_default(keys, lines, i, &changed));
    std::sort(changed.begin(), changed.end());
    std::vector<std::string> expected;
    for (std::size_t j : changed) expected.push_back(lines[j]);
    EXPECT_EQ(diff_experiments(every, one), expected) << keys[i];
    EXPECT_NE(fingerprint(one), every_fingerprint) << keys[i];
  }
}

TEST(Fingerprint, StableForEqualSettingsAndIgnoresSource) {
  ExperimentConfig a = parse_experiment_string(kEveryField, "a.yaml");
  ExperimentConfig b = parse_experiment_string(kEveryField, "b.yaml");
  EXPECT_EQ(fingerprint(a), fingerprint(b));
  EXPECT_EQ(fingerprint(a).size(), 16u);
  EXPECT_TRUE(same_settings(a, b));
  EXPECT_EQ(fingerprint(round_trip(a)), fingerprint(a));
  b.model.dropout = std::nextafter(b.model.dropout, 1.0);  // the smallest possible change
  EXPECT_NE(fingerprint(a), fingerprint(b));
  EXPECT_FALSE(same_settings(a, b));
}

TEST(DiffExperiments, ListsChangedKeysInOrder) {
  ExperimentConfig before;
  ExperimentConfig after;
  after.model.n_layer = 6;
  after.run.name = "b";
  after.eval.splits = {"test"};
  EXPECT_EQ(diff_experiments(before, after),
            (std::vector<std::string>{"run.name: 'experiment' -> 'b'", "model.n_layer: 4 -> 6",
                                      "eval.splits: [\"valid\", \"test\"] -> [\"test\"]"}));
  EXPECT_TRUE(diff_experiments(before, before).empty());
}

}  // namespace
}  // namespace txl::config
