// The data-only checkpoint format: the model and its tokenizer rebuilt from the file alone,
// atomic writes, every damaged byte detected, old TorchScript archives refused without running
// them, and Python's safetensors package reading the file.
#include "txl/models/checkpoint.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <functional>

#include <torch/script.h>

#include "support/test_support.h"
#include "support/tiny_experiment.h"
#include "txl/util/fs.h"
#include "txl/util/safetensors.h"

namespace {

// The model's inputs for next-token prediction of `tokens` against `targets` (every token real).
txl::models::Inputs inputs_of(const torch::Tensor& tokens, const torch::Tensor& targets) {
  txl::models::Inputs inputs;
  inputs.tokens = tokens;    // int64 [B, T]
  inputs.targets = targets;  // int64 [B, T]
  return inputs;
}

namespace stdfs = std::filesystem;
using txl::test::TempDir;

torch::Tensor logits_of(txl::models::TransformerLM& model) {
  torch::NoGradGuard no_grad;
  model->eval();
  auto tokens = torch::arange(24, torch::kInt64).remainder(30).view({2, 12});  // [2, 12]
  return model->forward(inputs_of(tokens, tokens), {}, model->default_lookback(), true).logits;
}

txl::models::Checkpoint tiny_checkpoint(const stdfs::path& dir, int seed) {
  auto config = txl::test::tiny_experiment(dir);
  config.model.attn_type = txl::config::AttnType::kShaw;
  config.model.cutoffs = {10, 20};
  config.model.div_val = 2;
  torch::manual_seed(seed);
  txl::models::TransformerLM model(config.model, 30);
  return txl::models::model_checkpoint(config, model, *txl::test::word_tokenizer(),
                                       "00c0ffee00c0ffee");
}

TEST(Checkpoint, TheModelAndItsTokenizerAreRebuiltFromTheFileAlone) {
  TempDir dir;
  auto config = txl::test::tiny_experiment(dir.path());
  config.model.attn_type = txl::config::AttnType::kShaw;
  config.model.cutoffs = {10, 20};
  config.model.div_val = 2;
  torch::manual_seed(5);
  txl::models::TransformerLM model(config.model, 30);
  const auto tokenizer = txl::test::word_tokenizer();
  txl::models::write_checkpoint(dir / "c.safetensors",
                                txl::models::model_checkpoint(config, model, *tokenizer, "abc"));
  auto loaded = txl::models::load_model(dir / "c.safetensors");
  EXPECT_EQ(loaded.vocab_size, 30);
  EXPECT_EQ(loaded.config.model.attn_type, txl::config::AttnType::kShaw);
  EXPECT_EQ(loaded.config.model.cutoffs, config.model.cutoffs);
  EXPECT_EQ(loaded.corpus_fingerprint, "abc");
  EXPECT_EQ(loaded.tokenizer->fingerprint(), tokenizer->fingerprint());
  EXPECT_EQ(loaded.tokenizer->encode("w3 w26 nope"), tokenizer->encode("w3 w26 nope"));
  EXPECT_TRUE(txl::test::tensor_equal(logits_of(loaded.model), logits_of(model)));
}

TEST(Checkpoint, SerialisingTwiceGivesTheSameBytes) {
  TempDir dir;
  const auto c = tiny_checkpoint(dir.path(), 5);
  const std::string a = txl::models::serialize_checkpoint(c);
  EXPECT_EQ(txl::models::serialize_checkpoint(txl::models::parse_checkpoint(a, "a")), a);
}

TEST(Checkpoint, AFailedWriteLeavesThePreviousCheckpointIntact) {
  TempDir dir;
  const auto path = dir / "c.safetensors";
  txl::models::write_checkpoint(path, tiny_checkpoint(dir.path(), 5));
  const auto before = txl::fs::read_file(path);
  // The next write fails part way, as on a full disk (file-size limit, SIGXFSZ ignored).
  const auto second = tiny_checkpoint(dir.path(), 6);
  std::signal(SIGXFSZ, SIG_IGN);
  rlimit old{};
  getrlimit(RLIMIT_FSIZE, &old);
  rlimit small = old;
  small.rlim_cur = 4096;
  setrlimit(RLIMIT_FSIZE, &small);
  TXL_EXPECT_THROW_WITH(txl::models::write_checkpoint(path, second), "previous version");
  setrlimit(RLIMIT_FSIZE, &old);
  EXPECT_EQ(txl::fs::read_file(path), before);
  EXPECT_NO_THROW(txl::models::load_model(path));
}

TEST(Checkpoint, MissingJunkAndTruncatedFilesAreClearErrors) {
  TempDir dir;
  TXL_EXPECT_THROW_WITH(txl::models::load_model(dir / "missing.safetensors"),
                        "checkpoint not found");
  txl::test::write_text(dir / "junk.safetensors", "not a checkpoint at all");
  TXL_EXPECT_THROW_WITH(txl::models::load_model(dir / "junk.safetensors"), "junk.safetensors");
  const std::string bytes = txl::models::serialize_checkpoint(tiny_checkpoint(dir.path(), 5));
  for (size_t keep :
       {size_t{0}, size_t{7}, size_t{8}, size_t{100}, bytes.size() / 2, bytes.size() - 1})
    TXL_EXPECT_THROW_WITH(txl::models::parse_checkpoint(bytes.substr(0, keep), "cut"), "cut");
}

// A flipped bit anywhere, in a weight, the tokenizer, the record or the tensor index, is an
// error and never a number: the SHA-256 covers all of it (or the layout breaks).
TEST(Checkpoint, AFlippedBitAnywhereIsDetected) {
  TempDir dir;
  const std::string bytes = txl::models::serialize_checkpoint(tiny_checkpoint(dir.path(), 5));
  size_t header = 0;  // the end of the JSON header: 8 + its little-endian length
  for (int i = 7; i >= 0; --i) header = header * 256 + static_cast<unsigned char>(bytes[i]);
  header += 8;
  std::vector<size_t> positions = {
      8, 20, header - 30, header + 3, bytes.size() / 2, bytes.size() - 1};
  for (size_t p = header; p < bytes.size(); p += (bytes.size() - header) / 37)
    positions.push_back(p);
  for (size_t p = 9; p < header; p += header / 23) positions.push_back(p);
  for (size_t p : positions) {
    std::string damaged = bytes;
    damaged[p] = static_cast<char>(damaged[p] ^ 0x10);
    bool refused = false;
    try {
      txl::models::parse_checkpoint(damaged, "damaged");
    } catch (const txl::Error& e) {
      refused = std::string(e.what()).find("damaged") != std::string::npos;
    }
    EXPECT_TRUE(refused) << "a flipped bit at byte " << p << " of " << bytes.size()
                         << " went unnoticed";
  }
}

TEST(Checkpoint, WeightsThatDoNotFitTheStoredModelAreListed) {
  TempDir dir;
  auto c = tiny_checkpoint(dir.path(), 5);
  c.config.model.d_inner = 128;  // the stored experiment now builds wider feed-forward layers
  TXL_EXPECT_THROW_WITH(txl::models::rebuild_model(c, "wide"), "layers.0.ff");
  auto extra = tiny_checkpoint(dir.path(), 5);
  extra.tensors.emplace_back("model/stray", torch::zeros({2}));
  TXL_EXPECT_THROW_WITH(txl::models::rebuild_model(extra, "extra"), "unexpected stray");
  auto missing = tiny_checkpoint(dir.path(), 5);
  missing.tensors.erase(missing.tensors.begin());
  TXL_EXPECT_THROW_WITH(txl::models::rebuild_model(missing, "missing"), "missing ");
  auto retyped = tiny_checkpoint(dir.path(), 5);
  retyped.tensors.front().second = retyped.tensors.front().second.to(torch::kDouble);
  TXL_EXPECT_THROW_WITH(txl::models::rebuild_model(retyped, "retyped"), "Double");
}

TEST(Checkpoint, ATokenizerThatIsNotTheRecordedOneIsRefused) {
  TempDir dir;
  auto c = tiny_checkpoint(dir.path(), 5);
  c.tokenizer_fingerprint = "0123456789abcdef";
  TXL_EXPECT_THROW_WITH(txl::models::rebuild_model(c, "other tokenizer"), "other tokenizer");
}

// Runs argv without a shell; returns the exit status (-1 when it could not run).
int run_program(const std::vector<std::string>& argv) {
  pid_t pid = fork();
  if (pid == 0) {
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// What `fn` writes to standard output (file descriptor 1, where TorchScript's print goes).
std::string stdout_of(const std::function<void()>& fn, const stdfs::path& scratch) {
  std::fflush(stdout);
  const int saved = dup(1);
  const int file = ::open(scratch.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  dup2(file, 1);
  try {
    fn();
  } catch (...) {
  }
  std::fflush(stdout);
  dup2(saved, 1);
  ::close(saved);
  ::close(file);
  return txl::fs::read_file(scratch);
}

// A TorchScript archive (txl's first checkpoint format) holding a module whose __setstate__
// prints a marker: LibTorch's own loader runs it (the danger), txl refuses the file from its
// first bytes and runs nothing.
TEST(Checkpoint, AnOldTorchScriptArchiveIsRefusedWithoutRunningIt) {
  TempDir dir;
  const auto script = dir / "craft.py", archive = dir / "old.pt";
  txl::test::write_text(script,  // TorchScript compiles from source files only, not from -c
                        "import sys, torch\n"
                        "class Inner(torch.nn.Module):\n"
                        "    def forward(self, x):\n"
                        "        return x\n"
                        "    @torch.jit.export\n"
                        "    def __getstate__(self):\n"
                        "        return (self.training, 0)\n"
                        "    @torch.jit.export\n"
                        "    def __setstate__(self, state: tuple[bool, int]):\n"
                        "        self.training = state[0]\n"
                        "        print('CODE FROM THE FILE RAN')\n"
                        "class M(torch.nn.Module):\n"
                        "    def __init__(self):\n"
                        "        super().__init__()\n"
                        "        self.inner = Inner()\n"
                        "    def forward(self, x):\n"
                        "        return self.inner(x)\n"
                        "torch.jit.save(torch.jit.script(M()), sys.argv[1])\n");
  if (access("/usr/bin/python3", X_OK) != 0 ||
      run_program({"/usr/bin/python3", script.string(), archive.string()}) != 0)
    GTEST_SKIP()
        << "/usr/bin/python3 with torch (Debian python3-torch) is needed to craft the file";
  const std::string marker = "CODE FROM THE FILE RAN";
  EXPECT_NE(stdout_of([&] { torch::jit::load(archive.string()); }, dir / "out1").find(marker),
            std::string::npos)
      << "the crafted file does not run code under LibTorch's loader";
  const std::string ours = stdout_of(
      [&] {
        TXL_EXPECT_THROW_WITH(txl::models::load_model(archive), "can run code");
        TXL_EXPECT_THROW_WITH(txl::models::load_model(archive), "--trust-old-format");
      },
      dir / "out2");
  EXPECT_EQ(ours.find(marker), std::string::npos) << ours;
  // The same archive renamed .safetensors is refused just the same.
  txl::fs::write_atomic(dir / "old.safetensors", txl::fs::read_file(archive));
  TXL_EXPECT_THROW_WITH(txl::models::load_model(dir / "old.safetensors"), "first format");
}

// Python reads a txl checkpoint with the safetensors package from PyPI (in the build's virtual
// environment, TXL_TEST_PYTHON), and finds the model's tensors and the record.
TEST(Checkpoint, PythonSafetensorsReadsIt) {
  const std::string python = txl::test::python();
  if (access(python.c_str(), X_OK) != 0 ||
      run_program({python, "-c", "import safetensors.numpy"}) != 0)
    GTEST_SKIP()
        << "no Python with the safetensors package (tools/setup.sh installs it into build/venv)";
  TempDir dir;
  const auto path = dir / "c.safetensors";
  const auto c = tiny_checkpoint(dir.path(), 5);
  txl::models::write_checkpoint(path, c);
  const std::string script =
      "import json, sys\n"
      "from safetensors import safe_open\n"
      "with safe_open(sys.argv[1], framework='np') as f:\n"
      "    meta = f.metadata()\n"
      "    assert meta['format'] == 'txl-checkpoint' and meta['version'] == '2', meta.keys()\n"
      "    record = json.loads(meta['record'])\n"
      "    assert record['vocab_size'] == 30 and 'model:' in record['config']\n"
      "    names = list(f.keys())\n"
      "    assert 'tokenizer' in names and all(n.startswith('model/') or n == 'tokenizer' for n in "
      "names)\n"
      "    first = f.get_tensor(sys.argv[2])\n"
      "    assert abs(float(first.sum()) - float(sys.argv[3])) < 1e-3 * (1 + "
      "abs(float(sys.argv[3]))), first.sum()\n";
  EXPECT_EQ(run_program({python, "-c", script, path.string(), c.tensors.front().first,
                         std::to_string(c.tensors.front().second.sum().item<double>())}),
            0);
}

}  // namespace
