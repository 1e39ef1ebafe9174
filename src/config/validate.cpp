#include "validate.h"

#include <set>
#include <sstream>
#include <type_traits>

#include "fields.h"
#include "txl/config/effective_eval.h"

namespace txl::config::detail {

namespace {

template <typename T>
std::string text(T value) {
  if constexpr (std::is_floating_point_v<T>) {
    return format_double(value);
  } else {
    return std::to_string(value);
  }
}

// Settings that reach float32 tensor arithmetic (the optimizer's update, gradient clipping, weight
// initialisation) stay far below float32's largest value, 3.4e38: LibTorch refuses a larger one
// ("value cannot be converted to type float without overflow") without naming the setting, and
// Adam divides the learning rate by up to 10 in its first steps.
constexpr double kMaxFloatSetting = 1e30;

// clamp_len 0 would give every distance the encoding of distance 0 (no position information). The
// paper code's clamp_len: 0 means "no clamp", txl's -1: a config carried over from it must not
// silently change meaning (tools/import_paper.py converts it).
constexpr const char* kClampZero =
    "0 is refused: it would give every distance the encoding of 0; the paper code's clamp_len 0 "
    "means no clamp, which is -1 here (or clamp at a distance >= 1)";

// Collects violations. Every comparison is written so that NaN fails it.
class Checker {
 public:
  void rule(bool ok, const std::string& key, const std::string& message) {
    if (!ok) out_.push_back(Violation{key, message});
  }
  template <typename T>
  void at_least(const std::string& key, T value, T low) {
    rule(value >= low, key, "must be >= " + text(low) + ", got " + text(value));
  }
  template <typename T>
  void positive(const std::string& key, T value) {
    rule(value > T(0), key, "must be > 0, got " + text(value));
  }
  // low <= value < high
  void half_open(const std::string& key, double value, double low, double high) {
    rule(value >= low && value < high, key,
         "must be in [" + text(low) + ", " + text(high) + "), got " + text(value));
  }
  // low < value <= high
  void open_closed(const std::string& key, double value, double low, double high) {
    rule(value > low && value <= high, key,
         "must be in (" + text(low) + ", " + text(high) + "], got " + text(value));
  }
  // A setting that enters float32 arithmetic (see kMaxFloatSetting).
  void fits_float(const std::string& key, double value) {
    rule(value <= kMaxFloatSetting, key,
         "must be <= " + text(kMaxFloatSetting) + " (it enters float32 arithmetic), got " +
             text(value));
  }
  std::vector<Violation> take() { return std::move(out_); }

