// Tests of load_experiment / parse_experiment_string: defaults, every field, base chains and
// precedence, missing files and the committed fixtures (the errors: load_errors_test.cpp and
// load_limits_test.cpp).

#include <gtest/gtest.h>

#include <filesystem>

#include "config_test_util.h"
#include "load_test_support.h"
#include "support/test_support.h"
#include "txl/config/load.h"
#include "txl/util/error.h"

namespace txl::config {
namespace {

using load_test::error_of;
using test::kEveryField;
using test::TempDir;
using test::write_yaml;

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
  EXPECT_EQ(c.model.t5_buckets, 16);
  EXPECT_EQ(c.model.t5_max_distance, 64);
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
  EXPECT_EQ(c.model.knn_layer, 2);
  EXPECT_EQ(c.model.knn_topk, 8);
  EXPECT_EQ(c.model.knn_size, 64);

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
