#include "txl-generate/generate_program.h"

#include <algorithm>
#include <filesystem>
#include <istream>
#include <optional>
#include <ostream>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "txl/config/command_line.h"
#include "txl/data/corpus.h"
#include "txl/data/dataset.h"
#include "txl/eval/settings.h"
#include "txl/models/checkpoint.h"
#include "txl/util/error.h"
#include "txl/util/fs.h"
#include "txl/util/json.h"
#include "txl/util/log.h"

namespace txl::generation {

namespace {

// The prompts' texts: --prompt, then the lines of --prompts FILE; else the lines of `in`.
std::vector<std::string> prompt_texts(const GenerateRequest& request, std::istream& in) {
  std::vector<std::string> texts = request.prompts;
  if (!request.prompts_file.empty()) {
    for (auto& line : data::split_lines(fs::read_file(request.prompts_file))) texts.push_back(line);
  }
  if (texts.empty() && request.prompts_file.empty()) {
    for (std::string line; std::getline(in, line);) texts.push_back(line);
  }
  TXL_CHECK(!texts.empty(),
            "no prompt: give --prompt TEXT, --prompts FILE (one a line) or "
            "prompts on stdin (one a line)");
  return texts;
}

// A prompt's ids after `start` (the context, or <eos>): its lines with <eos> between them. Warns
// when the tokenizer does not know some of its characters.
std::vector<std::int64_t> encode_prompt(const std::string& text, std::size_t index,
                                        const std::vector<std::int64_t>& start,
                                        const data::Tokenizer& tokenizer) {
  std::vector<std::int64_t> ids = start;
  std::int64_t unknown = 0;
  const auto lines = data::split_lines(text);
  for (std::size_t l = 0; l < lines.size(); ++l) {
    if (l > 0) ids.push_back(tokenizer.eos_id());
    for (auto id : tokenizer.encode(lines[l])) {
      unknown += id == tokenizer.unk_id();
      ids.push_back(id);
    }
  }
  if (unknown > 0) {
    log::warn("generate",
              "prompt {}: {} token(s) of characters the tokenizer does not know, read as <unk>",
              index, unknown);
  }
  return ids;
}

std::string generation_json(std::int64_t index, const std::string& prompt, const Generation& g) {
  json::OrderedJson j;
  j["index"] = index;
  json::put_text(j, "prompt", prompt);
  json::put_text(j, "text", g.text);
  j["tokens"] = g.tokens;
  json::put_number(j, "log_prob", g.log_prob);
  j["finish"] = g.finish;
  j["new_tokens"] = g.tokens.size();
  json::put_number(j, "seconds", g.seconds);
  json::put_number(j, "tokens_per_s", g.tokens_per_s);
  return j.dump();
}

std::string summary_json(const GenerateResult& r) {
  json::OrderedJson s;
  s["prompts"] = r.rows.size();
  s["context_tokens"] = r.context_tokens;
  s["context_once"] = r.context_once;
  json::put_number(s, "context_seconds", r.context_seconds);
  s["read_tokens"] = r.read_tokens;
  json::put_number(s, "read_seconds", r.read_seconds);
  json::put_number(s, "read_tokens_per_s", r.read_tokens / std::max(1e-9, r.read_seconds));
  s["new_tokens"] = r.new_tokens;
  json::put_number(s, "generate_seconds", r.generate_seconds);
  json::put_number(s, "tokens_per_s", r.new_tokens / std::max(1e-9, r.generate_seconds));
  s["interrupted_by_signal"] = r.stopped_by;
  json::OrderedJson j;
  j["summary"] = s;
  return j.dump();
}

// How the context was read: once into the memory, or before each prompt (a sliding window).
void log_context(const std::string& file, const GenerateResult& r) {
  if (r.context_tokens == 0) return;
  if (r.context_once) {
    log::info("generate",
              "context: {} tokens of {} read once into the memory in {:.2f} s "
              "({:.0f} tokens/s); then {} prompt tokens in {:.2f} s",
              r.context_tokens, file, r.context_seconds, r.context_tokens / r.context_seconds,
              r.read_tokens, r.read_seconds);
  } else {
    log::info("generate",
              "context: {} tokens of {} read before each prompt (a sliding window "
              "keeps its last tgt_len); {} tokens read in {:.2f} s ({:.0f} tokens/s)",
              r.context_tokens, file, r.read_tokens, r.read_seconds,
              r.read_tokens / std::max(1e-9, r.read_seconds));
  }
}

// Prints generations as they come. Text: the prompts in their order, each continuation
// streamed while it is generated (the prompts after it wait until it is done); JSON: a line per
// prompt as it finishes. Every write is flushed and checked.
class StreamPrinter {
 public:
  StreamPrinter(std::ostream& out, const std::vector<std::string>& prompts, bool json,
                const std::vector<std::string>& stops)
      : out_(out), prompts_(prompts), json_(json), finished_(prompts.size()) {
    // Text that may still turn out to start a stop string (and be cut) waits.
    for (const auto& s : stops) hold_back_ = std::max(hold_back_, s.size() - 1);
  }

