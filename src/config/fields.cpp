#include "fields.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <type_traits>

namespace txl::config::detail {

namespace {

// Builds the table with one call per field; the order of calls is the dump order.
class TableBuilder {
 public:
  // A string field may list its allowed values; an enum field's are its name table's.
  template <typename T>
  void add(std::string key, T& member, std::vector<std::string> choices = {}) {
    if constexpr (std::is_enum_v<T>) {
      fields_.push_back(Field{std::move(key), Target(EnumRef(&member)), enum_names<T>()});
    } else {
      fields_.push_back(Field{std::move(key), Target(&member), std::move(choices)});
    }
  }
  // A field added after checkpoints and fingerprints were made: the dump leaves it out while it
  // holds its default, so the dump and fingerprint of every experiment that does not use it stay
  // as they were (a stored experiment without it loads with the default).
  template <typename T>
  void add_later(std::string key, T& member, std::vector<std::string> choices = {}) {
    add(std::move(key), member, std::move(choices));
    fields_.back().omitted_at_default = true;
  }
  std::vector<Field> take() { return std::move(fields_); }

 private:
  std::vector<Field> fields_;
};

// "text" with backslashes and quotes escaped.
std::string quote(const std::string& text) {
  std::string out = "\"";
  for (char ch : text) {
    if (ch == '"' || ch == '\\') out += '\\';
    out += ch;
  }
  return out + "\"";
}

// The table, one section at a time, in the order of a dumped configuration.
void add_run_fields(TableBuilder& t, RunConfig& run) {
  t.add("run.name", run.name);
  t.add("run.output_dir", run.output_dir);
  t.add("run.seed", run.seed);
  t.add("run.threads", run.threads);
  t.add("run.device", run.device);
  t.add("run.precision", run.precision);
  t.add("run.log_interval", run.log_interval);
  t.add("run.dist_timeout", run.dist_timeout);
}

void add_data_fields(TableBuilder& t, DataConfig& data) {
  t.add("data.corpus", data.corpus);
  t.add("data.path", data.path);
  t.add("data.cache_dir", data.cache_dir);
  TokenizerConfig& tok = data.tokenizer;
  t.add("data.tokenizer.type", tok.type);
  t.add("data.tokenizer.model_path", tok.model_path);
  t.add("data.tokenizer.vocab_size", tok.vocab_size);
  t.add("data.tokenizer.model_type", tok.model_type);
  t.add("data.tokenizer.character_coverage", tok.character_coverage);
  t.add("data.tokenizer.user_symbols", tok.user_symbols);
  t.add("data.tokenizer.max_sentences", tok.max_sentences);
  t.add("data.tokenizer.min_count", tok.min_count);
  SyntheticConfig& syn = data.synthetic;
  t.add("data.synthetic.seed", syn.seed);
  t.add("data.synthetic.documents", syn.documents);
  t.add("data.synthetic.keys", syn.keys);
  t.add("data.synthetic.gap", syn.gap);
  t.add("data.synthetic.alphabet", syn.alphabet);
  t.add("data.document_mode", data.document_mode);
  t.add("data.add_eos", data.add_eos);
}

void add_model_fields(TableBuilder& t, ModelConfig& m) {
  t.add("model.attn_type", m.attn_type);
  t.add("model.n_layer", m.n_layer);
  t.add("model.d_model", m.d_model);
  t.add("model.n_head", m.n_head);
  t.add("model.d_head", m.d_head);
  t.add("model.d_inner", m.d_inner);
  t.add("model.dropout", m.dropout);
  t.add("model.dropatt", m.dropatt);
  t.add("model.tgt_len", m.tgt_len);
  t.add("model.mem_len", m.mem_len);
  t.add("model.ext_len", m.ext_len);
  t.add("model.clamp_len", m.clamp_len);
  t.add("model.same_length", m.same_length);
  t.add("model.pre_norm", m.pre_norm);
  t.add_later("model.final_norm", m.final_norm);
  t.add("model.untie_r", m.untie_r);
  t.add("model.max_rel_dist", m.max_rel_dist);
  t.add("model.max_positions", m.max_positions);
  t.add_later("model.t5_buckets", m.t5_buckets);
  t.add_later("model.t5_max_distance", m.t5_max_distance);
  t.add("model.allow_abs_with_memory", m.allow_abs_with_memory);
  t.add("model.cutoffs", m.cutoffs);
  t.add("model.div_val", m.div_val);
  t.add("model.tie_weight", m.tie_weight);
  t.add("model.tie_projs", m.tie_projs);
  t.add("model.init", m.init);
  t.add("model.norm_init", m.norm_init);
  t.add("model.init_std", m.init_std);
  t.add("model.proj_init_std", m.proj_init_std);
  t.add_later("model.mem_init", m.mem_init);
  t.add_later("model.cmem_len", m.cmem_len);
  t.add_later("model.cmem_rate", m.cmem_rate);
  t.add_later("model.cmem_compress", m.cmem_compress);
  t.add_later("model.cmem_loss_weight", m.cmem_loss_weight);
  t.add_later("model.mem_tokens", m.mem_tokens);
  t.add_later("model.knn_layer", m.knn_layer);
  t.add_later("model.knn_topk", m.knn_topk);
  t.add_later("model.knn_size", m.knn_size);
}

void add_train_fields(TableBuilder& t, TrainConfig& tr) {
  t.add("train.optimizer", tr.optimizer);
  t.add("train.lr", tr.lr);
  t.add("train.weight_decay", tr.weight_decay);
  t.add("train.momentum", tr.momentum);
  t.add("train.schedule", tr.schedule);
  t.add("train.warmup_steps", tr.warmup_steps);
  t.add("train.lr_min", tr.lr_min);
  t.add("train.decay_rate", tr.decay_rate);
  t.add("train.plateau_patience", tr.plateau_patience);
  t.add("train.clip", tr.clip);
  t.add("train.batch_size", tr.batch_size);
  t.add("train.batch_chunk", tr.batch_chunk);
  t.add_later("train.bptt_segments", tr.bptt_segments);
  t.add("train.max_steps", tr.max_steps);
  t.add("train.max_tokens", tr.max_tokens);
  t.add("train.max_minutes", tr.max_minutes);
  t.add("train.eval_interval", tr.eval_interval);
  t.add("train.checkpoint_interval", tr.checkpoint_interval);
  t.add("train.patience", tr.patience);
  t.add("train.var_len", tr.var_len);
  t.add("train.roll", tr.roll);
  t.add("train.eval_max_tokens", tr.eval_max_tokens);
  t.add("train.divergence_factor", tr.divergence_factor);
  t.add("train.divergence_patience", tr.divergence_patience);
}

void add_eval_fields(TableBuilder& t, EvalConfig& ev) {
  t.add("eval.tgt_len", ev.tgt_len);
  t.add("eval.mem_len", ev.mem_len);
  t.add("eval.clamp_len", ev.clamp_len);
  t.add("eval.same_length", ev.same_length);
  t.add_later("eval.mem_init", ev.mem_init);
  t.add("eval.mode", ev.mode);
  t.add("eval.window", ev.window);
  t.add("eval.stride", ev.stride);
  t.add("eval.warmup", ev.warmup);
  t.add("eval.batch_size", ev.batch_size);
  t.add("eval.max_tokens", ev.max_tokens);
  t.add("eval.splits", ev.splits, {"train", "valid", "test"});
  t.add("eval.sweep_mem_lens", ev.sweep_mem_lens);
}

}  // namespace

std::vector<Field> fields_of(ExperimentConfig& c) {
  TableBuilder t;
  add_run_fields(t, c.run);
  add_data_fields(t, c.data);
  add_model_fields(t, c.model);
  add_train_fields(t, c.train);
  add_eval_fields(t, c.eval);
  return t.take();
}

const std::vector<std::string>& section_keys() {
  static const std::vector<std::string> kSections = {
      "run", "data", "data.tokenizer", "data.synthetic", "model", "train", "eval"};
  return kSections;
}

std::string format_double(double value) {
  if (std::isnan(value)) return ".nan";
  if (std::isinf(value)) return value > 0 ? ".inf" : "-.inf";
  char buffer[40];
  // The shortest %g precision that reads back exactly; 17 digits always do for a double.
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buffer, sizeof(buffer), "%.*g", precision, value);
    if (std::strtod(buffer, nullptr) == value) break;
  }
  std::string text = buffer;
  if (text.find_first_of(".e") == std::string::npos) {
    text += ".0";  // "1" -> "1.0"
  } else if (text.find('.') == std::string::npos) {
    text.insert(text.find('e'), ".0");  // "1e-05" -> "1.0e-05": YAML 1.1 needs the dot
  }
  return text;
}

