// Tests of load_experiment / parse_experiment_string: defaults, every field, base chains and
// precedence, and the errors a researcher sees for typos, wrong types and bad values.

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>

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

// How a --set text over 80 bytes appears in a location: its first 60 bytes and its size.
std::string shortened(const std::string& text) {
  return text.size() <= 80 ? text
                           : text.substr(0, 60) + "... (" + std::to_string(text.size()) + " bytes)";
}

// An empty file once trained the built-in default experiment as if it had been asked for.
TEST(LoadExperiment, FileWithoutSettingsIsAnError) {
  TempDir dir;
  for (const char* text : {"", "# nothing yet\n", "\n\n", "model:\n", "model: {}\n"}) {
    const std::string path = write_yaml(dir, "empty.yaml", text);
    const std::string expected =
        path +
        ": holds no settings (it is empty, or only comments or empty sections); an "
        "experiment file needs at least one setting or a base:";
    EXPECT_EQ(error_of([&] { load_experiment(path); }), expected) << "text: " << text;
    // --set does not make the file right: it was most likely not the file meant.
    EXPECT_EQ(error_of([&] { load_experiment(path, {"model.n_layer=2"}); }), expected);
  }
}

TEST(LoadExperiment, FileOfOnlyABaseInheritsEverything) {
  TempDir dir;
  const std::string base = write_yaml(dir, "base.yaml", "model: {n_layer: 3}\ntrain: {lr: 0.01}\n");
  const std::string path = write_yaml(dir, "exp.yaml", "# the base as it is\nbase: base.yaml\n");
  const ExperimentConfig config = load_experiment(path);
  EXPECT_EQ(config.model.n_layer, 3);
  EXPECT_TRUE(same_settings(config, load_experiment(base)));
  EXPECT_FALSE(same_settings(config, ExperimentConfig{}));
  EXPECT_EQ(config.source, path);
}

TEST(LoadExperiment, EmptyBaseFileIsAnErrorNamingItAndItsBase) {
  TempDir dir;
  const std::string empty = write_yaml(dir, "empty.yaml", "# to do\n");
  const std::string path = write_yaml(dir, "exp.yaml", "base: empty.yaml\nmodel: {n_layer: 3}\n");
  EXPECT_EQ(error_of([&] { load_experiment(path); }),
            empty +
                ": holds no settings (it is empty, or only comments or empty sections); it is "
                "the base named at " +
                path +
                ":1:7; an experiment file needs at least one "
                "setting or a base:");
}

// Text (not a file) may hold nothing: txl-bench builds experiments from "{}" and --set.
TEST(ParseExperimentString, EmptyTextKeepsEveryDefault) {
  for (const std::string& text : {std::string(""), std::string("{}"), std::string("# none\n")}) {
    ExperimentConfig config = parse_experiment_string(text, "x.yaml");
    EXPECT_TRUE(same_settings(config, ExperimentConfig{}))
        << ::testing::PrintToString(diff_experiments(ExperimentConfig{}, config));
    EXPECT_EQ(config.source, "x.yaml");
  }
  EXPECT_EQ(parse_experiment_string("{}", "", {"model.n_layer=2"}).model.n_layer, 2);
}

