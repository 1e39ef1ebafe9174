#include "txl/models/checkpoint.h"

#include <sys/resource.h>

#include <csignal>

#include "support/test_support.h"
#include "support/tiny_experiment.h"
#include "txl/util/fs.h"

namespace {

using txl::test::TempDir;

torch::Tensor logits_of(txl::models::TransformerLM& model) {
  torch::NoGradGuard no_grad;
  model->eval();
  auto tokens = torch::arange(24, torch::kInt64).remainder(30).view({2, 12});
  return model->forward(tokens, tokens, {}, {}, {}, model->default_context(), true).logits;
}

TEST(Checkpoint, TheModelIsRebuiltFromTheCheckpointAlone) {
  TempDir dir;
  auto config = txl::test::tiny_experiment(dir.path());
  config.model.attn_type = "shaw";
  config.model.cutoffs = {10, 20};
  config.model.div_val = 2;
  torch::manual_seed(5);
  txl::models::TransformerLM model(config.model, 30);
  txl::models::save_checkpoint(dir / "c.pt", config, 30, model, nullptr, nullptr);
  auto loaded = txl::models::load_model(dir / "c.pt");
  EXPECT_EQ(loaded.vocab_size, 30);
  EXPECT_EQ(loaded.config.model.attn_type, "shaw");
  EXPECT_EQ(loaded.config.model.cutoffs, config.model.cutoffs);
  EXPECT_TRUE(txl::test::tensor_equal(logits_of(loaded.model), logits_of(model)));
}

TEST(Checkpoint, AFailedWriteLeavesThePreviousCheckpointIntact) {
  TempDir dir;
  auto config = txl::test::tiny_experiment(dir.path());
  torch::manual_seed(5);
  txl::models::TransformerLM first(config.model, 30);
  txl::models::save_checkpoint(dir / "c.pt", config, 30, first, nullptr, nullptr);
  const auto before = txl::fs::read_file(dir / "c.pt");
  // The next write fails part way, as on a full disk (file-size limit, SIGXFSZ ignored).
  torch::manual_seed(6);
  txl::models::TransformerLM second(config.model, 30);
  std::signal(SIGXFSZ, SIG_IGN);
  rlimit old{};
  getrlimit(RLIMIT_FSIZE, &old);
  rlimit small = old;
  small.rlim_cur = 4096;
  setrlimit(RLIMIT_FSIZE, &small);
  TXL_EXPECT_THROW_WITH(
      txl::models::save_checkpoint(dir / "c.pt", config, 30, second, nullptr, nullptr),
      "previous version");
  setrlimit(RLIMIT_FSIZE, &old);
  EXPECT_EQ(txl::fs::read_file(dir / "c.pt"), before);
  auto loaded = txl::models::load_model(dir / "c.pt");
  EXPECT_TRUE(txl::test::tensor_equal(logits_of(loaded.model), logits_of(first)));
}

TEST(Checkpoint, BadFilesAreClearErrors) {
  TempDir dir;
  TXL_EXPECT_THROW_WITH(txl::models::load_model(dir / "missing.pt"), "checkpoint not found");
  txl::test::write_text(dir / "junk.pt", "not a checkpoint at all");
  TXL_EXPECT_THROW_WITH(txl::models::load_model(dir / "junk.pt"), "junk.pt");
  // A truncated checkpoint.
  auto config = txl::test::tiny_experiment(dir.path());
  txl::models::TransformerLM model(config.model, 30);
  txl::models::save_checkpoint(dir / "c.pt", config, 30, model, nullptr, nullptr);
  auto bytes = txl::fs::read_file(dir / "c.pt");
  txl::fs::write_atomic(dir / "cut.pt", bytes.substr(0, bytes.size() / 2));
  TXL_EXPECT_THROW_WITH(txl::models::load_model(dir / "cut.pt"), "cut.pt");
}

}  // namespace
