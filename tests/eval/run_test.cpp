// txl-eval's driver end to end on the tiny synthetic experiment: a checkpoint is evaluated from
// the checkpoint alone, and per-token losses come out as a NumPy file.
#include "txl-eval/eval_program.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include <CLI/CLI.hpp>

#include <nlohmann/json.hpp>

#include "support/process_as_program.h"
#include "support/test_support.h"
#include "support/tiny_experiment.h"
#include "txl/config/command_line.h"
#include "txl/config/load.h"
#include "txl/train/trainer.h"
#include "txl/util/fs.h"
#include "txl/util/log.h"
#include "txl/util/plot.h"
#include "txl/util/process.h"

namespace {

// The process as txl-eval sets it for tiny_experiment's run.threads: 1 thread.
const auto* const kProcess =
    ::testing::AddGlobalTestEnvironment(new txl::test::ProcessAsProgram(1));

TEST(EvalRun, TokenLossesAreANumpyFileInTextOrder) {
  txl::log::ScopedLevel quiet(txl::log::Level::kQuiet);
  txl::test::TempDir dir;
  auto config = txl::test::tiny_experiment(dir.path());
  config.train.max_steps = 3;
  txl::train::train(config, txl::test::quiet_run());

  txl::eval::EvalRequest request;
  request.checkpoint = (dir / "runs/tiny/checkpoint_last.safetensors").string();
  request.splits = {"valid"};
  request.overrides = {"eval.mode=sliding", "eval.stride=4"};
  request.token_losses_path = (dir / "losses.npy").string();
  request.json = true;
  std::ostringstream out;
  txl::eval::run(request, out);

  // {"split":"valid",...,"loss":x,...,"tokens":n,...}
  const auto json = nlohmann::json::parse(out.str());
  const double loss = json.at("loss").get<double>();
  const auto tokens = json.at("tokens").get<std::int64_t>();

  const std::string npy = txl::fs::read_file(dir / "losses.npy");
  ASSERT_GT(npy.size(), 10u);
  EXPECT_EQ(npy.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  const size_t header_len =
      static_cast<unsigned char>(npy[8]) | (static_cast<unsigned char>(npy[9]) << 8);
  EXPECT_EQ((10 + header_len) % 64, 0u);
  const std::string header = npy.substr(10, header_len);
  EXPECT_NE(header.find("'descr': '<f4'"), std::string::npos) << header;
  EXPECT_NE(header.find("'shape': (" + std::to_string(tokens) + ",)"), std::string::npos) << header;
  ASSERT_EQ(npy.size(), 10 + header_len + tokens * sizeof(float));
  double sum = 0;
  for (std::int64_t i = 0; i < tokens; ++i) {
    float v;
    std::memcpy(&v, npy.data() + 10 + header_len + i * sizeof(float), sizeof(float));
    sum += v;
  }
  EXPECT_NEAR(sum / tokens, loss, 1e-5);

  // A folder that does not exist is named before anything is evaluated.
  request.token_losses_path = (dir / "no_such_folder" / "losses.npy").string();
  TXL_EXPECT_THROW_WITH(txl::eval::run(request, out), "no_such_folder does not exist");
}

// A `text` corpus of a few hundred words in a folder, and a tiny model trained on it.
struct TextRun {
  std::filesystem::path corpus, checkpoint;
  txl::config::ExperimentConfig config;
};

std::string words(int lines, int offset) {
  std::string text;
  for (int i = 0; i < lines; ++i) {
    for (int j = 0; j < 8; ++j) text += "w" + std::to_string((i * 7 + j * 3 + offset) % 40) + " ";
    text += "\n";
  }
  return text;
}

TextRun train_on_text(const txl::test::TempDir& dir) {
  TextRun r;
  r.corpus = dir / "corpus";
  txl::test::write_text(r.corpus / "train.txt", words(120, 0));
  txl::test::write_text(r.corpus / "valid.txt", words(20, 5));
  txl::test::write_text(r.corpus / "test.txt", words(20, 9));
  r.config = txl::test::tiny_experiment(dir.path(), "text");
  r.config.data.corpus = txl::config::Corpus::kText;
  r.config.data.path = r.corpus.string();
  r.config.train.max_steps = 3;
  txl::train::train(r.config, txl::test::quiet_run());
  r.checkpoint = dir / "runs/text/checkpoint_last.safetensors";
  return r;
}

// The number under `key` in the first JSON object of `json` (one object a line).
double json_number(const std::string& json, const std::string& key) {
  const auto record = nlohmann::json::parse(json.substr(0, json.find('\n')));
  EXPECT_TRUE(record.contains(key)) << json;
  return record.value(key, 0.0);
}

std::string evaluate_json(txl::eval::EvalRequest request) {
  request.json = true;
  std::ostringstream out;
  txl::eval::run(request, out);
  return out.str();
}

// The corpus changed after training (another train split: a tokenizer trained now would differ).
// Evaluation still uses the checkpoint's own tokenizer, gives the same perplexity, and leaves
// the corpus's cached tokenizer alone.
TEST(EvalRun, AChangedCorpusIsEncodedWithTheCheckpointsOwnTokenizer) {
  txl::log::ScopedLevel quiet(txl::log::Level::kQuiet);
  txl::test::TempDir dir;
  const TextRun run = train_on_text(dir);
  txl::eval::EvalRequest request;
  request.checkpoint = run.checkpoint.string();
  request.splits = {"valid"};
  const double before = json_number(evaluate_json(request), "ppl");

  std::map<std::string, std::string> cached;  // the corpus cache's tokenizer files
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir / "cache"))
    if (entry.path().filename().string().rfind("tokenizer", 0) == 0)
      cached[entry.path().string()] = txl::fs::read_file(entry.path());
  ASSERT_FALSE(cached.empty());
  txl::test::write_text(run.corpus / "train.txt", words(200, 17) + "brand new words here\n");
  EXPECT_EQ(json_number(evaluate_json(request), "ppl"), before);
  for (const auto& [path, bytes] : cached) EXPECT_EQ(txl::fs::read_file(path), bytes) << path;
}

