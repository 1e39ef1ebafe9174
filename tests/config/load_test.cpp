// Tests of load_experiment / parse_experiment_string: defaults, every field, base chains and
// precedence, and the errors a researcher sees for typos, wrong types and bad values.

#include <gtest/gtest.h>

#include "config_test_util.h"
#include "support/test_support.h"
#include "txl/config/load.h"
#include "txl/util/error.h"

namespace txl::config {
namespace {

using test::kEveryField;
using test::TempDir;
using test::write_yaml;

// The message of the txl::Error `load` throws ("" if it does not throw: the test then fails).
template <typename F>
std::string error_of(F&& load) {
  try {
    load();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a txl::Error";
  return "";
}

std::string load_error(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  return error_of([&] { parse_experiment_string(yaml, "x.yaml", overrides); });
}

TEST(LoadExperiment, EmptyOrCommentOnlyFileKeepsEveryDefault) {
  TempDir dir;
  for (const std::string& text : {std::string(""), std::string("# nothing yet\n")}) {
    const std::string path = write_yaml(dir, "empty.yaml", text);
    ExperimentConfig config = load_experiment(path);
    EXPECT_TRUE(same_settings(config, ExperimentConfig{}))
        << ::testing::PrintToString(diff_experiments(ExperimentConfig{}, config));
    EXPECT_EQ(config.source, path);
    EXPECT_EQ(config.model.n_layer, 4);
    EXPECT_EQ(config.train.schedule, "cosine");
  }
}

TEST(LoadExperiment, EveryFieldOfEverySectionLoads) {
  ExperimentConfig c = parse_experiment_string(kEveryField, "every.yaml");
  EXPECT_EQ(c.run.name, "e_run");
  EXPECT_EQ(c.run.output_dir, "out/e");
  EXPECT_EQ(c.run.seed, 99u);
  EXPECT_EQ(c.run.threads, 2);
  EXPECT_EQ(c.run.device, "cuda");
  EXPECT_EQ(c.run.precision, "bf16");
  EXPECT_EQ(c.run.log_interval, 7);
  EXPECT_EQ(c.run.dist_timeout, 45);

  EXPECT_EQ(c.data.corpus, "wikitext");
  EXPECT_EQ(c.data.path, "corpora/wt103");
  EXPECT_EQ(c.data.cache_dir, "cache/e");
  EXPECT_EQ(c.data.tokenizer.type, "word");
  EXPECT_EQ(c.data.tokenizer.model_path, "m/tok.model");
  EXPECT_EQ(c.data.tokenizer.vocab_size, 500);
  EXPECT_EQ(c.data.tokenizer.model_type, "bpe");
  EXPECT_DOUBLE_EQ(c.data.tokenizer.character_coverage, 0.9995);
  EXPECT_EQ(c.data.tokenizer.user_symbols, (std::vector<std::string>{"<sep>", "<cls>"}));
  EXPECT_EQ(c.data.tokenizer.max_sentences, 1000);
  EXPECT_EQ(c.data.tokenizer.min_count, 3);
  EXPECT_EQ(c.data.synthetic.seed, 8u);
  EXPECT_EQ(c.data.synthetic.documents, 100);
  EXPECT_EQ(c.data.synthetic.keys, 3);
  EXPECT_EQ(c.data.synthetic.gap, 17);
  EXPECT_EQ(c.data.synthetic.alphabet, 9);
  EXPECT_TRUE(c.data.document_mode);
  EXPECT_FALSE(c.data.add_eos);

  EXPECT_EQ(c.model.attn_type, "shaw");
  EXPECT_EQ(c.model.n_layer, 6);
  EXPECT_EQ(c.model.d_model, 128);
  EXPECT_EQ(c.model.n_head, 8);
  EXPECT_EQ(c.model.d_head, 16);
  EXPECT_EQ(c.model.d_inner, 512);
  EXPECT_DOUBLE_EQ(c.model.dropout, 0.2);
  EXPECT_DOUBLE_EQ(c.model.dropatt, 0.05);
  EXPECT_EQ(c.model.tgt_len, 64);
  EXPECT_EQ(c.model.mem_len, 96);
  EXPECT_EQ(c.model.ext_len, 8);
  EXPECT_EQ(c.model.clamp_len, 200);
  EXPECT_TRUE(c.model.same_length);
  EXPECT_TRUE(c.model.pre_norm);
  EXPECT_TRUE(c.model.untie_r);
  EXPECT_EQ(c.model.max_rel_dist, 32);
  EXPECT_EQ(c.model.max_positions, 2048);
  EXPECT_TRUE(c.model.allow_abs_with_memory);
  EXPECT_EQ(c.model.cutoffs, (std::vector<std::int64_t>{200, 400}));
  EXPECT_EQ(c.model.div_val, 2);
  EXPECT_FALSE(c.model.tie_weight);
  EXPECT_FALSE(c.model.tie_projs);
  EXPECT_EQ(c.model.init, "uniform");
  EXPECT_EQ(c.model.norm_init, "ones");
  EXPECT_DOUBLE_EQ(c.model.init_std, 0.05);
  EXPECT_DOUBLE_EQ(c.model.proj_init_std, 0.02);

  EXPECT_EQ(c.train.optimizer, "adamw");
  EXPECT_DOUBLE_EQ(c.train.lr, 1e-3);
  EXPECT_DOUBLE_EQ(c.train.weight_decay, 0.01);
  EXPECT_DOUBLE_EQ(c.train.momentum, 0.9);
  EXPECT_EQ(c.train.schedule, "inv_sqrt");
  EXPECT_EQ(c.train.warmup_steps, 100);
  EXPECT_DOUBLE_EQ(c.train.lr_min, 1e-5);
  EXPECT_DOUBLE_EQ(c.train.decay_rate, 0.25);
  EXPECT_EQ(c.train.plateau_patience, 2);
  EXPECT_DOUBLE_EQ(c.train.clip, 1.0);
  EXPECT_EQ(c.train.batch_size, 8);
  EXPECT_EQ(c.train.batch_chunk, 2);
  EXPECT_EQ(c.train.max_steps, 5000);
  EXPECT_EQ(c.train.max_tokens, 1000000);
  EXPECT_DOUBLE_EQ(c.train.max_minutes, 30.5);
  EXPECT_EQ(c.train.eval_interval, 250);
  EXPECT_EQ(c.train.checkpoint_interval, 500);
  EXPECT_EQ(c.train.patience, 3);
  EXPECT_TRUE(c.train.var_len);
  EXPECT_TRUE(c.train.roll);
  EXPECT_EQ(c.train.eval_max_tokens, 20000);

  EXPECT_EQ(c.eval.tgt_len, 48);
  EXPECT_EQ(c.eval.mem_len, 160);
  EXPECT_EQ(c.eval.clamp_len, 100);
  EXPECT_EQ(c.eval.same_length, 1);
  EXPECT_EQ(c.eval.mode, "sliding");
  EXPECT_EQ(c.eval.window, 64);
  EXPECT_EQ(c.eval.stride, 32);
  EXPECT_EQ(c.eval.warmup, 10);
  EXPECT_EQ(c.eval.batch_size, 2);
  EXPECT_EQ(c.eval.max_tokens, 5000);
  EXPECT_EQ(c.eval.splits, (std::vector<std::string>{"test"}));
  EXPECT_EQ(c.eval.sweep_mem_lens, (std::vector<int>{0, 64, 128}));

  // The file moves every registered key off its default, so none was forgotten above.
  EXPECT_EQ(diff_experiments(ExperimentConfig{}, c).size(), experiment_keys().size());
}

TEST(LoadExperiment, DottedKeysWorkAtAnyLevel) {
  ExperimentConfig c = parse_experiment_string(
      "model.n_layer: 3\ndata:\n  tokenizer.vocab_size: 500\n  synthetic: {gap: 9}\n", "x.yaml");
  EXPECT_EQ(c.model.n_layer, 3);
  EXPECT_EQ(c.data.tokenizer.vocab_size, 500);
  EXPECT_EQ(c.data.synthetic.gap, 9);
}

TEST(LoadExperiment, PrecedenceIsDefaultThenBaseThenFileThenSet) {
  TempDir dir;
  write_yaml(dir, "bases/root.yaml",
             "model: {n_layer: 2, d_model: 64, n_head: 2}\ntrain: {lr: 0.002}\n");
  // A chain: the middle base names the root relative to its own folder.
  write_yaml(dir, "bases/mid.yaml", "base: root.yaml\nmodel: {n_layer: 3, d_model: 96}\n");
  const std::string path =
      write_yaml(dir, "exp.yaml", "base: bases/mid.yaml\nmodel:\n  n_layer: 5\n");

  ExperimentConfig file_only = load_experiment(path);
  EXPECT_EQ(file_only.model.n_layer, 5);        // file beats both bases
  EXPECT_EQ(file_only.model.d_model, 96);       // mid beats root
  EXPECT_EQ(file_only.model.n_head, 2);         // root beats the default
  EXPECT_DOUBLE_EQ(file_only.train.lr, 0.002);  // only root sets it
  EXPECT_EQ(file_only.model.d_inner, 1024);     // nobody sets it: default
  EXPECT_EQ(file_only.source, path);

  ExperimentConfig with_set = load_experiment(
      path, {"model.n_layer=7", "model.cutoffs=[2000,6000]", "train.lr=1e-4", "model.n_layer=8"});
  EXPECT_EQ(with_set.model.n_layer, 8);  // --set beats the file; the later --set wins
  EXPECT_EQ(with_set.model.cutoffs, (std::vector<std::int64_t>{2000, 6000}));
  EXPECT_DOUBLE_EQ(with_set.train.lr, 1e-4);
  EXPECT_EQ(with_set.model.d_model, 96);
}

TEST(LoadExperiment, SetAcceptsSectionMappingsAndEmptyStrings) {
  ExperimentConfig c =
      parse_experiment_string("run: {output_dir: somewhere}\n", "x.yaml",
                              {"model={n_layer: 2, pre_norm: true}", "run.output_dir="});
  EXPECT_EQ(c.model.n_layer, 2);
  EXPECT_TRUE(c.model.pre_norm);
  EXPECT_EQ(c.run.output_dir, "");
}

TEST(LoadExperiment, BaseCycleIsReportedWithTheChain) {
  TempDir dir;
  write_yaml(dir, "a.yaml", "base: b.yaml\n");
  write_yaml(dir, "b.yaml", "base: a.yaml\n");
  const std::string message = error_of([&] { load_experiment((dir / "a.yaml").string()); });
  EXPECT_NE(message.find("base cycle"), std::string::npos) << message;
  const std::string a = (dir / "a.yaml").string();
  const std::string b = (dir / "b.yaml").string();
  EXPECT_NE(message.find(a + " -> " + b + " -> " + a), std::string::npos) << message;
  EXPECT_NE(message.find(b + ":1:7"), std::string::npos) << message;  // the offending base:

  write_yaml(dir, "self.yaml", "base: ./self.yaml\n");
  TXL_EXPECT_THROW_WITH(load_experiment((dir / "self.yaml").string()), "base cycle");
}

TEST(LoadExperiment, MissingFilesAreNamed) {
  TempDir dir;
  const std::string missing = (dir / "nope.yaml").string();
  TXL_EXPECT_THROW_WITH(load_experiment(missing), "experiment file not found: " + missing);
  const std::string path = write_yaml(dir, "exp.yaml", "# comment\nbase: gone.yaml\n");
  const std::string message = error_of([&] { load_experiment(path); });
  EXPECT_NE(message.find(path + ":2:7: base file not found: " + (dir / "gone.yaml").string()),
            std::string::npos)
      << message;
}

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
            "shaw | vanilla | vanilla_learned");
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
      {"data: {corpus: text}\n", "data.path: corpus 'text' needs the path"},
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

TEST(LoadExperiment, CommittedFixturesLoad) {
  const auto fixtures = test::source_dir() / "tests/config/fixtures";
  ExperimentConfig tiny = load_experiment((fixtures / "tiny.yaml").string());
  EXPECT_EQ(tiny.run.name, "tiny_xl");  // the file
  EXPECT_EQ(tiny.model.d_model, 32);    // its base
  EXPECT_EQ(tiny.eval.mem_len, 32);
  EXPECT_EQ(tiny.data.corpus, "synthetic");
  EXPECT_EQ(tiny.train.optimizer, "adam");  // default
}

TEST(ValidateExperiment, ChecksConfigsBuiltInCode) {
  EXPECT_NO_THROW(validate_experiment(ExperimentConfig{}));
  ExperimentConfig c;
  c.model.n_head = 0;
  c.train.optimizer = "adagrad";
  const std::string message = error_of([&] { validate_experiment(c); });
  EXPECT_NE(message.find("model.n_head: must be >= 1, got 0"), std::string::npos) << message;
  EXPECT_NE(message.find("train.optimizer: 'adagrad' is not one of adam | adamw | sgd"),
            std::string::npos)
      << message;
}

}  // namespace
}  // namespace txl::config
