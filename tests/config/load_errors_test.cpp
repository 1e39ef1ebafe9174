// The errors of loading an experiment: unknown keys, wrong types, bad values, invalid YAML.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "config_test_util.h"
#include "load_test_support.h"
#include "support/test_support.h"
#include "txl/config/load.h"

namespace txl::config {
namespace {

using load_test::error_of;
using load_test::load_error;
using test::TempDir;
using test::write_yaml;

TEST(LoadExperiment, UnknownTopLevelKeyHasPositionAndSuggestion) {
  EXPECT_EQ(load_error("run: {seed: 1}\nmodle:\n  n_layer: 2\n"),
            "x.yaml:2:1: unknown key 'modle'; did you mean 'model'?");
}

TEST(LoadExperiment, UnknownNestedKeyHasPositionAndSuggestion) {
  TempDir dir;
  const std::string path = write_yaml(dir, "x.yaml", "model:\n  d_model: 64\n  n_layers: 3\n");
  EXPECT_EQ(error_of([&] { load_experiment(path); }),
            path + ":3:3: unknown key 'model.n_layers'; did you mean 'model.n_layer'?");
  EXPECT_EQ(load_error("data:\n  tokenizer:\n    vocab_sise: 10\n"),
            "x.yaml:3:5: unknown key 'data.tokenizer.vocab_sise'; did you mean "
            "'data.tokenizer.vocab_size'?");
}

TEST(LoadExperiment, UnknownOverrideKeyNamesTheSetFlag) {
  EXPECT_EQ(load_error("", {"model.n_layers=3"}),
            "--set model.n_layers=3: unknown key 'model.n_layers'; did you mean 'model.n_layer'?");
  TXL_EXPECT_THROW_WITH(parse_experiment_string("", "x.yaml", {"model.n_layer"}),
                        "--set model.n_layer: expected key.path=value");
}

TEST(LoadExperiment, KeyInTheWrongSectionPointsToTheRightOne) {
  EXPECT_EQ(load_error("train:\n  n_layer: 2\n"),
            "x.yaml:2:3: unknown key 'train.n_layer'; did you mean 'model.n_layer'?");
  EXPECT_EQ(load_error("lr: 0.1\n"), "x.yaml:1:1: unknown key 'lr'; did you mean 'train.lr'?");
  EXPECT_EQ(load_error("data:\n  tokenizer: {seed: 3}\n"),
            "x.yaml:2:15: unknown key 'data.tokenizer.seed'; did you mean 'data.synthetic.seed'?");
}

TEST(LoadExperiment, UnknownKeyWithoutCloseMatchListsTheSection) {
  const std::string message = load_error("model:\n  wibble: 1\n");
  EXPECT_NE(message.find("x.yaml:2:3: unknown key 'model.wibble'; valid keys in 'model': "
                         "attn_type, n_layer, d_model"),
            std::string::npos)
      << message;
  EXPECT_NE(load_error("variants: {}\n").find("ablation file"), std::string::npos);
  // Abbreviations point to the full name.
  EXPECT_EQ(load_error("model: {attn: xl}\n"),
            "x.yaml:1:9: unknown key 'model.attn'; did you mean 'model.attn_type'?");
  EXPECT_EQ(load_error("train: {schedule: cos}\n"),
            "x.yaml:1:19: train.schedule: 'cos' is not one of cosine | inv_sqrt | constant | "
            "plateau; did you mean 'cosine'?");
  // base: is a file key, not something --set can change.
  EXPECT_EQ(load_error("", {"base=other.yaml"}),
            "--set base=other.yaml: unknown key 'base'; valid keys at the top: run, data, model, "
            "train, eval");
}

TEST(LoadExperiment, WrongTypesNameKeyPositionAndValue) {
  EXPECT_EQ(load_error("model:\n  d_model: abc\n"),
            "x.yaml:2:12: model.d_model: expected an integer, got 'abc'");
  EXPECT_EQ(load_error("model: {n_layer: 2.5}\n"),
            "x.yaml:1:18: model.n_layer: expected an integer, got '2.5'");
  EXPECT_EQ(load_error("model: {n_layer: \"4\"}\n"),
            "x.yaml:1:18: model.n_layer: expected an integer, got the quoted string '4'");
  EXPECT_EQ(load_error("model: {n_layer: 3000000000}\n"),
            "x.yaml:1:18: model.n_layer: expected an integer between -2147483648 and "
            "2147483647, got '3000000000'");
  EXPECT_EQ(load_error("run: {seed: -1}\n"),
            "x.yaml:1:13: run.seed: expected a non-negative integer, got '-1'");
  EXPECT_EQ(load_error("model: {pre_norm: maybe}\n"),
            "x.yaml:1:19: model.pre_norm: expected true or false, got 'maybe'");
  EXPECT_EQ(load_error("train: {lr: fast}\n"),
            "x.yaml:1:13: train.lr: expected a number, got 'fast'");
  EXPECT_EQ(load_error("train: {lr: .nan}\n"),
            "x.yaml:1:13: train.lr: expected a number, got '.nan'");
  EXPECT_EQ(load_error("train: {max_minutes: .inf}\n"),
            "x.yaml:1:22: train.max_minutes: expected a number, got '.inf'");
  EXPECT_EQ(
      load_error("model: {cutoffs: 2000}\n"),
      "x.yaml:1:18: model.cutoffs: expected a list of integers like [2000, 6000], got '2000'");
  EXPECT_EQ(load_error("model: {cutoffs: [2000, x]}\n"),
            "x.yaml:1:18: model.cutoffs: item 2: expected an integer, got 'x'");
  EXPECT_EQ(load_error("run: {name: [a, b]}\n"),
            "x.yaml:1:13: run.name: expected a string, got a sequence");
  EXPECT_EQ(load_error("model: 3\n"),
            "x.yaml:1:8: model: expected a mapping of model keys, got '3'");
  EXPECT_EQ(load_error("model: {n_layer: }\n"),
            "x.yaml:1:9: model.n_layer: expected an integer, got nothing");
  EXPECT_EQ(load_error("- a\n- b\n"),
            "x.yaml:1:1: expected a mapping of sections (run, data, model, train, eval), got a "
            "sequence");
  EXPECT_EQ(load_error("", {"model.d_model=abc"}),
            "--set model.d_model=abc: model.d_model: expected an integer, got 'abc'");
}

TEST(LoadExperiment, NumbersAcceptTheUsualSpellings) {
  ExperimentConfig c = parse_experiment_string(
      "train: {max_tokens: 1e6, lr: 3e-4, clip: 1, var_len: yes, roll: False}\n", "x.yaml");
  EXPECT_EQ(c.train.max_tokens, 1000000);
  EXPECT_DOUBLE_EQ(c.train.lr, 3e-4);
  EXPECT_DOUBLE_EQ(c.train.clip, 1.0);
  EXPECT_TRUE(c.train.var_len);
  EXPECT_FALSE(c.train.roll);
}

TEST(LoadExperiment, EnumErrorsListTheAllowedValues) {
  EXPECT_EQ(load_error("train:\n  schedule: cosin\n"),
            "x.yaml:2:13: train.schedule: 'cosin' is not one of cosine | inv_sqrt | constant | "
            "plateau; did you mean 'cosine'?");
  EXPECT_EQ(load_error("eval: {splits: [valid, dev]}\n"),
            "x.yaml:1:16: eval.splits: item 2: 'dev' is not one of train | valid | test");
  EXPECT_EQ(load_error("", {"model.attn_type=transformer"}),
            "--set model.attn_type=transformer: model.attn_type: 'transformer' is not one of xl | "
            "shaw | vanilla | vanilla_learned | rope | alibi | t5");
}

TEST(LoadExperiment, OutOfRangeValuesAreRejectedWhereTheyWereSet) {
  struct Case {
    std::string yaml;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"model:\n  n_layer: 0\n", "x.yaml:2:12: model.n_layer: must be >= 1, got 0"},
      {"model: {n_head: 0}\n", "x.yaml:1:17: model.n_head: must be >= 1, got 0"},
      {"model: {d_model: -4}\n", "model.d_model: must be >= 1, got -4"},
      {"model: {dropout: 1.0}\n", "model.dropout: must be in [0.0, 1.0), got 1.0"},
      {"model: {dropatt: -0.1}\n", "model.dropatt: must be in [0.0, 1.0), got -0.1"},
      {"model: {tgt_len: 0}\n", "model.tgt_len: must be >= 1, got 0"},
      {"model: {mem_len: -1}\n", "model.mem_len: must be >= 0, got -1"},
      {"model: {cutoffs: [600, 200]}\n", "model.cutoffs: must increase strictly"},
      {"train: {lr: 0}\n", "x.yaml:1:13: train.lr: must be > 0, got 0.0"},
      {"train: {batch_size: 0}\n", "train.batch_size: must be >= 1, got 0"},
      {"train:\n  batch_size: 16\n  batch_chunk: 3\n",
       "x.yaml:3:16: train.batch_chunk: must divide train.batch_size (16), got 3"},
      {"train: {max_steps: 0, max_tokens: 0, max_minutes: 0}\n", "training would never stop"},
      {"data: {tokenizer: {vocab_size: 0}}\n",
       "x.yaml:1:32: data.tokenizer.vocab_size: must be > 0, got 0"},
      {"eval: {same_length: 2}\n", "eval.same_length: must be -1 (as model.same_length), 0 or 1"},
      {"eval: {mode: sliding, window: 16, stride: 17}\n",
       "eval.stride: must be <= the sliding window (16), got 17"},
      {"model: {attn_type: vanilla}\n",
       "model.mem_len: attn_type vanilla uses absolute positions and needs mem_len 0, got 128"},
      {"model: {attn_type: vanilla_learned, mem_len: 0, tgt_len: 512, max_positions: 256}\n",
       "model.max_positions: vanilla_learned needs tgt_len + mem_len + ext_len = 512 positions, "
       "got 256"},
      {"model: {attn_type: vanilla_learned, mem_len: 0, max_positions: 256}\n"
       "eval: {mode: sliding, window: 300, stride: 1}\n",
       "x.yaml:2:31: eval.window: vanilla_learned has 256 positions (model.max_positions) but "
       "evaluation needs 300"},
      {"train: {bptt_segments: -1}\n", "train.bptt_segments: must be >= 0, got -1"},
      {"model: {mem_len: 0, cmem_len: 4}\n",
       "model.cmem_len: compressive memory compresses what leaves the memory and needs "
       "model.mem_len > 0"},
      {"model: {attn_type: vanilla, allow_abs_with_memory: true, cmem_len: 4}\n",
       "model.cmem_len: compressive memory needs relative positions"},
      {"model: {cmem_rate: 0}\n", "model.cmem_rate: must be >= 1, got 0"},
      {"model: {cmem_compress: zip}\n", "model.cmem_compress"},
      {"model: {mem_len: 0}\ntrain: {bptt_segments: 2}\n",
       "train.bptt_segments: back-propagation through segments needs a memory (model.mem_len > "
       "0 or model.mem_tokens > 0), got 2 with mem_len 0"},
      {"model: {mem_tokens: -1}\n", "model.mem_tokens: must be >= 0, got -1"},
      {"model: {attn_type: vanilla, allow_abs_with_memory: true, mem_tokens: 2}\n"
       "train: {bptt_segments: 1}\n",
       "model.mem_tokens: memory tokens need relative positions"},
      {"model: {mem_tokens: 2}\n",
       "model.mem_tokens: memory tokens are written at a segment's end and learn only from the "
       "segments that read them; with train.bptt_segments 0 nothing would train them"},
      {"model: {attn_type: rope, clamp_len: 64}\n",
       "model.clamp_len: attn_type rope has no distances to clamp; needs -1, got 64"},
      {"model: {attn_type: rope, d_head: 33}\n",
       "model.d_head: attn_type rope turns pairs of dimensions and needs an even d_head, got 33"},
      {"model: {attn_type: rope}\neval: {clamp_len: 8}\n",
       "eval.clamp_len: attn_type rope has no distances to clamp; needs -1 (none) or -2 (the "
       "model's), got 8"},
      {"model: {attn_type: t5, t5_buckets: 1}\n", "model.t5_buckets: must be >= 2, got 1"},
      {"model: {attn_type: t5, t5_buckets: 32, t5_max_distance: 16}\n",
       "model.t5_max_distance: must be above t5_buckets / 2 = 16 (the distances with a bucket "
       "each), got 16"},
      {"data: {corpus: text}\n", "data.path: corpus 'text' needs the path"},
      {"train: {divergence_factor: -1}\n",
       "x.yaml:1:28: train.divergence_factor: must be >= 0.0, got -1.0"},
      {"train: {divergence_patience: 0}\n",
       "x.yaml:1:30: train.divergence_patience: must be >= 1, got 0"},
  };
  for (const Case& c : cases) {
    const std::string message = load_error(c.yaml);
    EXPECT_NE(message.find(c.message), std::string::npos) << "yaml:\n"
                                                          << c.yaml << "message: " << message;
  }
  // A bad value from --set names the override.
  EXPECT_EQ(load_error("", {"model.n_layer=0"}),
            "--set model.n_layer=0: model.n_layer: must be >= 1, got 0");
  // The same value is fine once the other half of the rule agrees.
  EXPECT_NO_THROW(parse_experiment_string("train: {batch_size: 15, batch_chunk: 3}\n", "x.yaml"));
  EXPECT_NO_THROW(parse_experiment_string(
      "model: {attn_type: vanilla, mem_len: 0}\neval: {mem_len: 0}\n", "x.yaml"));
  // divergence_factor 0 turns the guard off.
  EXPECT_EQ(
      parse_experiment_string("train: {divergence_factor: 0}\n", "x.yaml").train.divergence_factor,
      0.0);
}

TEST(LoadExperiment, AllProblemsOfAFileAreReportedTogether) {
  const std::string message =
      load_error("modle: {}\nmodel:\n  n_layers: 2\n  d_model: abc\ntrain: {schedule: cosin}\n");
  EXPECT_NE(message.find("x.yaml:1:1: unknown key 'modle'"), std::string::npos) << message;
  EXPECT_NE(message.find("\nx.yaml:3:3: unknown key 'model.n_layers'"), std::string::npos)
      << message;
  EXPECT_NE(message.find("\nx.yaml:4:12: model.d_model: expected an integer"), std::string::npos)
      << message;
  EXPECT_NE(message.find("\nx.yaml:5:19: train.schedule: 'cosin'"), std::string::npos) << message;
}

TEST(LoadExperiment, DuplicateKeysAreErrors) {
  EXPECT_EQ(load_error("model:\n  n_layer: 2\n  n_layer: 3\n"),
            "x.yaml:3:3: duplicate key 'model.n_layer' (first at x.yaml:2:3)");
  EXPECT_EQ(load_error("model.n_layer: 2\nmodel:\n  n_layer: 3\n"),
            "x.yaml:3:3: 'model.n_layer' is set twice (first at x.yaml:1:16)");
}

TEST(LoadExperiment, InvalidYamlNamesThePosition) {
  const std::string message = load_error("model: {n_layer: 2\n");
  EXPECT_EQ(message.rfind("x.yaml:", 0), 0u) << message;
  EXPECT_NE(message.find("invalid YAML"), std::string::npos) << message;
}

// Found by fuzz_experiment: a byte that is not UTF-8 came back from dump_experiment as U+FFFD,
// so dump -> parse changed the experiment. Such text is refused; UTF-8 of every length survives.
TEST(LoadExperiment, TextMustBeUtf8) {
  std::string message = load_error("run:\n  name: x\n  output_dir: \"runs/\xE1t\"\n");
  EXPECT_EQ(message.rfind("x.yaml:3: byte 36 is not UTF-8", 0), 0u) << message;
  for (const char* bad : {"\xC0\xAF", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\xE2\x98"}) {
    message = load_error(std::string("run:\n  output_dir: r") + bad + "\n");
    EXPECT_NE(message.find("is not UTF-8"), std::string::npos) << message;
  }
  message = load_error("", {std::string("run.output_dir=r\xFF")});
  EXPECT_NE(message.find("--set run.output_dir=r"), std::string::npos) << message;
  EXPECT_NE(message.find("the value is not UTF-8 text"), std::string::npos) << message;
  const ExperimentConfig c = parse_experiment_string(
      "run:\n  output_dir: \"r/\xC3\xA9\xE2\x98\x83\xF0\x9F\x98\x80\"\n", "x.yaml");
  EXPECT_EQ(c.run.output_dir, "r/\xC3\xA9\xE2\x98\x83\xF0\x9F\x98\x80");
  EXPECT_EQ(parse_experiment_string(dump_experiment(c), "d.yaml").run.output_dir, c.run.output_dir);
}

}  // namespace
}  // namespace txl::config