TEST(LoadExperiment, EveryFieldOfEverySectionLoads) {
  ExperimentConfig c = parse_experiment_string(kEveryField, "every.yaml");
  EXPECT_EQ(c.run.name, "e_run");
  EXPECT_EQ(c.run.output_dir, "out/e");
  EXPECT_EQ(c.run.seed, 99u);
  EXPECT_EQ(c.run.threads, 2);
  EXPECT_EQ(c.run.device, Device::kCuda);
  EXPECT_EQ(c.run.precision, Precision::kBf16);
  EXPECT_EQ(c.run.log_interval, 7);
  EXPECT_EQ(c.run.dist_timeout, 45);

  EXPECT_EQ(c.data.corpus, Corpus::kWikitext);
  EXPECT_EQ(c.data.path, "corpora/wt103");
  EXPECT_EQ(c.data.cache_dir, "cache/e");
  EXPECT_EQ(c.data.tokenizer.type, TokenizerType::kWord);
  EXPECT_EQ(c.data.tokenizer.model_path, "m/tok.model");
  EXPECT_EQ(c.data.tokenizer.vocab_size, 500);
  EXPECT_EQ(c.data.tokenizer.model_type, SentencePieceModel::kBpe);
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

  EXPECT_EQ(c.model.attn_type, AttnType::kShaw);
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
  EXPECT_FALSE(c.model.final_norm);
  EXPECT_TRUE(c.model.untie_r);
  EXPECT_EQ(c.model.max_rel_dist, 32);
  EXPECT_EQ(c.model.max_positions, 2048);
  EXPECT_TRUE(c.model.allow_abs_with_memory);
  EXPECT_EQ(c.model.cutoffs, (std::vector<std::int64_t>{200, 400}));
  EXPECT_EQ(c.model.div_val, 2);
  EXPECT_FALSE(c.model.tie_weight);
  EXPECT_FALSE(c.model.tie_projs);
  EXPECT_EQ(c.model.init, WeightInit::kUniform);
  EXPECT_EQ(c.model.norm_init, NormInit::kOnes);
  EXPECT_DOUBLE_EQ(c.model.init_std, 0.05);
  EXPECT_DOUBLE_EQ(c.model.proj_init_std, 0.02);
  EXPECT_EQ(c.model.mem_init, MemInit::kZeros);
  EXPECT_EQ(c.model.cmem_len, 8);
  EXPECT_EQ(c.model.cmem_rate, 2);
  EXPECT_EQ(c.model.cmem_compress, Compression::kMax);
  EXPECT_DOUBLE_EQ(c.model.cmem_loss_weight, 0.5);
  EXPECT_EQ(c.model.mem_tokens, 3);

  EXPECT_EQ(c.train.optimizer, Optimizer::kAdamW);
  EXPECT_DOUBLE_EQ(c.train.lr, 1e-3);
  EXPECT_DOUBLE_EQ(c.train.weight_decay, 0.01);
  EXPECT_DOUBLE_EQ(c.train.momentum, 0.9);
  EXPECT_EQ(c.train.schedule, Schedule::kInvSqrt);
  EXPECT_EQ(c.train.warmup_steps, 100);
  EXPECT_DOUBLE_EQ(c.train.lr_min, 1e-5);
  EXPECT_DOUBLE_EQ(c.train.decay_rate, 0.25);
  EXPECT_EQ(c.train.plateau_patience, 2);
  EXPECT_DOUBLE_EQ(c.train.clip, 1.0);
  EXPECT_EQ(c.train.batch_size, 8);
  EXPECT_EQ(c.train.batch_chunk, 2);
  EXPECT_EQ(c.train.bptt_segments, 1);
  EXPECT_EQ(c.train.max_steps, 5000);
  EXPECT_EQ(c.train.max_tokens, 1000000);
  EXPECT_DOUBLE_EQ(c.train.max_minutes, 30.5);
  EXPECT_EQ(c.train.eval_interval, 250);
  EXPECT_EQ(c.train.checkpoint_interval, 500);
  EXPECT_EQ(c.train.patience, 3);
  EXPECT_TRUE(c.train.var_len);
  EXPECT_TRUE(c.train.roll);
  EXPECT_EQ(c.train.eval_max_tokens, 20000);
  EXPECT_DOUBLE_EQ(c.train.divergence_factor, 5.0);
  EXPECT_EQ(c.train.divergence_patience, 7);

  EXPECT_EQ(c.eval.tgt_len, 48);
  EXPECT_EQ(c.eval.mem_len, 160);
  EXPECT_EQ(c.eval.clamp_len, 100);
  EXPECT_EQ(c.eval.same_length, 1);
  EXPECT_EQ(c.eval.mem_init, EvalMemInit::kEmpty);
  EXPECT_EQ(c.eval.mode, EvalMode::kSliding);
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
            "shaw | vanilla | vanilla_learned | rope | alibi");
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

// ------------------------------------------------------------------ long keys and values