std::string format_value(const Target& target) {
  return std::visit(
      [](auto member) -> std::string {
        using T = std::remove_pointer_t<decltype(member)>;
        if constexpr (std::is_same_v<T, EnumRef>) {
          return member.name();
        } else if constexpr (std::is_same_v<T, std::string>) {
          return *member;
        } else if constexpr (std::is_same_v<T, bool>) {
          return *member ? "true" : "false";
        } else if constexpr (std::is_same_v<T, double>) {
          return format_double(*member);
        } else if constexpr (std::is_integral_v<T>) {
          return std::to_string(*member);
        } else {
          // Lists: flow style; strings quoted so that element boundaries are unambiguous.
          std::string text = "[";
          for (std::size_t i = 0; i < member->size(); ++i) {
            if (i > 0) text += ", ";
            if constexpr (std::is_same_v<typename T::value_type, std::string>) {
              text += quote((*member)[i]);  // quoted so ["a, b"] and [a, b] differ
            } else {
              text += std::to_string((*member)[i]);
            }
          }
          return text + "]";
        }
      },
      target);
}

std::string join_choices(const std::vector<std::string>& choices) {
  std::string text;
  for (std::size_t i = 0; i < choices.size(); ++i) text += (i > 0 ? " | " : "") + choices[i];
  return text;
}

