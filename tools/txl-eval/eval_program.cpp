#include "txl-eval/eval_program.h"

#include <cmath>
#include <optional>
#include <ostream>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "txl/config/command_line.h"
#include "txl/config/load.h"
#include "txl/data/corpus.h"
#include "txl/data/dataset.h"
#include "txl/data/synthetic.h"
#include "txl/dist/group.h"
#include "txl/eval/attention_mass.h"
#include "txl/eval/evaluator.h"
#include "txl/eval/memory_gain.h"
#include "txl/eval/statistics.h"
#include "txl/experiment/memory_help.h"
#include "txl/models/checkpoint.h"
#include "txl/util/error.h"
#include "txl/util/fs.h"
#include "txl/util/json.h"
#include "txl/util/log.h"
#include "txl/util/plot.h"

namespace txl::eval {

namespace stdfs = std::filesystem;

namespace {

// Mean loss by position of the segment, eight positions a line.
void print_positions(const EvalResult& r, std::ostream& out) {
  out << fmt::format("{:<8} loss by position in the segment (0..{}):\n", "",
                     r.loss_by_position.size() - 1);
  for (size_t p = 0; p < r.loss_by_position.size(); p += 8) {
    std::string line = fmt::format("{:<8} {:>5}:", "", p);
    for (size_t k = p; k < std::min(p + 8, r.loss_by_position.size()); ++k)
      line += fmt::format(" {:>7.4f}", r.loss_by_position[k]);
    out << line << "\n";
  }
}

void print_table(const std::vector<EvalResult>& results, std::ostream& out) {
  out << fmt::format(
      "{:<8} {:<9} {:>5} {:>6} {:>6} {:>6} {:>9} {:>10} {:>10} {:>8} {:>8} {:>10} {:>9}\n", "split",
      "mode", "Q", "M", "L", "s", "loss", "ppl", "word ppl", "bits/tok", "bits/B", "tokens",
      "tok/s");
  for (const auto& r : results) {
    out << fmt::format(
        "{:<8} {:<9} {:>5} {:>6} {:>6} {:>6} {:>9.4f} {:>10.3f} {:>10} {:>8.4f} {:>8.4f} {:>10} "
        "{:>9.0f}\n",
        r.split, config::to_string(r.mode), r.tgt_len, r.mem_len, r.window, r.stride, r.loss, r.ppl,
        r.word_ppl > 0 ? fmt::format("{:.3f}", r.word_ppl) : "-", r.bits_per_token, r.bits_per_byte,
        r.tokens, r.tokens_per_s);
    if (!r.loss_by_position.empty()) print_positions(r, out);
    if (r.recall_tokens > 0) {
      out << fmt::format(
          "{:<8} recall loss {:.4f} nats over {} recalled values (ln 64 = 4.159 "
          "means no recall, 0 perfect)\n",
          "", r.recall_loss, r.recall_tokens);
    }
  }
}

// Plots ppl against mem_len with the plot script's sweep subcommand (plot.h); a missing plotter
// is a warning, not an error.
void plot_sweep(const stdfs::path& json_path, const stdfs::path& png_path) {
  const auto run = plot::run_script({"sweep", json_path.string(), png_path.string()});
  if (!run.drawn()) log::warn("eval", "plot {} skipped: {}", png_path.string(), run.note);
}

// A float32 vector as a NumPy .npy file (format 1.0), readable with numpy.load.
std::string npy_float32(const torch::Tensor& values) {
  auto v = values.to(torch::kFloat).contiguous();
  std::string header =
      fmt::format("{{'descr': '<f4', 'fortran_order': False, 'shape': ({},), }}", v.numel());
  // magic (6) + version (2) + length (2) + header + '\n', padded to a multiple of 64.
  const size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  out += header;
  out.append(reinterpret_cast<const char*>(v.data_ptr<float>()), v.numel() * sizeof(float));
  return out;
}

// Text given on the command line, encoded like a file (one line a line, eos after each).
data::EncodedSplit encode_text(const std::string& text, const data::Tokenizer& tokenizer,
                               bool add_eos) {
  TXL_CHECK(!text.empty(), "--text: the text is empty");
  data::CorpusSplit split;
  split.n_bytes = static_cast<std::int64_t>(text.size());
  split.n_chars = data::count_utf8_chars(text);
  split.lines = data::split_lines(text);
  split.doc_starts = {0};
  return data::encode_split(split, tokenizer, add_eos);
}

}  // namespace

namespace {

struct Target {
  std::string name;
  data::EncodedSplit split;
  // int64 [N]: the train split's ids, for --where-memory-helps's frequency classes (the
  // evaluated text's own for --file and --text, which have no train split).
  torch::Tensor train_ids;
};

// What to score: the text, the file, or the splits of the corpus, always encoded with the
// checkpoint's own tokenizer. Only splits need the corpus; rank 0 encodes a missing cache first.
std::vector<Target> collect_targets(const EvalRequest& request,
                                    const config::ExperimentConfig& config,
                                    const models::LoadedModel& loaded, dist::Group& group) {
  const data::Tokenizer& tokenizer = *loaded.tokenizer;
  const auto alone = [](std::string name, data::EncodedSplit split) {
    const auto ids = split.ids;
    return std::vector<Target>{{std::move(name), std::move(split), ids}};
  };
  if (!request.text.empty())
    return alone("text", encode_text(request.text, tokenizer, config.data.add_eos));
  if (!request.file.empty()) {
    return alone(stdfs::path(request.file).filename().string(),
                 data::encode_text_file(request.file, tokenizer, config.data.add_eos));
  }
  const auto dataset = dist::main_rank_first(
      group, [&] { return data::load_dataset(config.data, loaded.tokenizer); });
  if (!loaded.corpus_fingerprint.empty() && dataset.corpus_fingerprint != loaded.corpus_fingerprint)
    log::warn("eval",
              "the corpus in {} is not the one the model was trained on (fingerprint {} "
              "against {}); it is encoded with the model's own tokenizer",
              dataset.stats.cache_path.string(), dataset.corpus_fingerprint,
              loaded.corpus_fingerprint);
  std::vector<Target> targets;
  for (const auto& name : request.splits.empty() ? config.eval.splits : request.splits)
    targets.push_back({name, dataset.split(name), dataset.train.ids});
  return targets;
}

// Perplexity against the attention length c (eval.sweep_mem_lens): results, context_sweep.json
// and its plot. Each point is the experiment at_context(c): memory M = c with same_length for
// relative positions, a sliding window L = c for absolute ones.
std::vector<EvalResult> sweep(const EvalRequest& request, const config::ExperimentConfig& config,
                              const Settings& settings, models::LoadedModel& loaded,
                              const std::vector<Target>& targets, bool main_rank) {
  std::vector<int> mem_lens = config.eval.sweep_mem_lens;
  const int q = settings.tgt_len;
  if (mem_lens.empty()) mem_lens = {0, q, 2 * q, 4 * q, 8 * q};
  std::vector<EvalResult> results;
  json::Json records = json::Json::array();
  for (const auto& target : targets) {
    for (int m : mem_lens) {
      const Settings at = resolve_settings(at_context(config, m), settings.group);
      auto r = evaluate(loaded.model, target.split, at);
      r.split = target.name;
      log::info("eval", "{} context {:>5} ({}): ppl {:.3f}", target.name, m,
                config::to_string(at.mode), r.ppl);
      results.push_back(r);
      records.push_back(json::Json::parse(to_json(r)));
    }
  }
  const stdfs::path dir = request.out_dir.empty() ? stdfs::path(request.checkpoint).parent_path()
                                                  : stdfs::path(request.out_dir);
  if (main_rank) {
    fs::write_atomic(dir / "context_sweep.json", records.dump(2) + "\n");
    plot_sweep(dir / "context_sweep.json", dir / "context_sweep.png");
    log::info("eval", "sweep written to {}", (dir / "context_sweep.json").string());
  }
  return results;
}

// Every target in the requested mode, with per-token losses on request. They are written once
// every target is scored, so that a failed write on rank 0 cannot leave the other ranks waiting
// in the next target's collectives; the folder is checked first, on every rank.
std::vector<EvalResult> score(const EvalRequest& request, const config::ExperimentConfig& config,
                              const Settings& settings, models::LoadedModel& loaded,
                              const std::vector<Target>& targets, bool main_rank) {
  const bool keep_losses = !request.token_losses_path.empty();
  if (keep_losses) {
    const auto folder = stdfs::path(request.token_losses_path).parent_path();
    TXL_CHECK(folder.empty() || stdfs::is_directory(folder), "--token-losses: the folder ",
              folder.string(), " does not exist");
  }
  std::vector<EvalResult> results;
  std::vector<std::pair<stdfs::path, torch::Tensor>> token_losses;
  for (const auto& target : targets) {
    Extras extras;
    extras.token_losses = keep_losses;
    extras.by_position = request.by_position;
    // The synthetic corpus's recalled values, also on their own (plain text only).
    if (config.data.corpus == config::Corpus::kSynthetic && !settings.documents)
      extras.recall_mask = data::synthetic_recall_mask(target.split.ids, *loaded.tokenizer);
    auto r = evaluate(loaded.model, target.split, settings, extras);
    r.split = target.name;
    if (keep_losses) {
      stdfs::path path = request.token_losses_path;
      if (targets.size() > 1) path += "." + target.name;
      token_losses.emplace_back(path, r.token_losses);
    }
    results.push_back(r);
  }
  for (const auto& [path, losses] : token_losses) {
    if (!main_rank) break;
    fs::write_atomic(path, npy_float32(losses));
    log::info("eval", "per-token losses written to {}", path.string());
  }
  return results;
}

}  // namespace

const std::vector<EvalFlag>& eval_flags() {
  static const std::string modes = config::enum_choices<Mode>();  // memory | segments | sliding
  static const std::vector<EvalFlag> flags = {
      {"--mode", "eval.mode", modes.c_str(), false},
      {"--tgt-len", "eval.tgt_len", "segment length Q (0 = model.tgt_len)", false},
      {"--mem-len", "eval.mem_len", "memory length M (-1 = model.mem_len)", false},
      {"--clamp-len", "eval.clamp_len", "clamp relative distances (-1 = none, -2 = model's)",
       false},
      {"--same-length", "eval.same_length", "0 or 1 (-1 = model's)", false},
      {"--mem-init", "eval.mem_init", "memory at a stream's start: empty | zeros (model = model's)",
       false},
      {"--window", "eval.window", "sliding window L (0 = tgt_len)", false},
      {"--stride", "eval.stride", "sliding stride s", false},
      {"--warmup", "eval.warmup", "memory warm-up tokens", false},
      {"--batch-size", "eval.batch_size", "evaluation streams / windows per batch", false},
      {"--max-tokens", "eval.max_tokens", "score only the first N targets of each split (0 = all)",
       false},
      {"--sweep-mem-lens", "eval.sweep_mem_lens", "mem_len values of the sweep, e.g. 0,64,128",
       true},
  };
  return flags;
}

void add_request_flags(CLI::App& app, config::CommandLine& line, EvalRequest& request) {
  config::CommandLineOptions experiment;
  experiment.config = config::CommandLineOptions::Config::kAbsent;  // the checkpoint's own
  experiment.set_help =
      "override eval.*, data.*, run.threads, run.device, run.precision or run.dist_timeout of "
      "the checkpoint's experiment: key.path=value (repeatable)";
  config::add_experiment_options(app, line, experiment);
  add_eval_flags(app, line);
  config::add_set_shorthand(app, line, "--threads", "run.threads",
                            "intra-op threads, 0 = all cores");
  config::add_set_shorthand(app, line, "--dist-timeout", "run.dist_timeout",
                            "data-parallel: seconds a rank waits for the others");
  app.add_option("checkpoint", request.checkpoint, "checkpoint file (.safetensors)")->required();
  app.add_option("--split", request.splits, "splits: valid, test, train (default: eval.splits)")
      ->delimiter(',');
  app.add_option("--file", request.file, "evaluate this text file (the checkpoint's tokenizer)");
  app.add_option("--text", request.text, "evaluate this text (the checkpoint's tokenizer)");
  app.add_option("--token-losses", request.token_losses_path,
                 "write per-token losses in nats, text order, as a float32 NumPy .npy file");
  app.add_flag(
      "--sweep", request.sweep,
      "perplexity against attention length (memory M with same_length, or sliding window L for "
      "absolute positions; eval.sweep_mem_lens): table, JSON, plot");
  app.add_option("--out", request.out_dir, "sweep results folder (default: the checkpoint's)");
  app.add_flag("--json", request.json, "print results as JSON lines");
  app.add_option(
      "--compare", request.compare,
      "a second checkpoint (same tokenizer): both on the same tokens, and the ppl ratio's "
      "paired bootstrap 95% interval");
  app.add_flag("--where-memory-helps", request.where_memory_helps,
               "with --compare (a without memory, b with it): the gain by distance to the "
               "previous occurrence, frequency and capitalised words, with intervals");
  app.add_flag("--attention-by-distance", request.attention_by_distance,
               "also the share of attention weight each layer puts at each distance, memory "
               "included (memory, segments modes; with --compare for both checkpoints)");
  app.add_flag("--by-position", request.by_position,
               "also the mean loss at each position of the segment (memory, segments modes)");
}

void add_eval_flags(CLI::App& app, config::CommandLine& line) {
  for (const EvalFlag& flag : eval_flags()) {
    config::add_set_shorthand(app, line, flag.flag, flag.key, flag.help,
                              flag.list ? config::Shorthand::kList : config::Shorthand::kValue);
  }
}

const std::vector<std::string>& settable_keys() {
  static const std::vector<std::string> keys = {"eval.",      "data.",         "run.threads",
                                                "run.device", "run.precision", "run.dist_timeout"};
  return keys;
}

Evaluation load(const EvalRequest& request) {
  Evaluation evaluation;
  evaluation.checkpoint = models::read_checkpoint(request.checkpoint);
  evaluation.config = config::experiment_over(evaluation.checkpoint.config,
                                              request.checkpoint + " (stored experiment)",
                                              request.overrides, settable_keys());
  return evaluation;
}

namespace {

// --attention-by-distance: `who`'s attention on `target`, as a table or a JSON line.
void print_attention(const std::string& who, models::TransformerLM& model, const Target& target,
                     const Settings& settings, bool json, std::ostream& out) {
  const auto mass =
      eval::attention_by_distance(model, target.split, settings, eval::default_distance_edges());
  if (!json) {
    out << "\n" << target.name << ", " << who << ": " << eval::attention_mass_markdown(mass);
    return;
  }
  json::Json j = json::Json::parse(eval::attention_mass_json(mass));
  j["split"] = target.name;
  j["checkpoint"] = who;
  out << json::Json{{"attention_by_distance", j}}.dump() << "\n";
}

// Both checkpoints on the same tokens: the first's targets, each model with its own settings.
struct Comparison {
  std::string split;
  EvalResult a, b;
  RatioInterval ratio;
  std::optional<eval::MemoryGain> gain;  // --where-memory-helps
  std::string attention;                 // --attention-by-distance, printed (rank 0)
};

std::vector<Comparison> compare(const EvalRequest& request, const Evaluation& first,
                                dist::Group& group) {
  EvalRequest other_request = request;
  other_request.checkpoint = request.compare;
  const Evaluation second = load(other_request);
  TXL_CHECK(second.checkpoint.tokenizer_fingerprint == first.checkpoint.tokenizer_fingerprint,
            "--compare: ", request.compare, " has another tokenizer than ", request.checkpoint,
            " (fingerprints ", second.checkpoint.tokenizer_fingerprint, " and ",
            first.checkpoint.tokenizer_fingerprint, "): their losses are not on the same tokens");
  const Settings sa = resolve_settings(first.config, &group),
                 sb = resolve_settings(second.config, &group);
  auto a = models::rebuild_model(first.checkpoint, request.checkpoint, sa.device);
  auto b = models::rebuild_model(second.checkpoint, request.compare, sb.device);
  const auto targets = collect_targets(request, first.config, a, group);
  Extras extras;
  extras.token_losses = true;
  std::vector<Comparison> out;
  for (const auto& target : targets) {
    Comparison c;
    c.split = target.name;
    c.a = evaluate(a.model, target.split, sa, extras);
    c.b = evaluate(b.model, target.split, sb, extras);
    c.a.split = c.b.split = target.name;
    TXL_CHECK(c.a.token_losses.numel() == c.b.token_losses.numel(),
              "--compare: ", c.a.token_losses.numel(), " and ", c.b.token_losses.numel(),
              " tokens scored on ", target.name, "; set eval.max_tokens");
    c.ratio = paired_bootstrap_ppl_ratio(c.a.token_losses, c.b.token_losses);
    if (request.where_memory_helps) {
      const auto counts = torch::bincount(target.train_ids, {}, a.tokenizer->vocab_size());
      c.gain = eval::compare_memory(c.a.token_losses, c.b.token_losses, target.split, sb, counts,
                                    eval::word_flags(*a.tokenizer));
    }
    if (request.attention_by_distance && group.is_main()) {
      std::ostringstream text;
      print_attention(request.checkpoint, a.model, target, sa, request.json, text);
      print_attention(request.compare, b.model, target, sb, request.json, text);
      c.attention = text.str();
    }
    out.push_back(std::move(c));
  }
  return out;
}

std::string comparison_json(const EvalRequest& request, const Comparison& c) {
  json::Json j = {{"compare",
                   {{"split", c.split},
                    {"a", request.checkpoint},
                    {"b", request.compare},
                    {"tokens", c.ratio.tokens},
                    {"block", c.ratio.block},
                    {"samples", c.ratio.samples},
                    {"confidence", c.ratio.confidence},
                    {"significant", c.ratio.significant()}}}};
  json::put_number(j["compare"], "ppl_a", c.a.ppl);
  json::put_number(j["compare"], "ppl_b", c.b.ppl);
  json::put_number(j["compare"], "ratio", c.ratio.ratio);
  json::put_number(j["compare"], "low", c.ratio.low);
  json::put_number(j["compare"], "high", c.ratio.high);
  return j.dump();
}

void print_comparisons(const EvalRequest& request, const std::vector<Comparison>& comparisons,
                       bool json, std::ostream& out) {
  for (const auto& c : comparisons) {
    if (json) {
      out << to_json(c.a) << "\n" << to_json(c.b) << "\n" << comparison_json(request, c) << "\n";
      if (c.gain) {
        experiment::MemoryHelp help;
        help.split = c.split;
        help.a = request.checkpoint;
        help.b = request.compare;
        help.seeds = 1;
        help.gain = *c.gain;
        out << experiment::memory_help_json({help}) << "\n";
      }
      out << c.attention;
      continue;
    }
    print_table({c.a, c.b}, out);
    out << fmt::format(
        "{}: ppl {:.3f} (a: {}) / {:.3f} (b: {}) = {:.4f}, {:.0f}% interval [{:.4f}, {:.4f}] "
        "(paired bootstrap of {}-token blocks, {} resamples, {} tokens): {}\n",
        c.split, c.a.ppl, request.checkpoint, c.b.ppl, request.compare, c.ratio.ratio,
        100 * c.ratio.confidence, c.ratio.low, c.ratio.high, c.ratio.block, c.ratio.samples,
        c.ratio.tokens,
        c.ratio.significant() ? "significant" : "not significant (the interval holds 1)");
    if (c.gain) out << "\n" << eval::gain_markdown(*c.gain, "a", "b");
    out << c.attention;
  }
}

}  // namespace

void run(const EvalRequest& request, Evaluation evaluation, std::ostream& out) {
  const auto group = request.group ? request.group : std::make_shared<dist::Group>();
  const bool main_rank = group->is_main();
  const config::ExperimentConfig& config = evaluation.config;
  const Settings settings = resolve_settings(config, group.get());
  TXL_CHECK(!(request.by_position && request.sweep), "--by-position does not go with --sweep");
  TXL_CHECK(!request.where_memory_helps || !request.compare.empty(),
            "--where-memory-helps needs --compare: a (without memory) against b (with it)");
  if (!request.compare.empty()) {
    TXL_CHECK(!request.sweep && request.token_losses_path.empty(),
              "--compare does not go with --sweep or --token-losses");
    const auto comparisons = compare(request, evaluation, *group);
    if (main_rank) print_comparisons(request, comparisons, request.json, out);
    return;
  }
  // The weights go from the file straight to the evaluation's device.
  models::LoadedModel loaded =
      models::rebuild_model(evaluation.checkpoint, request.checkpoint, settings.device);
  const auto targets = collect_targets(request, config, loaded, *group);
  const auto results = request.sweep ? sweep(request, config, settings, loaded, targets, main_rank)
                                     : score(request, config, settings, loaded, targets, main_rank);
  if (!main_rank) return;  // rank 0 speaks for all
  if (request.json) {
    for (const auto& r : results) out << to_json(r) << "\n";
  } else {
    print_table(results, out);
  }
  if (request.attention_by_distance && !request.sweep) {
    for (const auto& target : targets)
      print_attention(request.checkpoint, loaded.model, target, settings, request.json, out);
  }
}

void run(const EvalRequest& request, std::ostream& out) { run(request, load(request), out); }

}  // namespace txl::eval
