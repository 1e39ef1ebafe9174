// Converting txl's first checkpoint format (a TorchScript archive) once, on the user's word.
#include "txl/train/legacy.h"

#include <sys/wait.h>
#include <unistd.h>

#include "support/test_support.h"
#include "support/tiny_experiment.h"
#include "txl/config/load.h"
#include "txl/train/state.h"
#include "txl/train/trainer.h"

namespace {

// The model's inputs for next-token prediction of `tokens` against `targets` (every token real).
txl::models::Inputs inputs_of(const torch::Tensor& tokens, const torch::Tensor& targets) {
  txl::models::Inputs inputs;
  inputs.tokens = tokens;    // int64 [B, T]
  inputs.targets = targets;  // int64 [B, T]
  return inputs;
}

namespace stdfs = std::filesystem;
using torch::serialize::OutputArchive;
using txl::test::TempDir;

void put(OutputArchive& a, const std::string& key, std::int64_t v) {
  a.write(key, torch::tensor(v));
}
void put(OutputArchive& a, const std::string& key, double v) {
  a.write(key, torch::tensor(v, torch::kDouble));
}

// A version 1 file as txl wrote it before the data-only format: model, optimizer and state.
void write_version_1(const stdfs::path& path, const txl::config::ExperimentConfig& config,
                     txl::models::TransformerLM& model, torch::optim::Optimizer& optimizer,
                     const txl::models::Memory& memory) {
  OutputArchive archive, model_archive, optimizer_archive, s;
  archive.write("txl_magic", c10::IValue(std::string("txl-checkpoint")));
  put(archive, "txl_version", std::int64_t{1});
  archive.write("config", c10::IValue(txl::config::dump_experiment(config)));
  put(archive, "vocab_size", std::int64_t{30});
  model->save(model_archive);
  archive.write("model", model_archive);
  optimizer.save(optimizer_archive);
  archive.write("optimizer", optimizer_archive);
  put(s, "step", std::int64_t{2});
  put(s, "tokens", std::int64_t{48});
  put(s, "lr_scale", 1.0);
  put(s, "best_valid_loss", 0.0);
  put(s, "evals_without_gain", std::int64_t{0});
  put(s, "plateau_bad_evals", std::int64_t{0});
  s.write("stream_state", c10::IValue(std::string("opaque")));
  put(s, "memory_size", std::int64_t{2 + static_cast<std::int64_t>(memory.layers.size())});
  s.write("memory_0", torch::tensor(static_cast<std::int64_t>(memory.layers.size())));
  for (size_t l = 0; l < memory.layers.size(); ++l)
    s.write("memory_" + std::to_string(l + 1), memory.layers[l]);
  s.write("memory_" + std::to_string(memory.layers.size() + 1),
          memory.empty() ? torch::zeros({0}, torch::kBool) : memory.mask_or_ones());
  put(s, "elapsed_seconds", 1.5);
  put(s, "last_eval_step", std::int64_t{-1});
  put(s, "interval_loss", 0.0);
  put(s, "interval_tokens", std::int64_t{0});
  archive.write("state", s);
  archive.save_to(path.string());
}

TEST(Legacy, AVersion1CheckpointConvertsToOneThatResumesExactly) {
  TempDir dir;
  auto config = txl::test::tiny_experiment(dir.path());
  config.model.dropout = 0.0;
  torch::manual_seed(3);
  txl::models::TransformerLM model(config.model, 30);
  auto optimizer = txl::train::make_optimizer(config.train, model->parameters());
  auto tokens = torch::randint(30, {4, 16}, torch::kInt64);  // [4, 16]
  txl::models::Memory memory;
  for (int i = 0; i < 2; ++i) {
    optimizer->zero_grad();
    auto out = model->forward(inputs_of(tokens, tokens), memory, model->default_lookback());
    out.nll.mean().backward();
    optimizer->step();
    memory = out.memory;
  }
  write_version_1(dir / "old.pt", config, model, *optimizer, memory);

  const auto converted =
      txl::train::convert_legacy_checkpoint(dir / "old.pt", *txl::test::word_tokenizer());
  const auto parsed =
      txl::models::parse_checkpoint(txl::models::serialize_checkpoint(converted), "new");
  torch::manual_seed(4);
  txl::models::TransformerLM restored(config.model, 30);
  auto restored_optimizer = txl::train::make_optimizer(config.train, restored->parameters());
  auto point = txl::train::restore_training(parsed, config, restored, *restored_optimizer,
                                            torch::kCPU, "new");
  EXPECT_EQ(point.state.step, 2);
  EXPECT_EQ(point.state.stream_state, "opaque");
  ASSERT_EQ(point.memory.layers.size(), memory.layers.size());
  EXPECT_TRUE(txl::test::tensor_equal(point.memory.layers[1], memory.layers[1]));
  for (auto* m : {&model, &restored}) {  // one more step each: the same weights
    auto& o = m == &model ? *optimizer : *restored_optimizer;
    o.zero_grad();
    (*m)->forward(inputs_of(tokens, tokens), {}, (*m)->default_lookback()).nll.mean().backward();
    o.step();
  }
  auto a = model->parameters(), b = restored->parameters();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(txl::test::tensor_equal(b[i], a[i])) << i;

  TXL_EXPECT_THROW_WITH(
      txl::train::convert_legacy_checkpoint(dir / "old.pt", *txl::data::make_byte_tokenizer()),
      "not the tokenizer it was trained with");
}

// Runs txl-convert with `args`; returns its exit status.
int convert_tool(const std::vector<std::string>& args) {
  const auto binary = txl::test::bin_dir() / "txl-convert";
  pid_t pid = fork();
  if (pid == 0) {
    std::vector<char*> argv = {const_cast<char*>(binary.c_str())};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(Legacy, TheToolConvertsOnlyOnTheUsersWord) {
  TempDir dir;
  auto config = txl::test::tiny_experiment(dir.path());
  torch::manual_seed(3);
  txl::models::TransformerLM model(config.model, 30);
  auto optimizer = txl::train::make_optimizer(config.train, model->parameters());
  write_version_1(dir / "old.pt", config, model, *optimizer, {});
  txl::test::word_tokenizer()->save(dir / "tok");
  const auto out = (dir / "new.safetensors").string();
  EXPECT_EQ(convert_tool({(dir / "old.pt").string(), out, "--tokenizer", (dir / "tok").string()}),
            1);
  EXPECT_FALSE(stdfs::exists(out));
  EXPECT_EQ(convert_tool({"--trust-old-format", (dir / "old.pt").string(), out, "--tokenizer",
                          (dir / "tok").string()}),
            0);
  auto loaded = txl::models::load_model(out);
  EXPECT_EQ(loaded.tokenizer->fingerprint(), txl::test::word_tokenizer()->fingerprint());
  auto a = model->parameters(), b = loaded.model->parameters();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(txl::test::tensor_equal(b[i], a[i])) << i;
}

// Without --tokenizer the one cached tokenizer of the checkpoint's vocabulary size is found in
// the stored experiment's data.cache_dir, or where --set data.cache_dir says; --set may change
// nothing else, and no fitting tokenizer, or two, is an error.
TEST(Legacy, TheToolFindsTheTokenizerWhereTheCacheIs) {
  TempDir dir;
  auto config = txl::test::tiny_experiment(dir.path());
  torch::manual_seed(3);
  txl::models::TransformerLM model(config.model, 30);
  auto optimizer = txl::train::make_optimizer(config.train, model->parameters());
  write_version_1(dir / "old.pt", config, model, *optimizer, {});
  const auto elsewhere = dir / "elsewhere";
  // txl-convert --trust-old-format old.pt NEW [--set data.cache_dir=<elsewhere>] [extra...]
  const auto convert = [&](const std::string& out, bool look_elsewhere,
                           std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"--trust-old-format", (dir / "old.pt").string(),
                                     (dir / out).string()};
    if (look_elsewhere) args.insert(args.end(), {"--set", "data.cache_dir=" + elsewhere.string()});
    args.insert(args.end(), extra.begin(), extra.end());
    return convert_tool(args);
  };
  txl::test::word_tokenizer(31)->save(elsewhere / "other_vocab");
  EXPECT_EQ(convert("a.safetensors", false), 1);  // nothing cached in the stored cache_dir
  EXPECT_EQ(convert("a.safetensors", true), 1);   // no tokenizer of 30 ids
  txl::test::word_tokenizer()->save(elsewhere / "tok");
  EXPECT_EQ(convert("a.safetensors", true, {"--set", "model.n_layer=7"}), 1);
  EXPECT_FALSE(stdfs::exists(dir / "a.safetensors"));
  EXPECT_EQ(convert("a.safetensors", true), 0);
  EXPECT_EQ(txl::models::load_model(dir / "a.safetensors").tokenizer->fingerprint(),
            txl::test::word_tokenizer()->fingerprint());
  txl::test::word_tokenizer()->save(elsewhere / "tok_again");
  EXPECT_EQ(convert("b.safetensors", true), 1);  // two fit
  EXPECT_FALSE(stdfs::exists(dir / "b.safetensors"));
}

}  // namespace
