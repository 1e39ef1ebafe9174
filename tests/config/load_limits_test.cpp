// Loading at the limits: huge texts, numbers at their type's edge, run.name, unreadable paths.

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>

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

// How a --set text over 80 bytes appears in a location: its first 60 bytes and its size.
std::string shortened(const std::string& text) {
  return text.size() <= 80 ? text
                           : text.substr(0, 60) + "... (" + std::to_string(text.size()) + " bytes)";
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

}  // namespace
}  // namespace txl::config
