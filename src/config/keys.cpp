// Writing and comparing experiments: the YAML dump (and the fingerprint that hashes it), diffs,
// the list of keys, and the one table of the settings a resumed run may change (resumable_keys,
// result_neutral_keys, resume_conflicts).

#include "txl/config/load.h"

#include <yaml-cpp/yaml.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

#include "fields.h"
#include "scalars.h"
#include "txl/util/error.h"
#include "txl/util/fs.h"

namespace txl::config {

namespace {

using detail::Field;
using detail::needs_quotes;

// ------------------------------------------------------------------------------ diffs

// The "key: before -> after" line of every setting that differs and that `wanted` accepts, in
// struct order; strings in quotes. With `shorten`, long values are cut as in error messages.
std::vector<std::string> diff_lines(const ExperimentConfig& before, const ExperimentConfig& after,
                                    const std::function<bool(const std::string&)>& wanted,
                                    bool shorten) {
  ExperimentConfig a = before;
  ExperimentConfig b = after;
  const std::vector<Field> fa = detail::fields_of(a);
  const std::vector<Field> fb = detail::fields_of(b);
  std::vector<std::string> lines;
  for (std::size_t i = 0; i < fa.size(); ++i) {
    std::string va = detail::format_value(fa[i].target);
    std::string vb = detail::format_value(fb[i].target);
    if (va == vb || !wanted(fa[i].key)) continue;
    const bool text = std::holds_alternative<std::string*>(fa[i].target) ||
                      std::holds_alternative<detail::EnumRef>(fa[i].target);
    if (shorten) {
      va = text ? detail::quoted(va) : detail::shorten(va);
      vb = text ? detail::quoted(vb) : detail::shorten(vb);
    } else if (text) {
      va = "'" + va + "'";
      vb = "'" + vb + "'";
    }
    lines.push_back(fa[i].key + ": " + va + " -> " + vb);
  }
  return lines;
}

// The one table of settings a resumed run may change; every other setting is part of what the
// checkpoint was trained with. An entry is a key or "section.*" (every key of the section), and
// says whether it can change the weights a finished run ends with (`outcome`): the ablation's
// training fingerprint ignores exactly the entries that cannot (result_neutral_keys).
struct ResumableEntry {
  const char* key;
  bool outcome;
};

const std::vector<ResumableEntry>& resumable_table() {
  static const std::vector<ResumableEntry> kResumable = {
      // When to stop: a resumed run may train longer or stop sooner. Model, data and optimizer
      // state go on unchanged; with schedule: cosine, max_steps is also the horizon the learning
      // rate anneals to, so the rest of the decay stretches or shrinks (what training longer
      // means). A finished run with another budget is another run.
      {"train.max_steps", true},
      {"train.max_tokens", true},
      {"train.max_minutes", true},
      // How often it validates, how patient early stopping is, and how much of valid the
      // periodic evaluation reads: they decide when it stops and which weights are kept as
      // checkpoint_best (with schedule: plateau they time the decays), not what a step computes.
      {"train.eval_interval", true},
      {"train.patience", true},
      {"train.eval_max_tokens", true},
      // How often it saves: a checkpoint is a copy of the state, and a resume from it is exact.
      {"train.checkpoint_interval", false},
      // The divergence guard decides when to give up on a run and which weights may be kept,
      // never what a step does.
      {"train.divergence_factor", true},
      {"train.divergence_patience", true},
      // Where and how fast it runs, and what it prints: the checkpoint restores the same state on
      // any device or thread count (only dropout draws start afresh when the device kind or the
      // number of processes changes); the same computation on other hardware.
      {"run.threads", false},
      {"run.device", false},
      {"run.log_interval", false},
      {"run.dist_timeout", false},
      // Folders the user chose: the run folder may have moved, and caches are found by the
      // fingerprint of what they hold, not by where they live.
      {"run.output_dir", false},
      {"data.cache_dir", false},
      // Evaluation reads the model and never changes it.
      {"eval.*", false},
  };
  return kResumable;
}

// The table's entry for `key`, or nullptr when a resume must keep it.
const ResumableEntry* resumable_entry(const std::string& key) {
  for (const ResumableEntry& entry : resumable_table()) {
    const std::string_view e = entry.key;
    const bool section = e.size() > 2 && e.substr(e.size() - 2) == ".*";
    if (section ? key.compare(0, e.size() - 1, e.data(), e.size() - 1) == 0 : key == e)
      return &entry;
  }
  return nullptr;
}

bool resumable(const std::string& key) { return resumable_entry(key) != nullptr; }

bool result_neutral(const std::string& key) {
  const ResumableEntry* entry = resumable_entry(key);
  return entry != nullptr && !entry->outcome;
}

// Copies the value of `from` (the same field of another experiment) into `to`.
void copy_value(const detail::Target& to, const detail::Target& from) {
  std::visit(
      [&](auto target) {
        using T = decltype(target);
        if constexpr (std::is_same_v<T, detail::EnumRef>) {
          target.set(std::get<detail::EnumRef>(from).name());
        } else {
          *target = *std::get<T>(from);
        }
      },
      to);
}

}  // namespace

// ------------------------------------------------------------------------------ public API

std::string dump_experiment(const ExperimentConfig& config) {
  ExperimentConfig copy = config;
  YAML::Emitter out;
  out << YAML::BeginMap;
  std::vector<std::string> open;  // the sections currently open, outermost first
  auto emit_string = [&](const std::string& text) {
    if (needs_quotes(text)) out << YAML::DoubleQuoted;
    out << text;
  };
  ExperimentConfig defaults;
  const std::vector<Field> fields = detail::fields_of(copy);
  const std::vector<Field> default_fields = detail::fields_of(defaults);
  for (std::size_t f = 0; f < fields.size(); ++f) {
    const Field& field = fields[f];
    if (field.omitted_at_default &&
        detail::format_value(field.target) == detail::format_value(default_fields[f].target)) {
      continue;
    }
    // Split "data.tokenizer.vocab_size" into sections [data, tokenizer] and the name.
    std::vector<std::string> parts;
    std::size_t start = 0;
    for (std::size_t dot; (dot = field.key.find('.', start)) != std::string::npos;
         start = dot + 1) {
      parts.push_back(field.key.substr(start, dot - start));
    }
    const std::string name = field.key.substr(start);
    std::size_t common = 0;
    while (common < open.size() && common < parts.size() && open[common] == parts[common]) ++common;
    for (std::size_t i = open.size(); i > common; --i) out << YAML::EndMap;
    open.resize(common);
    for (std::size_t i = common; i < parts.size(); ++i) {
      out << YAML::Key << parts[i] << YAML::Value << YAML::BeginMap;
      open.push_back(parts[i]);
    }
    out << YAML::Key << name << YAML::Value;
    std::visit(
        [&](auto member) {
          using T = std::remove_pointer_t<decltype(member)>;
          if constexpr (std::is_same_v<T, detail::EnumRef>) {
            emit_string(member.name());
          } else if constexpr (std::is_same_v<T, std::string>) {
            emit_string(*member);
          } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
            out << YAML::Flow << YAML::BeginSeq;
            for (const std::string& item : *member) emit_string(item);
            out << YAML::EndSeq;
          } else if constexpr (std::is_same_v<T, std::vector<std::int64_t>> ||
                               std::is_same_v<T, std::vector<int>>) {
            out << YAML::Flow << YAML::BeginSeq;
            for (auto item : *member) out << std::to_string(item);
            out << YAML::EndSeq;
          } else {
            out << detail::format_value(detail::Target(member));
          }
        },
        field.target);
  }
  for (std::size_t i = 0; i < open.size(); ++i) out << YAML::EndMap;
  out << YAML::EndMap;
  TXL_CHECK(out.good(), "internal error writing the config as YAML: ", out.GetLastError());
  return std::string(out.c_str()) + "\n";
}