namespace {

// Texts up to kQuoteWhole bytes are quoted whole; longer ones as their first kQuoteKeep bytes.
constexpr std::size_t kQuoteWhole = 80;
constexpr std::size_t kQuoteKeep = 60;

// The first kQuoteKeep bytes, not splitting a UTF-8 character (continuation bytes are 10xxxxxx).
std::string head(const std::string& text) {
  std::size_t cut = kQuoteKeep;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return text.substr(0, cut);
}

std::string size_note(const std::string& text) {
  return " (" + std::to_string(text.size()) + " bytes)";
}

}  // namespace

std::string shorten(const std::string& text) {
  return text.size() <= kQuoteWhole ? text : head(text) + "..." + size_note(text);
}

std::string quoted(const std::string& text) {
  return text.size() <= kQuoteWhole ? "'" + text + "'"
                                    : "'" + head(text) + "...'" + size_note(text);
}

std::size_t edit_distance(const std::string& a, const std::string& b) {
  // Row i holds the distances between the first i characters of a and every prefix of b; three
  // rows (i - 2, i - 1, i) are all a transposition needs, so memory grows with b alone.
  std::vector<std::size_t> before(b.size() + 1), previous(b.size() + 1), current(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) previous[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    current[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      current[j] = std::min({previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        current[j] = std::min(current[j], before[j - 2] + 1);  // "modle" -> "model" is one typo
      }
    }
    std::swap(before, previous);
    std::swap(previous, current);
  }
  return previous[b.size()];
}

std::string closest(const std::string& word, const std::vector<std::string>& candidates) {
  // A third of the word (at least 2) is as far as a typo plausibly goes; beyond that a
  // suggestion misleads more than it helps.
  const std::size_t limit = std::max<std::size_t>(2, word.size() / 3);
  std::string best;
  std::size_t best_distance = limit + 1;
  for (const std::string& candidate : candidates) {
    // The distance is at least the difference in length; checking that first also keeps the
    // (length x length) table of edit_distance small.
    const std::size_t gap = word.size() > candidate.size() ? word.size() - candidate.size()
                                                           : candidate.size() - word.size();
    if (gap >= best_distance) continue;
    std::size_t distance = edit_distance(word, candidate);
    if (distance < best_distance) {
      best = candidate;
      best_distance = distance;
    }
  }
  if (!best.empty() || word.size() < 2) return best;
  // An abbreviation: "cos" for "cosine", "model.attn" for "model.attn_type".
  for (const std::string& candidate : candidates) {
    if (candidate.size() > word.size() && candidate.compare(0, word.size(), word) == 0) {
      return candidate;
    }
  }
  return "";
}

}  // namespace txl::config::detail

namespace txl::config {

std::map<std::string, int64_t> position_settings(const ModelConfig& config) {
  return {{"max_rel_dist", config.max_rel_dist},
          {"max_positions", config.max_positions},
          {"t5_buckets", config.t5_buckets},
          {"t5_max_distance", config.t5_max_distance}};
}

}  // namespace txl::config