TEST(EvalRun, AFileOrATextNeedsNoCorpus) {
  txl::log::ScopedLevel quiet(txl::log::Level::kQuiet);
  txl::test::TempDir dir;
  const TextRun run = train_on_text(dir);
  txl::test::write_text(dir / "some.txt", words(3, 2));
  txl::test::remove_tree(run.corpus);
  txl::test::remove_tree(dir / "cache");
  txl::eval::EvalRequest request;
  request.checkpoint = run.checkpoint.string();
  request.file = (dir / "some.txt").string();
  const double from_file = json_number(evaluate_json(request), "loss");
  request.file.clear();
  request.text = words(3, 2);
  EXPECT_NEAR(json_number(evaluate_json(request), "loss"), from_file, 1e-9);
  EXPECT_GT(json_number(evaluate_json(request), "tokens"), 20);
  EXPECT_FALSE(std::filesystem::exists(dir / "cache"));
}

TEST(EvalRun, SetChangesEvaluationButNeverTheModel) {
  txl::log::ScopedLevel quiet(txl::log::Level::kQuiet);
  txl::test::TempDir dir;
  const TextRun run = train_on_text(dir);
  txl::eval::EvalRequest request;
  request.checkpoint = run.checkpoint.string();
  request.splits = {"valid"};
  request.overrides = {"eval.mem_len=4"};
  EXPECT_EQ(json_number(evaluate_json(request), "mem_len"), 4);
  request.overrides = {"model.d_inner=8"};
  TXL_EXPECT_THROW_WITH(evaluate_json(request), "model.d_inner");
  request.overrides = {"train.lr=1"};
  TXL_EXPECT_THROW_WITH(evaluate_json(request),
                        "only eval.*, data.*, run.threads, run.device, run.precision and "
                        "run.dist_timeout may be set here");
}