// A 10 MB value used to be echoed whole. Quoted texts over 80 bytes show their first 60 bytes
// and their size, wherever a key or value is quoted.
TEST(LoadExperiment, HugeValuesAndKeysAreQuotedShortened) {
  const std::string huge(10 << 20, 'x');
  EXPECT_EQ(load_error("train: {lr: " + huge + "}\n"),
            "x.yaml:1:13: train.lr: expected a number, got '" + std::string(60, 'x') +
                "...' (10485760 bytes)");
  // 1 MB from here on: the same property at a tenth of the parsing time.
  const std::string big(1 << 20, 'x');
  const std::string shown = "'" + std::string(60, 'x') + "...' (1048576 bytes)";
  EXPECT_EQ(load_error("train: {schedule: " + big + "}\n"),
            "x.yaml:1:19: train.schedule: " + shown +
                " is not one of cosine | inv_sqrt | constant | plateau");
  EXPECT_EQ(
      load_error("run: {seed: \"" + big + "\"}\n"),
      "x.yaml:1:13: run.seed: expected a non-negative integer, got the quoted string " + shown);
  // Keys (YAML wants `? key` for one over 1024 characters): quoted short, and no suggestion is
  // looked for.
  const std::string key_shown = "'model." + std::string(54, 'x') + "...' (1048582 bytes)";
  const std::string unknown = load_error("model:\n  ? " + big + "\n  : 1\n");
  EXPECT_EQ(unknown.rfind("x.yaml:2:5: unknown key " + key_shown +
                              "; valid keys in 'model': "
                              "attn_type, ",
                          0),
            0u)
      << unknown.substr(0, 1000);
  EXPECT_LT(unknown.size(), 1000u);
  const std::string top = load_error("? " + big + "\n: 1\n");
  EXPECT_EQ(top.rfind("x.yaml:1:3: unknown key " + shown + "; valid keys at the top: run, ", 0), 0u)
      << top.substr(0, 1000);
  EXPECT_LT(top.size(), 1000u);
  const std::string duplicate =
      load_error("model:\n  ? " + big + "\n  : 1\n  ? " + big + "\n  : 2\n");
  EXPECT_NE(duplicate.find("\nx.yaml:4:5: duplicate key " + key_shown + " (first at x.yaml:2:5)"),
            std::string::npos)
      << duplicate.substr(0, 1000);
  EXPECT_LT(duplicate.size(), 2000u);
}

TEST(LoadExperiment, HugeSetOverridesAreQuotedShortened) {
  const std::string big(1 << 20, '7');
  const std::string value = "train.lr=1e" + big;  // 1048587 bytes
  EXPECT_EQ(load_error("", {value}),
            "--set train.lr=1e" + std::string(49, '7') +
                "... (1048587 bytes): train.lr: "
                "expected a number, got '1e" +
                std::string(58, '7') +
                "...' (1048578 bytes) (beyond a double's range, about 1.8e308)");
  const std::string key = "model." + big + "=1";  // 1048584 bytes
  const std::string message = load_error("", {key});
  EXPECT_EQ(message.rfind("--set model." + std::string(54, '7') +
                              "... (1048584 bytes): unknown key 'model." + std::string(54, '7') +
                              "...' (1048582 bytes); valid keys in 'model': attn_type, ",
                          0),
            0u)
      << message.substr(0, 1000);
  EXPECT_LT(message.size(), 1000u);
}

TEST(LoadExperiment, QuotedTextsUpTo80BytesStayWholeAndCutsKeepUtf8Characters) {
  const std::string eighty(80, 'a');
  EXPECT_EQ(load_error("train: {lr: " + eighty + "}\n"),
            "x.yaml:1:13: train.lr: expected a number, got '" + eighty + "'");
  EXPECT_EQ(
      load_error("train: {lr: " + eighty + "b}\n"),
      "x.yaml:1:13: train.lr: expected a number, got '" + std::string(60, 'a') + "...' (81 bytes)");
  // "a" then 50 two-byte characters: byte 60 is inside the 30th; the cut keeps 29 whole ones.
  std::string accents = "a";
  for (int i = 0; i < 50; ++i) accents += "\xc3\xa9";  // é
  std::string kept = "a";
  for (int i = 0; i < 29; ++i) kept += "\xc3\xa9";
  EXPECT_EQ(load_error("train: {lr: " + accents + "}\n"),
            "x.yaml:1:13: train.lr: expected a number, got '" + kept + "...' (101 bytes)");
}

