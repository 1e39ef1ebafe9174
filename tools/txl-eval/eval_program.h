#pragma once
// What txl-eval does (its flags, targets, printing and files, beside its main), as a call its
// main and its tests make: rebuild the model and its tokenizer from a checkpoint
// alone, evaluate splits, a text file or a text in the requested mode, optionally sweep the
// evaluation memory length. A file or a text needs no corpus; splits are encoded with the
// checkpoint's own tokenizer, whatever the corpus's cache holds.

#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "txl/config/config.h"
#include "txl/models/checkpoint.h"

namespace CLI {
class App;
}

namespace txl::config {
struct CommandLine;
}

namespace txl::dist {
class Group;
}

namespace txl::eval {

// What txl-eval is asked besides evaluation settings. Every evaluation setting is a key of the
// checkpoint's experiment, changed through `overrides` (txl-eval's --mode, --mem-len, ... are
// written as such overrides), so it is validated like any experiment file.
struct EvalRequest {
  std::string checkpoint;           // checkpoint file
  std::vector<std::string> splits;  // empty = the experiment's eval.splits
  std::string file;                 // a text file to evaluate instead of splits
  std::string text;                 // a text to evaluate instead of splits
  // `key.path=value` overrides of the checkpoint's experiment, in order: the keys of
  // settable_keys() (eval.*, data.* e.g. data.path to find the corpus, run.threads, ...);
  // anything else is refused.
  std::vector<std::string> overrides;
  std::string token_losses_path;  // "" = not written
  bool sweep = false;             // context sweep over mem_len (eval.sweep_mem_lens)
  std::string out_dir;            // sweep output folder ("" = the checkpoint's folder)
  bool json = false;              // JSON lines instead of a table
  bool by_position = false;       // also the mean loss at each position of the segment
  // A second checkpoint (same tokenizer) to evaluate on the same tokens, each model with its own
  // experiment and the same overrides; the ratio of their perplexities gets a paired block
  // bootstrap 95% interval (eval::paired_bootstrap_ppl_ratio: blocks of 64 tokens, 1,000
  // resamples, seed 1). "" = none.
  std::string compare;
  // With `compare`: where b's memory helps over a (eval::memory_gain: the gain by distance to
  // the previous occurrence, frequency and capitalised words), printed after the comparison.
  bool where_memory_helps = false;
  // Also the share of attention weight each layer puts at each distance to the query, memory
  // included (eval::attention_by_distance), for the checkpoint (and the compared one).
  bool attention_by_distance = false;
  // Data-parallel evaluation (txl-eval under torchrun or srun): every rank scores its share of
  // each batch's rows and the sums are reduced, so the figures are those of one process; rank
  // 0 alone prints and writes files. Null = this process alone.
  std::shared_ptr<dist::Group> group;
};

// What an evaluation may change of the checkpoint's experiment (config::experiment_over): the
// eval and data sections, and how this process runs (run.threads, run.device, run.precision,
// run.dist_timeout). The model and its training are the checkpoint's.
const std::vector<std::string>& settable_keys();

// The request's checkpoint as read, and the experiment to evaluate with: the
// checkpoint's own with the request's overrides. Its run.threads is the thread count the
// program sets (ProcessSetup). Throws txl::Error for a missing or bad checkpoint and for an
// override that is invalid or not settable.
struct Evaluation {
  models::Checkpoint checkpoint;  // as read (the model is built from it on the run's device)
  config::ExperimentConfig config;
};
Evaluation load(const EvalRequest& request);

// txl-eval's shorthand flags, each the override of one eval key: `--mode sliding` is
// `--set eval.mode=sliding`; a list flag's comma-separated value becomes a YAML list
// (`--sweep-mem-lens 0,64` is `--set eval.sweep_mem_lens=[0,64]`).
struct EvalFlag {
  const char* flag;  // e.g. "--mem-len"
  const char* key;   // e.g. "eval.mem_len"
  const char* help;  // the flag's help text
  bool list;         // the key holds a list
};
const std::vector<EvalFlag>& eval_flags();

// Adds every flag of eval_flags() to `app` as a config::add_set_shorthand into `line` (after
// config::add_experiment_options).
void add_eval_flags(CLI::App& app, config::CommandLine& line);

// Every flag of txl-eval on `app`: the experiment's (--set, --dump-config: config::
// add_experiment_options, into `line`), the shorthands of eval_flags(), --threads and
// --dist-timeout, and its own (the checkpoint, --split, --file, --text, --token-losses, --sweep,
// --out, --json, --compare, --by-position) into `request`.
void add_request_flags(CLI::App& app, config::CommandLine& line, EvalRequest& request);

// Runs the request on what load() gave, printing a table (or JSON lines) to `out`. Throws
// txl::Error on bad input.
void run(const EvalRequest& request, Evaluation evaluation, std::ostream& out);

// load(request), then run.
void run(const EvalRequest& request, std::ostream& out);

}  // namespace txl::eval