TEST(EvalRun, SweepPlotIntoAFolderNameAShellWouldSplitRunsNothing) {
  txl::log::ScopedLevel quiet(txl::log::Level::kQuiet);
  txl::test::TempDir dir;
  auto config = txl::test::tiny_experiment(dir.path());
  config.train.max_steps = 2;
  txl::train::train(config, txl::test::quiet_run());

  const auto out = dir / txl::test::kShellHostileName / txl::test::kShellHostileName;
  std::filesystem::create_directories(out);
  txl::eval::EvalRequest request;
  request.checkpoint = (dir / "runs/tiny/checkpoint_last.safetensors").string();
  request.splits = {"valid"};
  request.overrides = {"eval.max_tokens=64", "eval.sweep_mem_lens=[0,8]"};
  request.sweep = true;
  request.out_dir = out.string();
  std::ostringstream table;
  txl::eval::run(request, table);

  EXPECT_TRUE(txl::test::nothing_executed(out));
  EXPECT_TRUE(std::filesystem::exists(out / "context_sweep.json"));
  if (!txl::plot::matplotlib_available()) {
    GTEST_SKIP() << "PNG part skipped: the plot interpreter " << txl::plot::python_interpreter()
                 << " cannot import matplotlib";
  }
  const std::string png = txl::fs::read_file(out / "context_sweep.png");
  EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n"));
}

TEST(EvalRun, AMissingCheckpointIsNamed) {
  txl::eval::EvalRequest request;
  request.checkpoint = "/nonexistent/ckpt.pt";
  std::ostringstream out;
  TXL_EXPECT_THROW_WITH(txl::eval::run(request, out), "/nonexistent/ckpt.pt");
}

// The overrides txl-eval's command line gives for `args` (without the checkpoint).
std::vector<std::string> eval_overrides(std::vector<std::string> args) {
  CLI::App app{"txl-eval"};
  txl::config::CommandLine line;
  txl::config::CommandLineOptions options;
  options.config = txl::config::CommandLineOptions::Config::kAbsent;
  txl::config::add_experiment_options(app, line, options);
  txl::eval::add_eval_flags(app, line);
  std::reverse(args.begin(), args.end());  // CLI11 takes them backwards
  app.parse(args);
  return line.overrides;
}

// txl-eval's shorthand flags are --set of eval keys the loader knows, so their values are
// validated like any experiment file's.
TEST(EvalRun, FlagsAreOverridesOfEvalKeys) {
  const auto keys = txl::config::experiment_keys();
  std::set<std::string> flags;
  for (const auto& flag : txl::eval::eval_flags()) {
    EXPECT_TRUE(flags.insert(flag.flag).second) << flag.flag;
    EXPECT_EQ(std::string(flag.key).rfind("eval.", 0), 0u) << flag.key;
    EXPECT_NE(std::find(keys.begin(), keys.end(), flag.key), keys.end()) << flag.key;
    // Every flag is its --set, whatever the value.
    EXPECT_EQ(eval_overrides({flag.flag, "7"}),
              std::vector<std::string>{std::string(flag.key) + (flag.list ? "=[7]" : "=7")});
  }
  const auto& mode = txl::eval::eval_flags().front();
  EXPECT_EQ(eval_overrides({mode.flag, "sliding"}), std::vector<std::string>{"eval.mode=sliding"});
  const auto& sweep = txl::eval::eval_flags().back();
  EXPECT_EQ(eval_overrides({sweep.flag, "0,64"}),
            std::vector<std::string>{"eval.sweep_mem_lens=[0,64]"});
  // A flag comes after every --set, so it wins over a --set of the same key.
  EXPECT_EQ(eval_overrides({"--mem-len", "8", "--set", "eval.mem_len=4", "--set", "data.path=x"}),
            (std::vector<std::string>{"eval.mem_len=4", "data.path=x", "eval.mem_len=8"}));
  // A bad value is the loader's error, naming the key.
  TXL_EXPECT_THROW_WITH(
      txl::config::parse_experiment_string("{}", "flags", eval_overrides({mode.flag, "beam"})),
      "eval.mode");
  auto c =
      txl::config::parse_experiment_string("{}", "flags", eval_overrides({sweep.flag, "0,64"}));
  EXPECT_EQ(c.eval.sweep_mem_lens, std::vector<int>({0, 64}));
}