// ------------------------------------------------------------------------ numbers at the edge

// --set train.lr=1e300 passed the loader and failed in LibTorch's optimizer ("value cannot be
// converted to type float without overflow") without naming the key.
TEST(LoadExperiment, SettingsBeyondFloat32NameTheKey) {
  EXPECT_EQ(load_error("", {"train.lr=1e300"}),
            "--set train.lr=1e300: train.lr: must be <= 1.0e+30 (it enters float32 arithmetic), "
            "got 1.0e+300");
  EXPECT_EQ(load_error("train: {lr: 1e38}\n"),
            "x.yaml:1:13: train.lr: must be <= 1.0e+30 (it enters float32 arithmetic), got "
            "1.0e+38");
  for (const char* key : {"train.weight_decay", "train.clip", "model.init_std",
                          "model.proj_init_std", "train.divergence_factor"}) {
    const std::string message = load_error("", {std::string(key) + "=1e300"});
    EXPECT_EQ(message, "--set " + std::string(key) + "=1e300: " + key +
                           ": must be <= 1.0e+30 (it enters float32 arithmetic), got 1.0e+300");
  }
  // adamw multiplies the weights by 1 - lr * weight_decay every step.
  EXPECT_EQ(load_error("train: {optimizer: adamw, lr: 0.5, weight_decay: 2}\n"),
            "x.yaml:1:50: train.weight_decay: adamw needs train.lr * train.weight_decay < 1 (each "
            "step multiplies the weights by 1 - lr * weight_decay), got 0.5 * 2.0");
  EXPECT_NO_THROW(
      parse_experiment_string("train: {optimizer: adam, lr: 0.5, weight_decay: 2}\n", "x.yaml"));
  // The largest allowed values load.
  const ExperimentConfig edge = parse_experiment_string(
      "train: {lr: 1e30, clip: 1e30, weight_decay: 1e30, divergence_factor: 1e30}\n"
      "model: {init_std: 1e30, proj_init_std: 1e30}\n",
      "x.yaml");
  EXPECT_EQ(edge.train.lr, 1e30);
}

// The bound is one LibTorch's float32 updates take: an optimizer step and a clip at 1e30 do not
// throw (the optimizers are where 1e300 failed).
TEST(LoadExperiment, Float32BoundIsOneTheOptimizersAccept) {
  const double big = 1e30;
  auto step = [](torch::optim::Optimizer& optimizer, torch::Tensor& weight) {
    weight.mutable_grad() = torch::full({3}, 0.5);
    optimizer.step();
  };
  auto weight = [] { return torch::ones({3}).requires_grad_(); };
  torch::Tensor a = weight(), b = weight(), c = weight(), d = weight();
  torch::optim::Adam adam({a}, torch::optim::AdamOptions(big).weight_decay(big));
  torch::optim::AdamW adamw({b}, torch::optim::AdamWOptions(big).weight_decay(0.5 / big));
  torch::optim::SGD sgd({c}, torch::optim::SGDOptions(big).momentum(0.9).weight_decay(big));
  EXPECT_NO_THROW(step(adam, a));
  EXPECT_NO_THROW(step(adamw, b));
  EXPECT_NO_THROW(step(sgd, c));
  d.mutable_grad() = torch::full({3}, 0.5);
  EXPECT_NO_THROW(torch::nn::utils::clip_grad_norm_(std::vector<torch::Tensor>{d}, big));
}

