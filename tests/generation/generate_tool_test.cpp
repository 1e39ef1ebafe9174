// txl-generate end to end on a tiny trained checkpoint: the program gives what the library gives,
// prompts come from flags, a file or a stream, and every mistake is a clear message.
#include <gtest/gtest.h>

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "support/process_as_program.h"
#include "support/test_support.h"
#include "support/tiny_experiment.h"
#include "txl-generate/generate_program.h"
#include "txl/config/load.h"
#include "txl/models/checkpoint.h"
#include "txl/util/log.h"
#include "txl/util/process.h"

namespace {

const auto* const kProcess =
    ::testing::AddGlobalTestEnvironment(new txl::test::ProcessAsProgram(1));

struct ToolResult {
  int status;
  std::string out;     // stdout
  std::string output;  // stdout, then the end of stderr
};

ToolResult txl_generate(std::vector<std::string> args) {
  std::error_code ec;
  auto tool = std::filesystem::read_symlink("/proc/self/exe", ec).parent_path() / "txl-generate";
  if (ec || !std::filesystem::exists(tool)) tool = txl::test::bin_dir() / "txl-generate";
  args.insert(args.begin(), tool.string());
  args.insert(args.end(), {"--threads", "1"});
  const auto r = txl::process::run_program(args);
  EXPECT_TRUE(r.started) << r.error;
  return {r.exit_code, r.out, r.out + r.stderr_tail};
}

// One checkpoint for the file: the tiny experiment trained for a few steps.
const std::string& checkpoint() {
  static txl::test::TempDir dir;
  static const std::string path = [] {
    txl::log::ScopedLevel quiet(txl::log::Level::kQuiet);
    auto config = txl::test::tiny_experiment(dir.path(), "gen");
    config.train.max_steps = 3;
    txl::train::train(config, txl::test::quiet_run());
    return (dir / "runs/gen/checkpoint_last.safetensors").string();
  }();
  return path;
}

// A prompt of the tiny corpus's words.
std::string words(const txl::data::Tokenizer& tokenizer, int first, int count) {
  std::string text;
  for (int i = 0; i < count; ++i) text += (i ? " " : "") + tokenizer.piece(first + i);
  return text;
}

TEST(GenerateTool, GreedyTextIsTheLibrarysContinuation) {
  const auto loaded = txl::models::load_model(checkpoint());
  const auto& tokenizer = *loaded.tokenizer;
  const std::string prompt = words(tokenizer, 5, 4);
  const auto r = txl_generate({checkpoint(), "--prompt", prompt, "--temperature", "0",
                               "--max-new-tokens", "7", "--json", "--ignore-eos"});
  ASSERT_EQ(r.status, 0) << r.output;
  std::istringstream lines(r.out);
  std::string first, summary;
  std::getline(lines, first);
  std::getline(lines, summary);
  const auto row = nlohmann::json::parse(first);
  // The library on the same model: <eos>, then the prompt's ids.
  std::vector<std::int64_t> ids = {tokenizer.eos_id()};
  for (auto id : tokenizer.encode(prompt)) ids.push_back(id);
  txl::generation::GenerateOptions o;
  o.temperature = 0;
  o.max_new_tokens = 7;
  o.lengths = txl::generation::decode_options(loaded.config);
  auto model = loaded.model;
  const auto expected = txl::generation::generate(model, {ids}, o, &tokenizer).rows[0];
  EXPECT_EQ(row.at("tokens").get<std::vector<std::int64_t>>(), expected.tokens);
  EXPECT_EQ(row.at("text").get<std::string>(), expected.text);
  EXPECT_NEAR(row.at("log_prob").get<double>(), expected.log_prob, 1e-4);
  EXPECT_LT(row.at("log_prob").get<double>(), 0.0);
  EXPECT_EQ(row.at("finish"), "length");
  EXPECT_EQ(row.at("prompt"), prompt);
  EXPECT_GT(row.at("tokens_per_s").get<double>(), 0.0);
  const auto s = nlohmann::json::parse(summary).at("summary");
  EXPECT_EQ(s.at("new_tokens"), 7);
  EXPECT_EQ(s.at("read_tokens"), static_cast<std::int64_t>(ids.size()));
  // Plain text: the prompt and its continuation.
  const auto plain = txl_generate({checkpoint(), "--prompt", prompt, "--temperature", "0",
                                   "--max-new-tokens", "7", "--ignore-eos"});
  ASSERT_EQ(plain.status, 0) << plain.output;
  EXPECT_EQ(plain.out, prompt + expected.text + "\n");
}

TEST(GenerateTool, PromptsFromAFileAStreamAndAContext) {
  const auto loaded = txl::models::load_model(checkpoint());
  txl::test::TempDir dir;
  txl::test::write_text(dir / "prompts.txt", words(*loaded.tokenizer, 3, 2) + "\n\n" +
                                                 words(*loaded.tokenizer, 9, 3) + "\n");
  txl::test::write_text(dir / "book.txt", words(*loaded.tokenizer, 4, 40) + "\n" +
                                              words(*loaded.tokenizer, 6, 30) + "\n");
  const auto r =
      txl_generate({checkpoint(), "--prompts", (dir / "prompts.txt").string(), "--context-file",
                    (dir / "book.txt").string(), "--json", "--max-new-tokens", "5", "--seed", "3"});
  ASSERT_EQ(r.status, 0) << r.output;
  std::istringstream lines(r.out);
  std::vector<nlohmann::json> rows;
  for (std::string line; std::getline(lines, line);) rows.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(rows.size(), 4u) << r.out;  // three prompts (one empty) and the summary
  // Lines come as prompts finish; "index" says which prompt a line is.
  std::sort(rows.begin(), rows.begin() + 3,
            [](const auto& a, const auto& b) { return a.at("index") < b.at("index"); });
  EXPECT_EQ(rows[1].at("prompt"), "");
  const auto s = rows[3].at("summary");
  EXPECT_EQ(s.at("context_tokens"), 40 + 30 + 2);  // two lines, an <eos> after each
  // Read once into the memory: then only the prompts' own tokens (2 + 0 + 3 words).
  EXPECT_LT(s.at("read_tokens").get<std::int64_t>(), 40 + 30 + 2);
  EXPECT_TRUE(s.at("context_once").get<bool>());
  EXPECT_GT(s.at("context_seconds").get<double>(), 0.0);
  EXPECT_NE(r.output.find("context: 72 tokens"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("read once into the memory"), std::string::npos) << r.output;
  // The library reads prompts from a stream when the request names none.
  txl::generation::GenerateRequest request;
  request.checkpoint = checkpoint();
  request.options.max_new_tokens = 3;
  request.json = true;
  std::istringstream in("a\nb\n");
  std::ostringstream out;
  txl::generation::run_generate(request, txl::generation::load_generation(request), in, out);
  const std::string printed = out.str();
  EXPECT_EQ(std::count(printed.begin(), printed.end(), '\n'), 3) << printed;
}

// Its flags are the --set they stand for: the same resolved experiment, the same text.
TEST(GenerateTool, FlagsAndSetAreOneGrammar) {
  const auto dump =
      txl_generate({checkpoint(), "--mem-len", "5", "--tgt-len", "3", "--dump-config"});
  ASSERT_EQ(dump.status, 0) << dump.output;
  auto expected = txl::models::load_model(checkpoint()).config;
  expected.eval.mem_len = 5;
  expected.eval.tgt_len = 3;
  expected.run.threads = 1;
  EXPECT_EQ(dump.out, txl::config::dump_experiment(expected));
  const auto flags = txl_generate({checkpoint(), "--prompt", "x", "--mem-len", "5", "--tgt-len",
                                   "3", "--temperature", "0", "--max-new-tokens", "9", "--json"});
  const auto sets =
      txl_generate({checkpoint(), "--prompt", "x", "--set", "eval.mem_len=5", "--set",
                    "eval.tgt_len=3", "--temperature", "0", "--max-new-tokens", "9", "--json"});
  ASSERT_EQ(flags.status, 0) << flags.output;
  EXPECT_EQ(flags.out.substr(0, flags.out.find("\"seconds\"")),
            sets.out.substr(0, sets.out.find("\"seconds\"")));
}

// Decoding starts from the memory evaluation starts from: model.mem_init, which eval.mem_init
// (--mem-init) overrides, as in txl-eval.
TEST(GenerateTool, DecodingStartsFromTheMemoryEvaluationStartsFrom) {
  auto config = txl::models::load_model(checkpoint()).config;
  config.model.mem_init = txl::config::MemInit::kEmpty;
  EXPECT_FALSE(txl::generation::decode_options(config).zero_memory);
  config.model.mem_init = txl::config::MemInit::kZeros;
  EXPECT_TRUE(txl::generation::decode_options(config).zero_memory);
  config.eval.mem_init = txl::config::EvalMemInit::kEmpty;
  EXPECT_FALSE(txl::generation::decode_options(config).zero_memory);
  config.model.mem_init = txl::config::MemInit::kEmpty;
  config.eval.mem_init = txl::config::EvalMemInit::kZeros;
  EXPECT_TRUE(txl::generation::decode_options(config).zero_memory);
  // The program's flag is the --set of the same key, and it changes the text's log-probability.
  const auto read = [](const std::string& mem_init) {
    const auto r = txl_generate({checkpoint(), "--prompt", "x", "--mem-init", mem_init,
                                 "--temperature", "0", "--max-new-tokens", "4", "--json"});
    EXPECT_EQ(r.status, 0) << r.output;
    return nlohmann::json::parse(r.out.substr(0, r.out.find('\n')));
  };
  const auto empty = read("empty"), zeros = read("zeros");
  EXPECT_NE(empty["log_prob"].get<double>(), zeros["log_prob"].get<double>());
}

// A stream that, once `trigger` says so of what it has been given, sets `interrupt` as a
// Ctrl-C would: what reached it before then was printed while generation went on.
class TriggerBuf : public std::stringbuf {
 public:
  TriggerBuf(std::function<bool(const std::string&)> trigger, std::atomic<int>& interrupt)
      : trigger_(std::move(trigger)), interrupt_(interrupt) {}
  int sync() override {
    if (interrupt_.load() == 0 && trigger_(str())) interrupt_.store(SIGINT);
    return 0;
  }

 private:
  std::function<bool(const std::string&)> trigger_;
  std::atomic<int>& interrupt_;
};

// Issue 32: txl-generate printed everything at the end, so a long generation showed nothing and
// a signal lost it all. Text now streams: a stop requested once the continuation has begun to
// reach the stream ends it there, with the text so far and a newline.
TEST(GenerateTool, TextStreamsAndJsonLinesComeAsPromptsFinish) {
  txl::generation::GenerateRequest request;
  request.checkpoint = checkpoint();
  request.prompts = {"w"};
  request.ignore_eos = true;
  request.options.max_new_tokens = 2000;
  const auto loaded = txl::generation::load_generation(request);
  std::atomic<int> interrupt{0};
  TriggerBuf text_buf([](const std::string& s) { return s.size() > 20; }, interrupt);
  std::ostream text(&text_buf);
  std::istringstream none;
  EXPECT_EQ(txl::generation::run_generate(request, loaded, none, text, &interrupt), SIGINT)
      << "generation ran to its end before any text reached the stream";
  const std::string printed = text_buf.str();
  EXPECT_EQ(printed.rfind("w", 0), 0u) << printed;
  EXPECT_EQ(printed.back(), '\n');

  // JSON: a line per prompt as it finishes (at <eos>, at random steps), so the first line is
  // out while the others still generate; a stop then ends them "interrupted".
  request.prompts = {"a", "b", "c", "d"};
  request.ignore_eos = false;
  request.json = true;
  request.options.max_new_tokens = 1000000000;
  interrupt.store(0);
  TriggerBuf json_buf([](const std::string& s) { return s.find('\n') != std::string::npos; },
                      interrupt);
  std::ostream json(&json_buf);
  EXPECT_EQ(txl::generation::run_generate(request, loaded, none, json, &interrupt), SIGINT);
  std::istringstream lines(json_buf.str());
  std::vector<nlohmann::json> rows;
  for (std::string line; std::getline(lines, line);) rows.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(rows.size(), 5u) << json_buf.str();
  EXPECT_EQ(rows[0].at("finish"), "eos");
  int interrupted = 0;
  std::set<int> indices;
  for (size_t i = 0; i < 4; ++i) {
    interrupted += rows[i].at("finish") == "interrupted";
    indices.insert(rows[i].at("index").get<int>());
  }
  EXPECT_GT(interrupted, 0);
  EXPECT_EQ(indices, (std::set<int>{0, 1, 2, 3}));
  EXPECT_EQ(rows[4].at("summary").at("interrupted_by_signal"), SIGINT);
}

// Prompts of different lengths with one-token segments (--tgt-len 1): the batch reads the
// left-padded prompts one query per row, and each prompt gives what it gives alone (before,
// "attend_cached: first slot 15 outside [0, 13)").
TEST(GenerateTool, PromptsOfDifferentLengthsInOneTokenSegments) {
  const auto loaded = txl::models::load_model(checkpoint());
  const std::string short_prompt = words(*loaded.tokenizer, 5, 2);
  const std::string long_prompt = words(*loaded.tokenizer, 3, 9);
  const std::vector<std::string> common = {"--tgt-len",     "1",     "--mem-len",        "6",
                                           "--temperature", "0",     "--max-new-tokens", "5",
                                           "--ignore-eos",  "--json"};
  auto run = [&](std::vector<std::string> prompts) {
    std::vector<std::string> args = {checkpoint()};
    for (const auto& p : prompts) args.insert(args.end(), {"--prompt", p});
    args.insert(args.end(), common.begin(), common.end());
    const auto r = txl_generate(args);
    EXPECT_EQ(r.status, 0) << r.output;
    std::map<int, std::vector<std::int64_t>> tokens;  // by index
    std::istringstream lines(r.out);
    for (std::string line; std::getline(lines, line);) {
      const auto row = nlohmann::json::parse(line);
      if (row.contains("index"))
        tokens[row.at("index").get<int>()] = row.at("tokens").get<std::vector<std::int64_t>>();
    }
    return tokens;
  };
  const auto both = run({short_prompt, long_prompt});
  ASSERT_EQ(both.size(), 2u);
  EXPECT_EQ(both.at(0), run({short_prompt}).at(0));
  EXPECT_EQ(both.at(1), run({long_prompt}).at(0));
  EXPECT_EQ(both.at(0).size(), 5u);
}

TEST(GenerateTool, EdgeCasesGiveDefinedResultsOrClearErrors) {
  const auto none = txl_generate({checkpoint(), "--prompt", "x", "--max-new-tokens", "0"});
  ASSERT_EQ(none.status, 0) << none.output;
  EXPECT_EQ(none.out, "x\n");
  // Characters the word tokenizer does not know: <unk>, with a warning.
  const auto unknown = txl_generate({checkpoint(), "--prompt", "qqq zzz", "--max-new-tokens", "3"});
  ASSERT_EQ(unknown.status, 0) << unknown.output;
  EXPECT_NE(unknown.output.find("prompt 0: 2 token(s) of characters the tokenizer does not know"),
            std::string::npos)
      << unknown.output;
  // A prompt far longer than the memory is read in segments.
  const std::string long_prompt(3000, 'a');
  EXPECT_EQ(txl_generate({checkpoint(), "--prompt", long_prompt, "--max-new-tokens", "2"}).status,
            0);
  // No prompt at all (stdin is empty).
  const auto empty = txl_generate({checkpoint()});
  EXPECT_EQ(empty.status, 1);
  EXPECT_NE(empty.output.find("error: no prompt: give --prompt TEXT"), std::string::npos)
      << empty.output;
  const auto bad = txl_generate({checkpoint(), "--prompt", "x", "--top-p", "0"});
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.output.find("top_p = 0 must be in (0, 1]"), std::string::npos) << bad.output;
  const auto key = txl_generate({checkpoint(), "--prompt", "x", "--set", "model.n_layer=3"});
  EXPECT_EQ(key.status, 1);
  EXPECT_NE(key.output.find("model.n_layer"), std::string::npos) << key.output;
  // A checkpoint of another format: txl's first one (a TorchScript zip), or not a checkpoint.
  txl::test::TempDir dir;
  txl::test::write_text(dir / "old.pt", std::string("PK\x03\x04", 4) + "archive/data.pkl");
  const auto old = txl_generate({(dir / "old.pt").string(), "--prompt", "x"});
  EXPECT_EQ(old.status, 1);
  EXPECT_NE(old.output.find("txl-convert --trust-old-format"), std::string::npos) << old.output;
  // A missing name with a checkpoint beside it (.safetensors for .pt), or in the first seed
  // folder of an ablation variant (<variant>/seed<k>/), reads that one and says so.
  auto pt = std::filesystem::path(checkpoint()).replace_extension(".pt").string();
  const auto sibling = txl_generate({pt, "--prompt", "x", "--max-new-tokens", "3"});
  EXPECT_EQ(sibling.status, 0) << sibling.output;
  EXPECT_NE(sibling.output.find(pt + " does not exist: reading " + checkpoint()), std::string::npos)
      << sibling.output;
  std::filesystem::create_directories(dir / "xl" / "seed1");
  const auto seed1 = dir / "xl" / "seed1" / "checkpoint_best.safetensors";
  std::filesystem::copy_file(checkpoint(), seed1);
  const auto seeded = txl_generate({(dir / "xl" / "checkpoint_best.pt").string(), "--prompt", "x",
                                    "--json", "--max-new-tokens", "3", "--ignore-eos"});
  EXPECT_EQ(seeded.status, 0) << seeded.output;
  EXPECT_NE(seeded.output.find("does not exist: reading " + seed1.string()), std::string::npos)
      << seeded.output;
  EXPECT_NE(seeded.output.find("\"new_tokens\":3"), std::string::npos) << seeded.output;
  const auto nothing =
      txl_generate({(dir / "rel" / "checkpoint_best.pt").string(), "--prompt", "x"});
  EXPECT_EQ(nothing.status, 1);
  EXPECT_NE(nothing.output.find("checkpoint not found: "), std::string::npos) << nothing.output;
  txl::test::write_text(dir / "notes.txt", "hello");
  const auto text = txl_generate({(dir / "notes.txt").string(), "--prompt", "x"});
  EXPECT_EQ(text.status, 1);
  EXPECT_NE(text.output.find("notes.txt"), std::string::npos) << text.output;
}

}  // namespace