  void text(std::int64_t prompt, const std::string& so_far) {
    if (json_ || prompt != next_) return;
    if (so_far.size() <= printed_ + hold_back_) return;
    start_next();
    write(so_far.substr(printed_, so_far.size() - hold_back_ - printed_));
    printed_ = so_far.size() - hold_back_;
  }

  void finish(std::int64_t prompt, const Generation& g) {
    if (json_) {
      write(generation_json(prompt, prompts_[static_cast<size_t>(prompt)], g) + "\n");
      return;
    }
    finished_[static_cast<size_t>(prompt)] = g;
    while (next_ < static_cast<std::int64_t>(finished_.size()) && finished_[next_]) {
      const Generation& done = *finished_[next_];
      if (done.finish != "interrupted" || !done.tokens.empty()) {
        start_next();
        // The streamed text was the whole text's beginning, but for a tokenizer that decodes a
        // line otherwise than token by token: then the rest follows what was streamed.
        write((done.text.size() > printed_ ? done.text.substr(printed_) : std::string()) + "\n");
      }
      finished_[next_].reset();  // its text is out: not kept
      ++next_;
      printed_ = 0;
      started_ = false;
    }
  }

 private:
  // The prompt of the generation printed next, before its first text.
  void start_next() {
    if (started_) return;
    write((any_ ? "\n" : "") + prompts_[static_cast<size_t>(next_)]);
    started_ = any_ = true;
  }

  void write(const std::string& text) {
    out_ << text;
    fs::flush_output(out_, "the output");
  }

