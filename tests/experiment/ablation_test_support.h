#pragma once
// Helpers shared by the ablation runner's tests: a tiny three-variant ablation on the synthetic
// corpus, quiet options, files read and signed as the runner writes them, and the test fixture.
// The binary's process settings (ProcessAsProgram) are registered once, in ablation_test.cpp.

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "support/test_support.h"
#include "txl/experiment/ablation.h"
#include "txl/util/fs.h"
#include "txl/util/sha256.h"
#include "txl/util/stop.h"

namespace txl::experiment::ablation_test {

using txl::test::TempDir;
namespace stdfs = std::filesystem;

// A model and budget small enough that a variant trains and evaluates in about a second.
inline txl::config::ExperimentConfig tiny_base(const TempDir& dir) {
  txl::config::ExperimentConfig c;
  c.run.seed = 11;
  c.run.threads = 1;
  c.run.log_interval = 2;
  c.data.corpus = txl::config::Corpus::kSynthetic;
  c.data.cache_dir = (dir / "cache").string();
  c.data.tokenizer.type = txl::config::TokenizerType::kWord;
  c.data.synthetic.documents = 24;
  c.data.synthetic.gap = 12;
  c.model.n_layer = 1;
  c.model.d_model = 16;
  c.model.n_head = 2;
  c.model.d_head = 8;
  c.model.d_inner = 32;
  c.model.dropout = 0.0;
  c.model.tgt_len = 8;
  c.model.mem_len = 8;
  c.train.lr = 1e-3;
  c.train.batch_size = 4;
  c.train.max_steps = 6;
  c.train.eval_interval = 3;
  c.train.checkpoint_interval = 3;
  c.train.warmup_steps = 0;
  c.eval.batch_size = 4;
  c.eval.stride = 4;
  c.eval.splits = {"valid", "test"};
  return c;
}

inline txl::config::AblationConfig tiny_ablation(const TempDir& dir) {
  txl::config::AblationConfig a;
  a.name = "tiny";
  a.output_dir = (dir / "runs" / "tiny").string();
  a.base = tiny_base(dir);
  auto add = [&](const std::string& name, txl::config::AttnType attn, int mem_len) {
    auto c = a.base;
    c.run.name = "tiny/" + name;
    c.run.output_dir = (dir / "runs" / "tiny" / name).string();
    c.model.attn_type = attn;
    c.model.mem_len = mem_len;
    a.variants.emplace_back(name, c);
  };
  add("vanilla", txl::config::AttnType::kVanilla, 0);
  add("rel_no_memory", txl::config::AttnType::kXl, 0);
  add("xl", txl::config::AttnType::kXl, 8);
  return a;
}

inline txl::experiment::AblationOptions quiet_options() {
  txl::experiment::AblationOptions o;
  o.quiet = true;
  o.report.plots = false;
  o.sweep = false;  // the tests of seeds and sweeps turn it on
  return o;
}

inline txl::config::ExperimentConfig& variant(txl::config::AblationConfig& a,
                                              const std::string& name) {
  for (auto& [n, c] : a.variants) {
    if (n == name) return c;
  }
  throw std::runtime_error("no variant " + name);
}

inline stdfs::path run_dir(const txl::config::AblationConfig& a, const std::string& name) {
  return stdfs::path(a.output_dir) / name;
}

inline std::string read(const stdfs::path& p) { return txl::fs::read_file(p); }

// Writes `j` back as the runner writes its files: with the SHA-256 of the rest under "sha256",
// so that only the cross-checks can find an edit made this way.
inline void write_signed(const stdfs::path& path, nlohmann::ordered_json j) {
  j.erase("sha256");
  txl::Sha256 sha;
  sha.update(j.dump());
  j["sha256"] = sha.hex_digest();
  txl::fs::write_atomic(path, j.dump(2));
}

// Resets the stop flag whatever a test did with it.
class Ablation : public ::testing::Test {
 protected:
  void SetUp() override { txl::util::stop_signal().store(0); }
  void TearDown() override { txl::util::stop_signal().store(0); }
};

}  // namespace txl::experiment::ablation_test
