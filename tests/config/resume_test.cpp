// Tests of resume_conflicts and resumable_keys: which settings a resumed run may change, and the
// lines that say why it may not.

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "config_test_util.h"
#include "txl/config/load.h"

namespace txl::config {
namespace {

using test::kEveryField;

// The decision for every key, written out: a key added to config.h fails
// EveryKeyIsClassified until it is put in one of these lists (and, if resumable, in the table of
// src/config/keys.cpp).
const std::vector<std::string> kResumable = {"run.threads",
                                             "run.device",
                                             "run.log_interval",
                                             "run.dist_timeout",
                                             "run.output_dir",
                                             "data.cache_dir",
                                             "train.max_steps",
                                             "train.max_tokens",
                                             "train.max_minutes",
                                             "train.eval_interval",
                                             "train.checkpoint_interval",
                                             "train.patience",
                                             "train.eval_max_tokens",
                                             "train.divergence_factor",
                                             "train.divergence_patience"};  // and every eval.* key

const std::vector<std::string> kFixed = {"run.name",
                                         "run.seed",
                                         "run.precision",
                                         "data.corpus",
                                         "data.path",
                                         "data.tokenizer.type",
                                         "data.tokenizer.model_path",
                                         "data.tokenizer.vocab_size",
                                         "data.tokenizer.model_type",
                                         "data.tokenizer.character_coverage",
                                         "data.tokenizer.user_symbols",
                                         "data.tokenizer.max_sentences",
                                         "data.tokenizer.min_count",
                                         "data.synthetic.seed",
                                         "data.synthetic.documents",
                                         "data.synthetic.keys",
                                         "data.synthetic.gap",
                                         "data.synthetic.alphabet",
                                         "data.document_mode",
                                         "data.add_eos",
                                         "model.attn_type",
                                         "model.n_layer",
                                         "model.d_model",
                                         "model.n_head",
                                         "model.d_head",
                                         "model.d_inner",
                                         "model.dropout",
                                         "model.dropatt",
                                         "model.tgt_len",
                                         "model.mem_len",
                                         "model.ext_len",
                                         "model.clamp_len",
                                         "model.same_length",
                                         "model.pre_norm",
                                         "model.final_norm",
                                         "model.untie_r",
                                         "model.max_rel_dist",
                                         "model.max_positions",
                                         "model.t5_buckets",
                                         "model.t5_max_distance",
                                         "model.allow_abs_with_memory",
                                         "model.cutoffs",
                                         "model.div_val",
                                         "model.tie_weight",
                                         "model.tie_projs",
                                         "model.init",
                                         "model.norm_init",
                                         "model.init_std",
                                         "model.proj_init_std",
                                         "model.mem_init",
                                         "model.cmem_len",
                                         "model.cmem_rate",
                                         "model.cmem_compress",
                                         "model.cmem_loss_weight",
                                         "model.mem_tokens",
                                         "model.knn_layer",
                                         "model.knn_topk",
                                         "model.knn_size",
                                         "train.optimizer",
                                         "train.lr",
                                         "train.weight_decay",
                                         "train.momentum",
                                         "train.schedule",
                                         "train.warmup_steps",
                                         "train.lr_min",
                                         "train.decay_rate",
                                         "train.plateau_patience",
                                         "train.clip",
                                         "train.batch_size",
                                         "train.batch_chunk",
                                         "train.bptt_segments",
                                         "train.var_len",
                                         "train.roll"};

bool is_eval(const std::string& key) { return key.rfind("eval.", 0) == 0; }

TEST(ResumeConflicts, ChangedModelWidthIsTheOneConflict) {
  ExperimentConfig stored;
  ExperimentConfig requested;
  requested.model.d_inner = 2048;
  EXPECT_EQ(resume_conflicts(stored, requested),
            std::vector<std::string>{"model.d_inner: 1024 -> 2048"});
  EXPECT_EQ(resume_conflicts(requested, stored),
            std::vector<std::string>{"model.d_inner: 2048 -> 1024"});
}

TEST(ResumeConflicts, LongerTrainingAndAnotherEvaluationMemoryMayResume) {
  ExperimentConfig stored;
  ExperimentConfig requested;
  requested.train.max_steps = stored.train.max_steps * 3;
  requested.eval.mem_len = 640;
  requested.source = "elsewhere.yaml";
  EXPECT_EQ(diff_experiments(stored, requested).size(), 2u);  // they do differ
  EXPECT_TRUE(resume_conflicts(stored, requested).empty());
}

TEST(ResumeConflicts, EveryKeyIsClassified) {
  std::vector<std::string> expected_resumable;
  std::vector<std::string> fixed;
  for (const std::string& key : experiment_keys()) {
    const bool listed = std::count(kResumable.begin(), kResumable.end(), key) > 0;
    const bool is_fixed = std::count(kFixed.begin(), kFixed.end(), key) > 0;
    EXPECT_EQ(int(listed) + int(is_fixed) + int(is_eval(key)), 1)
        << key << ": decide whether a resumed run may change it (kResumable or kFixed here)";
    if (listed || is_eval(key)) expected_resumable.push_back(key);
    if (is_fixed) fixed.push_back(key);
  }
  EXPECT_EQ(resumable_keys(), expected_resumable);  // in struct order, nothing stale
  EXPECT_EQ(expected_resumable.size() + fixed.size(), experiment_keys().size());
  EXPECT_EQ(fixed.size(), kFixed.size());  // no listed key is gone
}

// Each key changed alone (as dump_test does: the every-field config with one key set back to
// its default) conflicts exactly when it is not resumable, and then names itself and both values.
TEST(ResumeConflicts, EachKeyConflictsExactlyWhenNotResumable) {
  const ExperimentConfig every = parse_experiment_string(kEveryField, "every.yaml");
  const std::vector<std::string> keys = experiment_keys();
  const std::vector<std::string> lines = diff_experiments(every, ExperimentConfig{});
  ASSERT_EQ(lines.size(), keys.size());
  const std::vector<std::string> resumable = resumable_keys();
  for (std::size_t i = 0; i < keys.size(); ++i) {
    std::vector<std::size_t> changed;  // the key, and a companion the rules tie it to
    const ExperimentConfig one = parse_experiment_string(
        kEveryField, "every.yaml", txl::test::back_to_default(keys, lines, i, &changed));
    std::sort(changed.begin(), changed.end());
    std::vector<std::string> expected;  // the lines of the keys changed that may not change
    for (std::size_t j : changed) {
      if (std::count(resumable.begin(), resumable.end(), keys[j]) == 0)
        expected.push_back(lines[j]);
    }
    const std::vector<std::string> conflicts = resume_conflicts(every, one);
    EXPECT_EQ(conflicts, expected) << keys[i];
  }
  // All at once: every fixed key, in struct order.
  EXPECT_EQ(resume_conflicts(every, ExperimentConfig{}).size(), keys.size() - resumable.size());
}

TEST(ResumeConflicts, LongValuesAreShortened) {
  ExperimentConfig stored;
  ExperimentConfig requested;
  requested.data.path = std::string(5000, 'p');
  requested.data.tokenizer.user_symbols = std::vector<std::string>(100, "<sym>");
  const std::vector<std::string> conflicts = resume_conflicts(stored, requested);
  ASSERT_EQ(conflicts.size(), 2u);
  EXPECT_EQ(conflicts[0], "data.path: '' -> '" + std::string(60, 'p') + "...' (5000 bytes)");
  EXPECT_EQ(conflicts[1].rfind("data.tokenizer.user_symbols: [] -> [\"<sym>\", \"<sym>\"", 0), 0u)
      << conflicts[1];
  EXPECT_NE(conflicts[1].find("... (900 bytes)"), std::string::npos) << conflicts[1];
  EXPECT_LT(conflicts[1].size(), 120u);
}

}  // namespace
}  // namespace txl::config