 private:
  std::vector<Violation> out_;
};

bool plain_character(char ch) {
  // ASCII only: std::isalnum would also take the locale's letters.
  return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
         ch == '.' || ch == '_' || ch == '-';
}

}  // namespace

std::string plain_name_problem(const std::string& name, bool parts) {
  const std::string what = parts ? "a part" : "it";
  if (name.empty()) return "it is empty";
  if (name.size() > kMaxRunNameBytes) {
    return "it is longer than " + std::to_string(kMaxRunNameBytes) + " bytes";
  }
  if (parts && name[0] == '/') return "it is an absolute path";
  std::size_t start = 0;
  while (true) {
    const std::size_t slash = parts ? name.find('/', start) : std::string::npos;
    const std::string part = name.substr(start, slash == std::string::npos ? slash : slash - start);
    if (part.empty()) return "it has an empty part (a '/' at the end or '//')";
    if (part == "." || part == "..") return what + " is '" + part + "'";
    if (part[0] == '-') return what + " starts with '-'";
    for (char ch : part) {
      if (!plain_character(ch)) {
        const auto byte = static_cast<unsigned char>(ch);
        return byte >= 0x20 && byte < 0x7f ? "it holds '" + std::string(1, ch) + "'"
                                           : "it holds byte " + std::to_string(byte);
      }
    }
    if (slash == std::string::npos) return "";
    start = slash + 1;
  }
}

namespace {

// Names from a list (and enum values cast from a number): the loader rejects them as they
// are read; configs built in code are checked here.
void check_choices(Checker& k, const ExperimentConfig& c) {
  ExperimentConfig copy = c;
  for (const Field& field : fields_of(copy)) {
    if (field.choices.empty()) continue;
    std::vector<std::string> values;
    if (auto* s = std::get_if<std::string*>(&field.target)) values = {**s};
    if (auto* e = std::get_if<EnumRef>(&field.target)) values = {e->name()};
    if (auto* list = std::get_if<std::vector<std::string>*>(&field.target)) values = **list;
    for (const std::string& value : values) {
      bool allowed = false;
      for (const std::string& choice : field.choices) allowed = allowed || choice == value;
      k.rule(allowed, field.key, quoted(value) + " is not one of " + join_choices(field.choices));
    }
  }
}

// run.*
void check_run(Checker& k, const ExperimentConfig& c) {
  const RunConfig& run = c.run;
  k.rule(!run.name.empty(), "run.name", "must not be empty (it names the run and its folder)");
  if (!run.name.empty()) {
    // The run folder is runs/<name>: a name with '..' or a leading '/' would write elsewhere
    // (run.output_dir is the way to choose another folder).
    const std::string problem = plain_name_problem(run.name, /*parts=*/true);
    k.rule(problem.empty(), "run.name",
           "must be a plain name: letters, digits, '.', '_' and '-', with '/' only between parts "
           "(e.g. kjv_xl or kjv_ablation/xl; set run.output_dir for another folder), got " +
               quoted(run.name) + ": " + problem);
  }
  k.at_least("run.threads", run.threads, 0);
  k.at_least("run.log_interval", run.log_interval, 1);
  k.at_least("run.dist_timeout", run.dist_timeout, 1);
}

// data.*
void check_data(Checker& k, const ExperimentConfig& c) {
  const DataConfig& data = c.data;
  k.rule(!data.cache_dir.empty(), "data.cache_dir", "must not be empty (e.g. data/cache)");
  k.rule(data.corpus != Corpus::kText || !data.path.empty(), "data.path",
         "corpus 'text' needs the path of a text file or of a folder with train/valid/test files");
  const TokenizerConfig& tok = data.tokenizer;
  k.positive("data.tokenizer.vocab_size", tok.vocab_size);
  k.open_closed("data.tokenizer.character_coverage", tok.character_coverage, 0.0, 1.0);
  k.at_least<std::int64_t>("data.tokenizer.max_sentences", tok.max_sentences, 1);
  k.at_least("data.tokenizer.min_count", tok.min_count, 0);
  const SyntheticConfig& syn = data.synthetic;
  k.at_least<std::int64_t>("data.synthetic.documents", syn.documents, 1);
  k.at_least("data.synthetic.keys", syn.keys, 1);
  k.at_least("data.synthetic.gap", syn.gap, 0);
  k.at_least("data.synthetic.alphabet", syn.alphabet, 1);
}

// The attention types that carry memory, for messages: "xl, shaw, ...".
std::string memory_attn_types() {
  std::string names;
  for (const auto& [type, name] : EnumNames<AttnType>::kNames) {
    if (uses_relative_positions(type)) names += (names.empty() ? "" : ", ") + std::string(name);
  }
  return names;
}

// model.cmem_*: the compressed memory sits before a memory, which relative positions place.
void check_compressive(Checker& k, const ExperimentConfig& c) {
  const ModelConfig& m = c.model;
  k.at_least("model.cmem_len", m.cmem_len, 0);
  k.at_least("model.cmem_rate", m.cmem_rate, 1);
  k.at_least("model.cmem_loss_weight", m.cmem_loss_weight, 0.0);
  k.fits_float("model.cmem_loss_weight", m.cmem_loss_weight);
  if (m.cmem_len == 0) return;
  k.rule(m.mem_len > 0, "model.cmem_len",
         "compressive memory compresses what leaves the memory and needs model.mem_len > 0, got "
         "cmem_len " +
             text(m.cmem_len) + " with mem_len 0");
  k.rule(!uses_absolute_positions(m.attn_type), "model.cmem_len",
         "compressive memory needs relative positions (" + memory_attn_types() +
             "), got attn_type " + to_string(m.attn_type));
}

// model.mem_tokens: read before the segment and written after it, so they need positions that
// are relative, and a gradient from the segments that read them.
void check_memory_tokens(Checker& k, const ExperimentConfig& c) {
  const ModelConfig& m = c.model;
  k.at_least("model.mem_tokens", m.mem_tokens, 0);
  if (m.mem_tokens <= 0) return;
  k.rule(!uses_absolute_positions(m.attn_type), "model.mem_tokens",
         "memory tokens need relative positions (" + memory_attn_types() + "), got attn_type " +
             to_string(m.attn_type));
  k.rule(c.train.bptt_segments >= 1, "model.mem_tokens",
         "memory tokens are written at a segment's end and learn only from the segments that "
         "read them; with train.bptt_segments 0 nothing would train them: set "
         "train.bptt_segments >= 1, got mem_tokens " +
             text(m.mem_tokens));
}

// model.*: sizes, rates, the output layer and initialisation.
void check_model_shape(Checker& k, const ExperimentConfig& c) {
  const ModelConfig& m = c.model;
  k.at_least("model.n_layer", m.n_layer, 1);
  k.at_least("model.d_model", m.d_model, 1);
  k.at_least("model.n_head", m.n_head, 1);
  k.at_least("model.d_head", m.d_head, 1);
  k.at_least("model.d_inner", m.d_inner, 1);
  k.half_open("model.dropout", m.dropout, 0.0, 1.0);
  k.half_open("model.dropatt", m.dropatt, 0.0, 1.0);
  k.at_least("model.tgt_len", m.tgt_len, 1);
  k.at_least("model.mem_len", m.mem_len, 0);
  k.at_least("model.ext_len", m.ext_len, 0);
  k.at_least("model.clamp_len", m.clamp_len, -1);
  k.rule(m.clamp_len != 0, "model.clamp_len", kClampZero);
  k.at_least("model.max_rel_dist", m.max_rel_dist, 1);
  k.at_least("model.max_positions", m.max_positions, 1);
  k.at_least("model.t5_buckets", m.t5_buckets, 2);
  k.rule(m.t5_max_distance > m.t5_buckets / 2, "model.t5_max_distance",
         "must be above t5_buckets / 2 = " + text(m.t5_buckets / 2) +
             " (the distances with a bucket each), got " + text(m.t5_max_distance));
  for (std::size_t i = 0; i < m.cutoffs.size(); ++i) {
    const std::string key = "model.cutoffs";
    k.rule(m.cutoffs[i] > 0, key, "entries must be > 0, got " + text(m.cutoffs[i]));
    if (i > 0) {
      k.rule(m.cutoffs[i] > m.cutoffs[i - 1], key,
             "must increase strictly (vocabulary split points), got " + text(m.cutoffs[i - 1]) +
                 " then " + text(m.cutoffs[i]));
    }
  }
  k.at_least("model.div_val", m.div_val, 1);
  k.positive("model.init_std", m.init_std);
  k.fits_float("model.init_std", m.init_std);
  k.positive("model.proj_init_std", m.proj_init_std);
  k.fits_float("model.proj_init_std", m.proj_init_std);
  check_compressive(k, c);
  check_memory_tokens(k, c);
}

// model.*: the lengths absolute and learned positions allow.
void check_model_positions(Checker& k, const ExperimentConfig& c) {
  const ModelConfig& m = c.model;
  if (uses_absolute_positions(m.attn_type) && !m.allow_abs_with_memory) {
    // Absolute positions restart at 0 in every segment, so cached states would collide with the
    // current ones (paper 3.3): a vanilla model with memory is a known-wrong setup.
    k.rule(m.mem_len == 0, "model.mem_len",
           "attn_type " + to_string(m.attn_type) +
               " uses absolute positions and needs mem_len 0, got " + text(m.mem_len) +
               " (or set model.allow_abs_with_memory: true)");
    k.rule(c.eval.mem_len <= 0, "eval.mem_len",
           "attn_type " + to_string(m.attn_type) +
               " uses absolute positions and needs eval.mem_len 0 or -1, got " +
               text(c.eval.mem_len) + " (or set model.allow_abs_with_memory: true)");
  }
  if (m.attn_type == AttnType::kRope) {
    // Rotary positions turn pairs of dimensions and have no distance table that a clamp could cap.
    k.rule(
        m.d_head % 2 == 0, "model.d_head",
        "attn_type rope turns pairs of dimensions and needs an even d_head, got " + text(m.d_head));
    k.rule(m.clamp_len == -1, "model.clamp_len",
           "attn_type rope has no distances to clamp; needs -1, got " + text(m.clamp_len));
    k.rule(c.eval.clamp_len <= -1, "eval.clamp_len",
           "attn_type rope has no distances to clamp; needs -1 (none) or -2 (the model's), got " +
               text(c.eval.clamp_len));
  }
  if (m.attn_type == AttnType::kVanillaLearned) {
    // A learned table has no row for a position beyond it: training and evaluation windows must
    // both fit.
    const long long needed = static_cast<long long>(m.tgt_len) + m.mem_len + m.ext_len;
    k.rule(needed <= m.max_positions, "model.max_positions",
           "vanilla_learned needs tgt_len + mem_len + ext_len = " + text(needed) +
               " positions, got " + text(m.max_positions));
    const EffectiveEval ev = effective_eval(c);
    const bool sliding = ev.mode == EvalMode::kSliding;
    const long long eval_needed =
        sliding ? ev.window : static_cast<long long>(ev.tgt_len) + ev.requested_mem_len + m.ext_len;
    k.rule(eval_needed <= m.max_positions, sliding ? "eval.window" : "eval.tgt_len",
           "vanilla_learned has " + text(m.max_positions) +
               " positions (model.max_positions) but evaluation needs " + text(eval_needed));
  }
}

// train.*
void check_train(Checker& k, const ExperimentConfig& c) {
  const TrainConfig& t = c.train;
  k.positive("train.lr", t.lr);
  k.fits_float("train.lr", t.lr);
  k.at_least("train.weight_decay", t.weight_decay, 0.0);
  k.fits_float("train.weight_decay", t.weight_decay);
  if (t.optimizer == Optimizer::kAdamW) {
    // Decoupled decay multiplies every weight by 1 - lr * weight_decay each step: at 1 or more
    // it zeroes the weights or flips their sign (and a huge product overflows float32).
    k.rule(!(t.lr * t.weight_decay >= 1.0), "train.weight_decay",
           "adamw needs train.lr * train.weight_decay < 1 (each step multiplies the weights by "
           "1 - lr * weight_decay), got " +
               text(t.lr) + " * " + text(t.weight_decay));
  }
  k.half_open("train.momentum", t.momentum, 0.0, 1.0);
  k.at_least<std::int64_t>("train.warmup_steps", t.warmup_steps, 0);
  k.at_least("train.lr_min", t.lr_min, 0.0);
  k.rule(!(t.lr_min > t.lr), "train.lr_min",
         "must be <= train.lr (" + text(t.lr) + "), got " + text(t.lr_min));
  k.open_closed("train.decay_rate", t.decay_rate, 0.0, 1.0);
  k.at_least("train.plateau_patience", t.plateau_patience, 0);
  k.at_least("train.clip", t.clip, 0.0);
  k.fits_float("train.clip", t.clip);
  k.at_least("train.batch_size", t.batch_size, 1);
  k.at_least("train.batch_chunk", t.batch_chunk, 1);
  k.at_least("train.bptt_segments", t.bptt_segments, 0);
  k.rule(t.bptt_segments == 0 || c.model.mem_len > 0 || c.model.mem_tokens > 0,
         "train.bptt_segments",
         "back-propagation through segments needs a memory (model.mem_len > 0 or "
         "model.mem_tokens > 0), got " +
             text(t.bptt_segments) + " with mem_len 0");
  if (t.batch_size >= 1 && t.batch_chunk >= 1) {
    k.rule(t.batch_size % t.batch_chunk == 0, "train.batch_chunk",
           "must divide train.batch_size (" + text(t.batch_size) + "), got " + text(t.batch_chunk));
  }
  k.at_least<std::int64_t>("train.max_steps", t.max_steps, 0);
  k.at_least<std::int64_t>("train.max_tokens", t.max_tokens, 0);
  k.at_least("train.max_minutes", t.max_minutes, 0.0);
  k.rule(t.max_steps > 0 || t.max_tokens > 0 || t.max_minutes > 0, "train.max_steps",
         "training would never stop: set train.max_steps, train.max_tokens or train.max_minutes");
  k.at_least<std::int64_t>("train.eval_interval", t.eval_interval, 0);
  k.at_least<std::int64_t>("train.checkpoint_interval", t.checkpoint_interval, 0);
  k.at_least("train.patience", t.patience, 0);
  k.at_least<std::int64_t>("train.eval_max_tokens", t.eval_max_tokens, 0);
  k.at_least("train.divergence_factor", t.divergence_factor, 0.0);
  k.fits_float("train.divergence_factor", t.divergence_factor);
  k.at_least("train.divergence_patience", t.divergence_patience, 1);
}

// eval.*
void check_eval(Checker& k, const ExperimentConfig& c) {
  const EvalConfig& e = c.eval;
  k.at_least("eval.tgt_len", e.tgt_len, 0);
  k.at_least("eval.mem_len", e.mem_len, -1);
  k.at_least("eval.clamp_len", e.clamp_len, -2);
  k.rule(e.clamp_len != 0, "eval.clamp_len", kClampZero);
  k.rule(e.same_length >= -1 && e.same_length <= 1, "eval.same_length",
         "must be -1 (as model.same_length), 0 or 1, got " + text(e.same_length));
  k.at_least("eval.window", e.window, 0);
  k.at_least("eval.stride", e.stride, 1);
  k.at_least("eval.warmup", e.warmup, 0);
  k.at_least("eval.batch_size", e.batch_size, 1);
  k.at_least("eval.max_tokens", e.max_tokens, std::int64_t{0});
  if (e.mode == EvalMode::kSliding && e.stride >= 1) {
    const int window = effective_eval(c).window;
    k.rule(e.stride <= window, "eval.stride",
           "must be <= the sliding window (" + text(window) + "), got " + text(e.stride));
  }
  k.rule(!e.splits.empty(), "eval.splits", "must name at least one split (valid, test, train)");
  std::set<std::string> seen;
  for (const std::string& split : e.splits) {
    k.rule(seen.insert(split).second, "eval.splits", "lists " + quoted(split) + " twice");
  }
  for (int mem_len : e.sweep_mem_lens) {
    k.rule(mem_len >= 0, "eval.sweep_mem_lens", "entries must be >= 0, got " + text(mem_len));
  }
}

}  // namespace

std::vector<Violation> check_experiment(const ExperimentConfig& c) {
  Checker k;
  for (auto* section : {check_choices, check_run, check_data, check_model_shape,
                        check_model_positions, check_train, check_eval})
    section(k, c);
  return k.take();
}

}  // namespace txl::config::detail