TEST(LoadExperiment, NumbersBeyondTheirTypeNameTheKeyAndTheRange) {
  EXPECT_EQ(load_error("", {"train.lr=1e400"}),
            "--set train.lr=1e400: train.lr: expected a number, got '1e400' (beyond a double's "
            "range, about 1.8e308)");
  EXPECT_EQ(load_error("train: {lr: -1e400}\n"),
            "x.yaml:1:13: train.lr: expected a number, got '-1e400' (beyond a double's range, "
            "about 1.8e308)");
  for (const char* text : {"nan", "NaN", ".nan", "inf", "-inf", ".inf", "-.Inf", "infinity"}) {
    EXPECT_EQ(load_error("", {std::string("train.clip=") + text}),
              std::string("--set train.clip=") + text + ": train.clip: expected a number, got '" +
                  text + "'");
  }
  // Too small for a double: the nearest double, here 0, which the range rule then names.
  EXPECT_EQ(load_error("", {"train.lr=1e-400"}),
            "--set train.lr=1e-400: train.lr: must be > 0, got 0.0");
  EXPECT_EQ(parse_experiment_string("", "x.yaml", {"model.dropout=1e-400"}).model.dropout, 0.0);

  const std::string int_range = "expected an integer between -2147483648 and 2147483647";
  for (const char* text : {"99999999999999", "99999999999999999999999", "-99999999999999999999",
                           "1e300", "1e400", "3e9"}) {
    EXPECT_EQ(load_error("", {std::string("model.n_layer=") + text}),
              std::string("--set model.n_layer=") + text + ": model.n_layer: " + int_range +
                  ", got '" + text + "'");
  }
  EXPECT_EQ(load_error("", {"train.max_tokens=1e19"}),
            "--set train.max_tokens=1e19: train.max_tokens: expected an integer between "
            "-9223372036854775808 and 9223372036854775807, got '1e19'");
  EXPECT_EQ(load_error("", {"run.seed=1e20"}),
            "--set run.seed=1e20: run.seed: expected an integer between 0 and "
            "18446744073709551615, got '1e20'");
  EXPECT_EQ(load_error("", {"run.seed=-5"}),
            "--set run.seed=-5: run.seed: expected a non-negative integer, got '-5'");
  EXPECT_EQ(load_error("", {"model.n_layer=1e-400"}),
            "--set model.n_layer=1e-400: model.n_layer: expected an integer, got '1e-400'");
  // The largest values that fit still load.
  const ExperimentConfig edge = parse_experiment_string(
      "", "x.yaml",
      {"model.max_positions=2147483647", "train.max_tokens=9223372036854775807",
       "run.seed=18446744073709551615"});
  EXPECT_EQ(edge.model.max_positions, 2147483647);
  EXPECT_EQ(edge.train.max_tokens, std::numeric_limits<std::int64_t>::max());
  EXPECT_EQ(edge.run.seed, std::numeric_limits<std::uint64_t>::max());
}

// ------------------------------------------------------------------------------- run.name

// run.name "../../x" once wrote outside runs/.
TEST(LoadExperiment, RunNameMustBeAPlainName) {
  const std::string rule =
      "run.name: must be a plain name: letters, digits, '.', '_' and '-', with '/' only between "
      "parts (e.g. kjv_xl or kjv_ablation/xl; set run.output_dir for another folder), got ";
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"../../x", "'../../x': a part is '..'"},
      {"a/../b", "'a/../b': a part is '..'"},
      {"./a", "'./a': a part is '.'"},
      {"..", "'..': a part is '..'"},
      {"/tmp/x", "'/tmp/x': it is an absolute path"},
      {"a//b", "'a//b': it has an empty part (a '/' at the end or '//')"},
      {"a/", "'a/': it has an empty part (a '/' at the end or '//')"},
      {"-rf", "'-rf': a part starts with '-'"},
      {"a/-b", "'a/-b': a part starts with '-'"},
      {"a b", "'a b': it holds ' '"},
      {"a\\b", "'a\\b': it holds '\\'"},
      {"caf\xc3\xa9", "'caf\xc3\xa9': it holds byte 195"},
      {std::string(201, 'n'),
       "'" + std::string(60, 'n') + "...' (201 bytes): it is longer than 200 bytes"},
  };
  for (const auto& [name, problem] : bad) {
    const std::string text = "run.name='" + name + "'";  // single quotes: no YAML escapes
    EXPECT_EQ(load_error("", {text}), "--set " + shortened(text) + ": " + rule + problem) << name;
  }
  EXPECT_EQ(load_error("run:\n  name: ../../x\n"),
            "x.yaml:2:9: " + rule + "'../../x': a part is '..'");
  for (const std::string& name :
       {std::string("kjv_xl"), std::string("kjv_ablation/xl"), std::string("a.b-c_D9/e/f"),
        std::string("x..y"), std::string(200, 'n')}) {
    EXPECT_EQ(parse_experiment_string("", "x.yaml", {"run.name=" + name}).run.name, name);
  }
  // run.output_dir is the user's explicit choice of folder: any path.
  const ExperimentConfig elsewhere =
      parse_experiment_string("run: {name: ok, output_dir: ../../elsewhere/-x}\n", "x.yaml");
  EXPECT_EQ(elsewhere.run.output_dir, "../../elsewhere/-x");
  // Configs built in code are held to the same rule.
  ExperimentConfig code;
  code.run.name = "../x";
  TXL_EXPECT_THROW_WITH(validate_experiment(code), rule + "'../x': a part is '..'");
}