std::string fingerprint(const ExperimentConfig& config) {
  return fs::hex64(fs::fnv1a(dump_experiment(config)));
}

std::vector<std::string> diff_experiments(const ExperimentConfig& before,
                                          const ExperimentConfig& after) {
  return diff_lines(
      before, after, [](const std::string&) { return true; }, false);
}

bool same_settings(const ExperimentConfig& a, const ExperimentConfig& b) {
  return diff_experiments(a, b).empty();
}

std::vector<std::string> experiment_keys() {
  ExperimentConfig config;
  std::vector<std::string> keys;
  for (const Field& field : detail::fields_of(config)) keys.push_back(field.key);
  return keys;
}

std::vector<std::string> resumable_keys() {
  std::vector<std::string> keys;
  for (const std::string& key : experiment_keys()) {
    if (resumable(key)) keys.push_back(key);
  }
  return keys;
}

std::vector<std::string> result_neutral_keys() {
  std::vector<std::string> keys;
  for (const std::string& key : experiment_keys()) {
    if (result_neutral(key)) keys.push_back(key);
  }
  return keys;
}

bool changes_result(const std::string& key) { return !result_neutral(key); }

ExperimentConfig without_result_neutral_keys(const ExperimentConfig& config) {
  ExperimentConfig out = config;
  ExperimentConfig defaults;
  const std::vector<Field> fields = detail::fields_of(out);
  const std::vector<Field> default_fields = detail::fields_of(defaults);
  for (std::size_t i = 0; i < fields.size(); ++i) {
    if (result_neutral(fields[i].key)) copy_value(fields[i].target, default_fields[i].target);
  }
  return out;
}

std::vector<std::string> resume_conflicts(const ExperimentConfig& stored,
                                          const ExperimentConfig& requested) {
  return diff_lines(
      stored, requested, [](const std::string& key) { return !resumable(key); }, true);
}

}  // namespace txl::config