  std::ostream& out_;
  const std::vector<std::string>& prompts_;
  bool json_;
  std::size_t hold_back_ = 0;
  std::vector<std::optional<Generation>> finished_;  // text: done, not printed yet
  std::int64_t next_ = 0;                            // text: the prompt printed next
  std::size_t printed_ = 0;                          // of its continuation
  bool started_ = false;                             // its prompt is printed
  bool any_ = false;                                 // a prompt was printed
};

}  // namespace

void add_generate_flags(CLI::App& app, config::CommandLine& line, GenerateRequest& request) {
  for (const auto& flag : eval::eval_flags()) {  // the decoding lengths, as txl-eval has them
    const std::string key = flag.key;
    if (key == "eval.tgt_len" || key == "eval.mem_len" || key == "eval.clamp_len" ||
        key == "eval.same_length" || key == "eval.mem_init")
      config::add_set_shorthand(app, line, flag.flag, flag.key, flag.help);
  }
  config::add_set_shorthand(app, line, "--threads", "run.threads",
                            "intra-op threads, 0 = all cores");
  auto& o = request.options;
  app.add_option("checkpoint", request.checkpoint, "checkpoint file (.safetensors)")->required();
  app.add_option("--prompt", request.prompts, "a prompt (repeatable); none: --prompts or stdin");
  app.add_option("--prompts", request.prompts_file, "a file of prompts, one a line");
  app.add_option("--context-file", request.context_file,
                 "text read once into the memory, before every prompt");
  app.add_option("--max-new-tokens", o.max_new_tokens, "tokens to generate at most per prompt")
      ->capture_default_str();
  app.add_option("--temperature", o.temperature, "0 = greedy")->capture_default_str();
  app.add_option("--top-k", o.top_k, "draw among the k most probable tokens, 0 = all")
      ->capture_default_str();
  app.add_option("--top-p", o.top_p, "draw among the smallest set of mass >= p, 1 = all")
      ->capture_default_str();
  app.add_option("--seed", o.seed, "seed of the draws")->capture_default_str();
  app.add_option("--stop", o.stop, "stop a prompt's text at this string (repeatable)");
  app.add_option("--batch-size", o.batch_size, "prompts generated together")->capture_default_str();
  app.add_flag("--ignore-eos", request.ignore_eos, "go on after <eos> (it is a newline)");
  app.add_flag("--json", request.json, "one JSON line per prompt and a summary line");
}

const std::vector<std::string>& generate_settable_keys() {
  static const std::vector<std::string> keys = {"eval.", "run.threads", "run.device"};
  return keys;
}

namespace {

// The checkpoint a user probably meant by a missing `path`: the .safetensors file beside a .pt
// name (the first format's), or the same file in the first seed folder of an ablation variant
// (<variant>/seed<k>/, when the ablation has `seeds:`); "" when there is none.
std::string suggested_checkpoint(const std::filesystem::path& path) {
  namespace stdfs = std::filesystem;
  std::vector<stdfs::path> dirs = {path.parent_path()};
  std::error_code ec;
  std::vector<stdfs::path> seeds;
  for (const auto& entry : stdfs::directory_iterator(
           path.parent_path().empty() ? stdfs::path(".") : path.parent_path(), ec)) {
    if (entry.is_directory(ec) && entry.path().filename().string().rfind("seed", 0) == 0)
      seeds.push_back(entry.path());
  }
  std::sort(seeds.begin(), seeds.end());
  dirs.insert(dirs.end(), seeds.begin(), seeds.end());
  const stdfs::path name = path.filename();
  for (const auto& dir : dirs) {
    for (auto candidate : {dir / name, (dir / name).replace_extension(".safetensors")}) {
      if (candidate != path && stdfs::exists(candidate, ec)) return candidate.string();
    }
  }
  return "";
}

}  // namespace

eval::Evaluation load_generation(const GenerateRequest& request) {
  std::string checkpoint = request.checkpoint;
  if (!std::filesystem::exists(checkpoint)) {
    // The name the issue and older notes use (<variant>/checkpoint_best.pt) reads the file that
    // exists, said on stderr; a safetensors file runs no code, whichever is read.
    const std::string suggestion = suggested_checkpoint(checkpoint);
    TXL_CHECK(!suggestion.empty(), "checkpoint not found: ", checkpoint);
    log::warn("generate", "{} does not exist: reading {}", checkpoint, suggestion);
    checkpoint = suggestion;
  }
  eval::Evaluation loaded;
  loaded.checkpoint = models::read_checkpoint(checkpoint);
  loaded.config =
      config::experiment_over(loaded.checkpoint.config, checkpoint + " (stored experiment)",
                              request.overrides, generate_settable_keys());
  return loaded;
}

int run_generate(const GenerateRequest& request, const eval::Evaluation& loaded, std::istream& in,
                 std::ostream& out, const std::atomic<int>* stop) {
  const auto settings = eval::resolve_settings(loaded.config);
  auto model = models::rebuild_model(loaded.checkpoint, request.checkpoint, settings.device);
  const data::Tokenizer& tokenizer = *model.tokenizer;
  const auto texts = prompt_texts(request, in);
  GenerateOptions options = request.options;
  options.eos_id = request.ignore_eos ? -1 : tokenizer.eos_id();
  options.lengths = decode_options(loaded.config);
  if (settings.ext_len > 0) {
    log::warn("generate",
              "model.ext_len = {}: decoding reads segments of tgt_len with the memory "
              "alone, without evaluation's extended context, so log-probabilities differ from "
              "txl-eval's",
              settings.ext_len);
  }
  // Every prompt starts after <eos>, or after the context (which ends with one).
  std::vector<std::int64_t> start = {tokenizer.eos_id()};
  if (!request.context_file.empty()) {
    auto context = data::encode_text_file(request.context_file, tokenizer, /*add_eos=*/true).ids;
    TXL_CHECK(context.numel() > 0, "--context-file ", request.context_file, " holds no text");
    options.context.assign(context.data_ptr<std::int64_t>(),
                           context.data_ptr<std::int64_t>() + context.numel());
    start.clear();
  }
  std::vector<std::vector<std::int64_t>> prompts;
  for (std::size_t i = 0; i < texts.size(); ++i)
    prompts.push_back(encode_prompt(texts[i], i, start, tokenizer));
  StreamPrinter printer(out, texts, request.json, options.stop);
  options.on_text = [&](std::int64_t i, const std::string& so_far) { printer.text(i, so_far); };
  options.on_finish = [&](std::int64_t i, const Generation& g) { printer.finish(i, g); };
  options.interrupt = stop;
  options.in_order = !request.json;  // text streams in the prompts' order
  log::info("generate", "{} prompt(s), up to {} new tokens each", prompts.size(),
            options.max_new_tokens);
  const auto result = generate(model.model, prompts, options, &tokenizer);
  log_context(request.context_file, result);
  if (request.json) {
    out << summary_json(result) << "\n";
    fs::flush_output(out, "the output");
  }
  log::info("generate", "{} tokens for {} prompt(s) in {:.2f} s ({:.0f} tokens/s){}",
            result.new_tokens, texts.size(), result.generate_seconds,
            result.new_tokens / std::max(1e-9, result.generate_seconds),
            result.stopped_by != 0 ? fmt::format("; stopped by signal {}", result.stopped_by) : "");
  return result.stopped_by;
}

}  // namespace txl::generation