// ------------------------------------------------------------------------ unreadable files

// --config <a folder> said "file not found".
TEST(LoadExperiment, DirectoriesAndUnreadablePathsSayWhatTheyAre) {
  TempDir dir;
  std::filesystem::create_directories(dir / "folder");
  const std::string folder = (dir / "folder").string();
  EXPECT_EQ(error_of([&] { load_experiment(folder); }),
            "experiment file " + folder + " is a directory; expected a YAML file");
  const std::string path = write_yaml(dir, "exp.yaml", "run: {seed: 2}\nbase: folder\n");
  EXPECT_EQ(error_of([&] { load_experiment(path); }),
            path + ":2:7: base file " + folder + " is a directory; expected a YAML file");
  EXPECT_EQ(error_of([&] { load_ablation(folder); }),
            "ablation file " + folder + " is a directory; expected a YAML file");

  // A file used as a folder: not found, and why.
  const std::string inside = path + "/x.yaml";
  EXPECT_EQ(error_of([&] { load_experiment(inside); }),
            "experiment file not found: " + inside + " (" + std::strerror(ENOTDIR) + ")");
  // A symlink loop: the system's reason.
  std::filesystem::create_symlink(dir / "loop_b.yaml", dir / "loop_a.yaml");
  std::filesystem::create_symlink(dir / "loop_a.yaml", dir / "loop_b.yaml");
  const std::string loop = (dir / "loop_a.yaml").string();
  EXPECT_EQ(error_of([&] { load_experiment(loop); }),
            "cannot read experiment file " + loop + ": " + std::strerror(ELOOP));
  // Not a regular file.
  const std::string fifo = (dir / "fifo.yaml").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(error_of([&] { load_experiment(fifo); }),
            "experiment file " + fifo + " is not a regular file; expected a YAML file");
}

TEST(LoadExperiment, UnreadableFileGivesTheSystemsReason) {
  TempDir dir;
  const std::string path = write_yaml(dir, "secret.yaml", "run: {seed: 2}\n");
  std::filesystem::permissions(path, std::filesystem::perms::none);
  if (::access(path.c_str(), R_OK) == 0) GTEST_SKIP() << "running as root: every file is readable";
  const std::string message = error_of([&] { load_experiment(path); });
  EXPECT_EQ(message, "cannot read experiment file " + path + ": " + std::strerror(EACCES));
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
  EXPECT_EQ(tiny.data.corpus, Corpus::kSynthetic);
  EXPECT_EQ(tiny.train.optimizer, Optimizer::kAdam);  // default
}

TEST(ValidateExperiment, ChecksConfigsBuiltInCode) {
  EXPECT_NO_THROW(validate_experiment(ExperimentConfig{}));
  ExperimentConfig c;
  c.model.n_head = 0;
  c.train.optimizer = static_cast<Optimizer>(3);  // no enumerator: only a cast makes one
  const std::string message = error_of([&] { validate_experiment(c); });
  EXPECT_NE(message.find("model.n_head: must be >= 1, got 0"), std::string::npos) << message;
  EXPECT_NE(message.find("train.optimizer: '3' is not one of adam | adamw | sgd"),
            std::string::npos)
      << message;
}

}  // namespace
}  // namespace txl::config
