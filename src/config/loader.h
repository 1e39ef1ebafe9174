#pragma once
// The loader shared by experiment and ablation files: YAML documents are applied as layers onto a
// typed ExperimentConfig (the Loader), remembering where each key was last set so that every error
// can point at a file:line:column; config files are read, and experiment files applied with their
// base chains. Private to src/config.

#include "txl/config/load.h"

#include <yaml-cpp/yaml.h>

#include <cstddef>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "fields.h"
#include "txl/config/config.h"

namespace txl::config::detail {

// ------------------------------------------------------------------------------ locations

// Where a layer comes from: a file (positions are line:column inside it) or one --set override.
struct Source {
  std::string name;           // "experiments/x.yaml" or "--set model.n_layer=2"
  bool has_positions = true;  // false for --set: the override text itself is the location
};

std::string where(const Source& source, const YAML::Mark& mark);

// The position of a value, or of its key when the value has none (an empty value).
YAML::Mark value_mark(const YAML::Node& value, const YAML::Mark& key_mark);

std::string describe(const YAML::Node& node);

YAML::Node parse_yaml(const std::string& text, const std::string& name);

// ------------------------------------------------------------------------------ the loader

// The state carried from layer to layer: the config and where each key was last set.
struct State {
  ExperimentConfig config;
  std::map<std::string, std::string> origin;  // dotted key -> "file:line:col" or "--set ..."
};

// Applies YAML layers onto a State. Errors are collected so that a file reports all its
// problems at once; throw_if_errors() raises them. Not copyable: its field table points into
// its own state.
class Loader {
 public:
  explicit Loader(State state = {})
      : state_(std::move(state)), fields_(detail::fields_of(state_.config)) {
    for (std::size_t i = 0; i < fields_.size(); ++i) index_[fields_[i].key] = i;
  }
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  const State& state() const { return state_; }
  ExperimentConfig& config() { return state_.config; }

  // A new layer (one file, one variant, one override): a key may be set once per layer.
  void begin_layer(bool allow_repeats = false) {
    layer_.clear();
    allow_repeats_ = allow_repeats;
  }
  const std::map<std::string, std::string>& layer_keys() const { return layer_; }

  // A top-level mapping of sections; keys in `reserved` are the caller's (base:, variants:).
  void apply_document(const YAML::Node& root, const Source& source,
                      const std::set<std::string>& reserved);

  // A mapping whose keys are relative to `prefix` ("" = top level, "model", ...).
  void apply_mapping(const YAML::Node& map, const std::string& prefix, const Source& source);

  // One `key.path=value` override; the value is YAML (`[2000, 6000]`, `true`, `kjv`).
  void apply_override(const std::string& text);

  // Records where `key` got its value when the caller sets it in code (an ablation's run.name).
  void note_origin(const std::string& key, const std::string& location) {
    state_.origin[key] = location;
  }

  // Adds an error that is not about a key (e.g. an ablation's own fields).
  void error(const std::string& location, const std::string& message) {
    errors_.push_back(location.empty() ? message : location + ": " + message);
  }

  // Range and consistency rules, each pointing at where its key was set.
  void validate(const std::string& context = "");

  bool has_errors() const { return !errors_.empty(); }
  void throw_if_errors() const { throw_errors(errors_); }

  static void throw_errors(const std::vector<std::string>& errors);
  const std::vector<std::string>& errors() const { return errors_; }

 private:
  static std::string join(const std::string& prefix, const std::string& key);
  static std::string trim(const std::string& text);
  static bool is_section(const std::string& key);

  void apply_value(const std::string& key, const YAML::Node& value, const Source& source,
                   const YAML::Mark& key_mark);

  std::string unknown_key_message(const std::string& key) const;

  void set_field(const Field& field, const YAML::Node& value, const Source& source,
                 const YAML::Mark& key_mark);

  // Each assign() parses `value` into the member and returns "" or what is wrong with it.
  std::string assign(std::string* member, const Field& field, const YAML::Node& value);

  // An enum by the name its table gives a value; any other text lists the names.
  std::string assign(const detail::EnumRef& member, const Field& field, const YAML::Node& value);

  std::string assign(bool* member, const Field&, const YAML::Node& value);

  std::string assign(double* member, const Field&, const YAML::Node& value);

  template <typename T>
  std::enable_if_t<std::is_integral_v<T>, std::string> assign(T* member, const Field&,
                                                              const YAML::Node& value);

  template <typename T>
  std::string assign(std::vector<T>* member, const Field& field, const YAML::Node& value);

  static std::string check_choice(const Field& field, const std::string& text);

  State state_;
  std::vector<Field> fields_;
  std::map<std::string, std::size_t> index_;
  std::set<std::string> reserved_;
  std::map<std::string, std::string> layer_;  // keys set in the current layer -> where
  bool allow_repeats_ = false;
  std::vector<std::string> errors_;
};

// ------------------------------------------------------------------------------ files

// The text of the config file at `path`, or a txl::Error saying why there is none: not found, a
// directory, not a regular file, or the system's reason (permission denied, a symlink loop).
// `what` names the file's role ("experiment file", "base file"); `prefix` leads the message (the
// location of the base: naming it, or ""); `hint` follows a not-found message.
std::string read_config_file(const std::filesystem::path& path, const std::string& what,
                             const std::string& prefix, const std::string& hint = "");

// ------------------------------------------------------------------------------ base chains

struct Chain {
  std::vector<std::string> names;               // as shown to the user
  std::vector<std::filesystem::path> resolved;  // canonical, for cycle detection
};

// Reads the experiment file at `path` (its base chain first) into `loader`. `included_from` is
// where the `base:` naming it sits ("" for the file the user named).
void apply_experiment_file(Loader& loader, const std::filesystem::path& path,
                           const std::string& included_from, Chain& chain);

// Applies a document of sections (`base:` first) from a file or an ablation's inline base. True
// when the document holds a base: or sets at least one key (`model: {}` sets none).
bool apply_experiment_node(Loader& loader, const YAML::Node& root, const std::string& name,
                           const std::filesystem::path& folder, Chain& chain);

// Applies --set overrides, each a layer of its own so a later one may repeat an earlier key.
void apply_overrides(Loader& loader, const std::vector<std::string>& overrides);

}  // namespace txl::config::detail