struct ToolResult {
  int status;
  std::string out;     // stdout
  std::string output;  // stdout, then the end of stderr
};

// txl-eval (the program) beside this test binary, else in TXL_BIN_DIR, run with `args`.
ToolResult txl_eval(std::vector<std::string> args) {
  std::error_code ec;
  auto tool = std::filesystem::read_symlink("/proc/self/exe", ec).parent_path() / "txl-eval";
  if (ec || !std::filesystem::exists(tool)) tool = txl::test::bin_dir() / "txl-eval";
  args.insert(args.begin(), tool.string());
  const auto r = txl::process::run_program(args);
  EXPECT_TRUE(r.started) << r.error;
  return {r.exit_code, r.out, r.out + r.stderr_tail};
}

// The last checkpoint of the tiny experiment `name` trained for `steps` steps in `dir`.
std::string trained_tiny(const txl::test::TempDir& dir, const std::string& name = "tiny",
                         int steps = 3) {
  auto config = txl::test::tiny_experiment(dir.path(), name);
  config.train.max_steps = steps;
  txl::train::train(config, txl::test::quiet_run());
  return (dir / ("runs/" + name + "/checkpoint_last.safetensors")).string();
}

// txl-eval takes the grammar of every program: its flags are the --set they stand for (the same
// figures, the same resolved experiment), and a mistake names the key and exits 1.
TEST(EvalTool, FlagsAndSetAreOneGrammar) {
  txl::log::ScopedLevel quiet(txl::log::Level::kQuiet);
  txl::test::TempDir dir;
  const std::string ckpt = trained_tiny(dir);
  const auto flags = txl_eval({ckpt, "--split", "valid", "--json", "--mode", "sliding", "--stride",
                               "4", "--max-tokens", "64", "--threads", "1"});
  const auto sets =
      txl_eval({ckpt, "--split", "valid", "--json", "--set", "eval.mode=sliding", "--set",
                "eval.stride=4", "--set", "eval.max_tokens=64", "--set", "run.threads=1"});
  ASSERT_EQ(flags.status, 0) << flags.output;
  ASSERT_EQ(sets.status, 0) << sets.output;
  const auto a = nlohmann::json::parse(flags.out), b = nlohmann::json::parse(sets.out);
  EXPECT_EQ(a["mode"], "sliding");
  EXPECT_EQ(a["stride"], 4);
  EXPECT_EQ(a["tokens"], 64);
  for (const char* key : {"mode", "tgt_len", "mem_len", "window", "stride", "tokens", "loss"})
    EXPECT_EQ(a[key], b[key]) << key;

  const auto dump =
      txl_eval({ckpt, "--mem-len", "5", "--set", "data.path=/corpus", "--dump-config"});
  ASSERT_EQ(dump.status, 0) << dump.output;
  auto expected = txl::models::load_model(ckpt).config;
  expected.eval.mem_len = 5;
  expected.data.path = "/corpus";
  EXPECT_EQ(dump.out, txl::config::dump_experiment(expected));

  const auto typo = txl_eval({ckpt, "--set", "eval.mem_lne=4"});
  EXPECT_EQ(typo.status, 1);
  EXPECT_NE(typo.output.find("error: --set eval.mem_lne=4: unknown key 'eval.mem_lne'; did you "
                             "mean 'eval.mem_len'?"),
            std::string::npos)
      << typo.output;
  const auto bad = txl_eval({ckpt, "--mem-len", "-7"});
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.output.find("--set eval.mem_len=-7: eval.mem_len: must be >= -1, got -7"),
            std::string::npos)
      << bad.output;
  const auto model = txl_eval({ckpt, "--set", "model.n_layer=3"});
  EXPECT_EQ(model.status, 1);
  EXPECT_NE(model.output.find("model.n_layer: 2 -> 3: only eval.*"), std::string::npos)
      << model.output;
}

}  // namespace

