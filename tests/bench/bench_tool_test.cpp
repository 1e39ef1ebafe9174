// txl-bench as a program: flags reach the library, the JSON object alone goes to stdout (progress
// to stderr), errors exit non-zero with a message. A tiny model through --set keeps it fast.

#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "support/test_support.h"

namespace {

struct Run {
  int status = -1;
  std::string out;
};

// Runs build/bin/txl-bench with `args`, stdout captured, stderr to `err` (a path or /dev/null).
Run run_bench(const std::string& args, const std::string& err = "/dev/null") {
  const std::string command =
      (txl::test::bin_dir() / "txl-bench").string() + " " + args + " 2>" + err;
  Run r;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return r;
  std::array<char, 4096> buffer{};
  size_t n = 0;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) r.out.append(buffer.data(), n);
  const int status = pclose(pipe);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

const std::string kTiny =
    "--threads 1 --vocab 50 --set model.n_layer=1 --set model.d_model=16 --set model.n_head=2 "
    "--set model.d_head=8 --set model.d_inner=32 --set model.tgt_len=8 --set model.mem_len=8 "
    "--set train.batch_size=2 --set eval.batch_size=2";

TEST(BenchTool, QuickJsonIsOneObjectWithTheKeysOfRecord) {
  const auto r = run_bench("--quick --json " + kTiny);
  ASSERT_EQ(r.status, 0) << r.out;
  ASSERT_FALSE(r.out.empty());
  EXPECT_EQ(r.out.front(), '{');
  EXPECT_EQ(r.out.substr(r.out.size() - 2), "}\n");
  EXPECT_EQ(r.out.find('\n'), r.out.size() - 1) << "only the object on stdout";
  const auto json = nlohmann::json::parse(r.out);
  ASSERT_TRUE(json.is_object());
  for (const char* key :
       {"train_tokens_per_s", "train_tokens_per_s_bf16", "eval_tokens_per_s", "flops_per_token",
        "peak_gflops_fp32", "peak_gflops_bf16", "mfu", "peak_rss_mb",
        "sliding_over_memory_cost_512", "sliding_over_memory_cost_800", "generate_tokens_per_s_b1",
        "generate_tokens_per_s_b16", "generate_ms_per_token_ctx128",
        "generate_ms_per_token_ctx1024"}) {
    EXPECT_TRUE(json.contains(key) && json[key].is_number()) << key;
  }
  EXPECT_EQ(json["d_model"], 16) << "--set reached the model";
  EXPECT_EQ(json["quick"], true);
}

TEST(BenchTool, ProfilePrintsOpsAndCopyShare) {
  const auto r = run_bench("--profile --top 5 " + kTiny);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("self CPU time"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("copies"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fills"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("one training step"), std::string::npos) << r.out;
  const auto both = run_bench("--profile --profile-eval --top 5 " + kTiny);
  ASSERT_EQ(both.status, 0) << both.out;
  EXPECT_LT(both.out.find("one training step"),
            both.out.find("one evaluation segment (memory mode)"))
      << both.out;
}

TEST(BenchTool, GenerateAloneAndItsProfile) {
  const auto r = run_bench("--generate --quick --json " + kTiny);
  ASSERT_EQ(r.status, 0) << r.out;
  const auto json = nlohmann::json::parse(r.out);
  EXPECT_GT(json["generate_tokens_per_s_b16"].get<double>(), 0.0) << r.out;
  EXPECT_GT(json["generate_ms_per_token_ctx1024"].get<double>(), 0.0) << r.out;
  EXPECT_EQ(json["train_tokens_per_s"], 0) << "only the generation figures";
  const auto profile = run_bench("--profile-generate --generate-batch 2 --top 5 " + kTiny);
  ASSERT_EQ(profile.status, 0) << profile.out;
  EXPECT_NE(profile.out.find("one generation of 256 tokens x 2 rows"), std::string::npos)
      << profile.out;
  EXPECT_NE(profile.out.find("aten::"), std::string::npos) << profile.out;
}

TEST(BenchTool, ErrorsExitNonZeroWithTheReason) {
  txl::test::TempDir dir;
  const auto err = (dir / "err.txt").string();
  const auto missing = run_bench("--config " + (dir / "missing.yaml").string(), err);
  EXPECT_EQ(missing.status, 1);
  const auto bad = run_bench("--set model.n_layr=2", err);
  EXPECT_EQ(bad.status, 1);
  FILE* f = fopen(err.c_str(), "r");
  ASSERT_NE(f, nullptr);
  std::array<char, 4096> buffer{};
  const std::string text(buffer.data(), fread(buffer.data(), 1, buffer.size(), f));
  fclose(f);
  EXPECT_NE(text.find("n_layr"), std::string::npos) << text;
}

}  // namespace
