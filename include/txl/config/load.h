#pragma once
// Loading, validating and writing experiment configurations (the structs of config.h).
//
// An experiment file is YAML with the sections `run`, `data` (nesting `tokenizer` and
// `synthetic`), `model`, `train` and `eval`, whose keys are the struct field names. Precedence,
// lowest first: built-in defaults < the `base:` file (a path relative to the file naming it;
// bases may chain) < the experiment file < `--set key.path=value` overrides. Keys may also be
// written dotted (`model.n_layer: 2`) at any level.
//
// Everything is validated once, here: unknown keys (with the closest valid key), wrong types,
// values outside an enum (listing the allowed ones) and out-of-range values are txl::Error whose
// message names the file, `line:column` and the dotted key. All problems of a file are reported
// together, one per line. Messages quote a key or value over 80 bytes as its first 60 bytes and
// its size ("'abc...' (10485760 bytes)").

#include <string>
#include <utility>
#include <vector>

#include "txl/config/config.h"

namespace txl::config {

// Loads the experiment at `path`, its `base:` chain and the `key.path=value` overrides (the value
// is parsed as YAML: `model.cutoffs=[2000,6000]`, `run.name=kjv_small`). Sets `source` to `path`.
// Every file of the chain must hold a setting or a `base:` (an empty or comment-only file is an
// error: it would silently train the defaults); a file of only `base: x.yaml` inherits x.yaml.
// A path that is missing, a directory or unreadable is an error saying which (with the system's
// reason).
ExperimentConfig load_experiment(const std::string& path,
                                 const std::vector<std::string>& overrides = {});

// Same, from YAML text (e.g. the config stored in a checkpoint). `origin` names the text in error
// messages and becomes `source`; a `base:` in the text is resolved relative to origin's folder.
// The text itself may be empty or "{}" (defaults plus overrides, as txl-bench builds them).
ExperimentConfig parse_experiment_string(const std::string& yaml, const std::string& origin,
                                         const std::vector<std::string>& overrides = {});

// The resolved experiment as YAML: every field, in struct order, nothing else (not `source`).
// parse_experiment_string(dump_experiment(x), ...) equals x.
std::string dump_experiment(const ExperimentConfig& config);

// Range and consistency checks alone, for configs built in code (load_experiment already ran
// them). Throws txl::Error listing every violation, e.g. "model.n_layer: must be >= 1, got 0".
void validate_experiment(const ExperimentConfig& config);

// Loads an ablation file:
//
//   name: kjv_ablation                # required; variants run as <name>/<variant>
//   output_dir: runs/kjv_ablation     # optional; "" = runs/<name>
//   base: ../experiments/kjv_xl.yaml  # an experiment file, or an inline mapping of sections
//   train: {max_steps: 2000}          # optional overrides shared by every variant
//   variants:                         # in file order; dotted keys or nested sections
//     xl: {}
//     vanilla: {model.attn_type: vanilla, model.mem_len: 0}
//     shaw: {model: {attn_type: shaw}}
//
// Precedence per variant: base < shared sections < variant < `overrides`. Each variant is
// validated like an experiment; the ablation's and variants' names are plain folder names (letters,
// digits, '_', '-', '.'). Its run.name becomes "<name>/<variant>" and its run.output_dir
// "<output_dir or runs/<name>>/<variant>" unless the variant itself sets them. `base` in the result
// is the resolved base with the shared sections and overrides applied (not range-validated).
// Every variant has the same run.threads (the process's, which txl-ablate sets once); a variant
// that asks for others is an error at the place that set them.
AblationConfig load_ablation(const std::string& path,
                             const std::vector<std::string>& overrides = {});

// 16 hex digits identifying every setting of the experiment (a hash of dump_experiment), so a
// finished run can be matched to the config that produced it. `source` is not part of it.
std::string fingerprint(const ExperimentConfig& config);

// The settings that differ, one "key: old -> new" line each in struct order, e.g.
// "model.n_layer: 4 -> 6". Empty when the experiments are the same (source ignored).
std::vector<std::string> diff_experiments(const ExperimentConfig& before,
                                          const ExperimentConfig& after);

// True when every setting is equal (source ignored).
bool same_settings(const ExperimentConfig& a, const ExperimentConfig& b);

// Every dotted key an experiment accepts, in struct order (for help texts and tests).
std::vector<std::string> experiment_keys();

// The settings a resumed run may change, in struct order: when to stop (train.max_steps,
// max_tokens, max_minutes), how often to evaluate and save, early-stopping patience, the periodic
// evaluation's budget, the divergence guard, run.threads, device, log_interval, dist_timeout,
// run.output_dir, data.cache_dir and every eval.* key. None changes what a training step
// computes; every other setting does (model, optimizer, schedule, data, tokenizer, seed,
// precision, batch size, ...). One table in src/config/keys.cpp says why each is safe.
std::vector<std::string> resumable_keys();

// The resumable keys that cannot change what a finished run computes, in struct order (from
// the same table): how often it saves (train.checkpoint_interval), where and how fast it runs
// and what it prints (run.threads, device, log_interval, dist_timeout), its folders
// (run.output_dir, data.cache_dir) and every eval.* key. The others (when to stop, how often to
// validate, patience, the divergence guard) decide which weights a run ends with. The eval.*
// keys the trainer's periodic validation reads (eval::validation_settings) choose
// checkpoint_best too: whoever fingerprints a training adds that validation (the ablation does).
std::vector<std::string> result_neutral_keys();

// Whether a setting (a dotted key) can change what a finished run computes: false exactly for
// result_neutral_keys().
bool changes_result(const std::string& key);

// `config` with every result_neutral_keys() setting at its default: two experiments that train
// the same thing give the same one (the ablation's training fingerprint hashes it).
ExperimentConfig without_result_neutral_keys(const ExperimentConfig& config);

// Why the run trained with `stored` cannot be resumed as `requested`: one "key: stored ->
// requested" line per differing setting outside resumable_keys(), in struct order, strings
// quoted and long values shortened as in error messages, e.g. "model.d_inner: 1024 -> 2048".
// Empty when the run may resume (source is ignored).
std::vector<std::string> resume_conflicts(const ExperimentConfig& stored,
                                          const ExperimentConfig& requested);

}  // namespace txl::config