namespace {

// txl-eval --by-position: the JSON carries the mean loss at each of the Q positions and the
// tokens there, which weigh back to the loss; the table prints them; sliding windows refuse.
TEST(EvalTool, ByPositionGivesTheLossAtEachPositionOfTheSegment) {
  txl::log::ScopedLevel quiet(txl::log::Level::kQuiet);
  txl::test::TempDir dir;
  const std::string ckpt = trained_tiny(dir);
  const auto json =
      txl_eval({ckpt, "--split", "valid", "--json", "--by-position", "--threads", "1"});
  ASSERT_EQ(json.status, 0) << json.output;
  const auto r = nlohmann::json::parse(json.out);
  const auto losses = r.at("loss_by_position").get<std::vector<double>>();
  const auto tokens = r.at("tokens_by_position").get<std::vector<std::int64_t>>();
  ASSERT_EQ(losses.size(), static_cast<size_t>(txl::models::load_model(ckpt).config.model.tgt_len));
  ASSERT_EQ(tokens.size(), losses.size());
  double sum = 0.0;
  std::int64_t count = 0;
  for (size_t p = 0; p < losses.size(); ++p) {
    sum += losses[p] * static_cast<double>(tokens[p]);
    count += tokens[p];
  }
  EXPECT_EQ(count, r.at("tokens").get<std::int64_t>());
  EXPECT_NEAR(sum / static_cast<double>(count), r.at("loss").get<double>(), 1e-6);
  const auto table = txl_eval({ckpt, "--split", "valid", "--by-position", "--threads", "1"});
  ASSERT_EQ(table.status, 0) << table.output;
  EXPECT_NE(table.out.find("loss by position in the segment (0..15)"), std::string::npos)
      << table.out;
  const auto sliding = txl_eval({ckpt, "--split", "valid", "--by-position", "--mode", "sliding"});
  EXPECT_EQ(sliding.status, 1);
  EXPECT_NE(sliding.output.find("not sliding windows"), std::string::npos) << sliding.output;
}

}  // namespace

namespace {

// txl-eval --compare: both checkpoints on the same tokens; the ratio is exp(loss_a - loss_b)
// with its interval around it; a checkpoint against itself is ratio 1, not significant; another
// tokenizer is refused by name.
TEST(EvalTool, CompareGivesTheRatioOfTwoCheckpointsWithItsInterval) {
  txl::log::ScopedLevel quiet(txl::log::Level::kQuiet);
  txl::test::TempDir dir;
  auto other = txl::test::tiny_experiment(dir.path(), "other");
  other.train.max_steps = 1;
  other.data.synthetic.alphabet = 12;  // another vocabulary
  txl::train::train(other, txl::test::quiet_run());
  const std::string ca = trained_tiny(dir, "a", 3), cb = trained_tiny(dir, "b", 6);
  const auto r = txl_eval({ca, "--compare", cb, "--split", "valid", "--json", "--threads", "1"});
  ASSERT_EQ(r.status, 0) << r.output;
  std::istringstream lines(r.out);
  std::vector<nlohmann::json> records;
  for (std::string line; std::getline(lines, line);) records.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(records.size(), 3u) << r.out;
  const auto& c = records[2].at("compare");
  const double ratio = c.at("ratio").get<double>();
  EXPECT_NEAR(ratio,
              std::exp(records[0].at("loss").get<double>() - records[1].at("loss").get<double>()),
              1e-9);
  EXPECT_EQ(records[0].at("tokens"), records[1].at("tokens"));
  EXPECT_LE(c.at("low").get<double>(), ratio);
  EXPECT_GE(c.at("high").get<double>(), ratio);
  EXPECT_EQ(c.at("block"), 64);
  const auto self = txl_eval({ca, "--compare", ca, "--split", "valid", "--threads", "1"});
  ASSERT_EQ(self.status, 0) << self.output;
  EXPECT_NE(self.out.find("= 1.0000, 95% interval [1.0000, 1.0000]"), std::string::npos)
      << self.out;
  EXPECT_NE(self.out.find("not significant"), std::string::npos) << self.out;
  const auto refused =
      txl_eval({ca, "--compare", (dir / "runs/other/checkpoint_last.safetensors").string()});
  EXPECT_EQ(refused.status, 1);
  EXPECT_NE(refused.output.find("has another tokenizer"), std::string::npos) << refused.output;
}

// --where-memory-helps: after the comparison, the gain by group, whose total is the comparison's
// ratio and whose groups cover every scored token; it needs --compare.
TEST(EvalTool, WhereMemoryHelpsSplitsTheComparison) {
  txl::log::ScopedLevel quiet(txl::log::Level::kQuiet);
  txl::test::TempDir dir;
  const std::string ca = trained_tiny(dir, "a", 3), cb = trained_tiny(dir, "b", 6);
  const auto r = txl_eval({ca, "--compare", cb, "--where-memory-helps", "--split", "valid",
                           "--json", "--threads", "1"});
  ASSERT_EQ(r.status, 0) << r.output;
  std::istringstream lines(r.out);
  std::vector<nlohmann::json> records;
  for (std::string line; std::getline(lines, line);) records.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(records.size(), 4u) << r.out;
  ASSERT_TRUE(records[3].is_array() && records[3].size() == 1u) << r.out;
  const auto& help = records[3][0];
  EXPECT_NEAR(help.at("total").at("ratio").get<double>(),
              records[2].at("compare").at("ratio").get<double>(), 1e-6);
  for (const auto& table : help.at("tables")) {
    std::int64_t tokens = 0;
    for (const auto& row : table.at("rows")) tokens += row.at("tokens").get<std::int64_t>();
    EXPECT_EQ(tokens, records[0].at("tokens").get<std::int64_t>()) << table.at("title");
  }
  const auto table = txl_eval({ca, "--compare", cb, "--where-memory-helps", "--split", "valid"});
  ASSERT_EQ(table.status, 0) << table.output;
  EXPECT_NE(table.out.find("| in memory |"), std::string::npos) << table.out;
  // --attention-by-distance: a table per checkpoint after the comparison, and JSON rows that sum
  // to one.
  const auto attention =
      txl_eval({ca, "--compare", cb, "--attention-by-distance", "--split", "valid"});
  ASSERT_EQ(attention.status, 0) << attention.output;
  EXPECT_NE(attention.out.find("valid, " + cb + ": Share of attention weight"), std::string::npos)
      << attention.out;
  const auto one = txl_eval({ca, "--attention-by-distance", "--split", "valid", "--json"});
  ASSERT_EQ(one.status, 0) << one.output;
  std::istringstream one_lines(one.out);
  std::string last;
  for (std::string line; std::getline(one_lines, line);) last = line;
  const auto mass = nlohmann::json::parse(last).at("attention_by_distance");
  for (const auto& layer : mass.at("mass")) {
    double sum = 0;
    for (const auto& share : layer) sum += share.get<double>();
    EXPECT_NEAR(sum, 1.0, 1e-6) << one.out;
  }
  const auto alone = txl_eval({ca, "--where-memory-helps", "--split", "valid"});
  EXPECT_EQ(alone.status, 1);
  EXPECT_NE(alone.output.find("--where-memory-helps needs --compare"), std::string::npos)
      << alone.output;
}

}  // namespace
