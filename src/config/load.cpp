// Experiment and ablation loading: YAML documents are applied as layers onto a typed
// ExperimentConfig (defaults < base chain < file < --set), remembering where each key was last
// set so that every error can point at a file:line:column.

#include "txl/config/load.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <string_view>
#include <type_traits>

#include "fields.h"
#include "txl/util/error.h"
#include "txl/util/fs.h"
#include "txl/util/text.h"
#include "validate.h"

namespace txl::config {

namespace {

namespace stdfs = std::filesystem;
using detail::Field;

// Errors beyond this many are summarised: the first ones are what a researcher fixes first.
constexpr std::size_t kMaxReportedErrors = 20;

// ------------------------------------------------------------------------------ locations

// Where a layer comes from: a file (positions are line:column inside it) or one --set override.
struct Source {
  std::string name;           // "experiments/x.yaml" or "--set model.n_layer=2"
  bool has_positions = true;  // false for --set: the override text itself is the location
};

std::string where(const Source& source, const YAML::Mark& mark) {
  if (!source.has_positions || mark.is_null() || mark.line < 0) return source.name;
  return source.name + ":" + std::to_string(mark.line + 1) + ":" + std::to_string(mark.column + 1);
}

// The position of a value, or of its key when the value has none (an empty value).
YAML::Mark value_mark(const YAML::Node& value, const YAML::Mark& key_mark) {
  YAML::Mark mark = value.Mark();
  return value.IsNull() || mark.is_null() || mark.line < 0 ? key_mark : mark;
}

std::string describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
      return "nothing";
    case YAML::NodeType::Sequence:
      return "a sequence";
    case YAML::NodeType::Map:
      return "a mapping";
    default:
      return node.Tag() == "!" ? "the quoted string " + detail::quoted(node.Scalar())
                               : detail::quoted(node.Scalar());
  }
}

YAML::Node parse_yaml(const std::string& text, const std::string& name) {
  // YAML text is Unicode. Other bytes would come back from dump_experiment as U+FFFD, so a
  // config read back from a run or checkpoint would differ (found by fuzz_experiment).
  const std::size_t bad = util::find_invalid_utf8(text).value_or(std::string::npos);
  TXL_CHECK(bad == std::string::npos, name, ":",
            std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(bad), '\n') + 1,
            ": byte ", bad + 1, " is not UTF-8; experiment files must be UTF-8 text");
  try {
    return YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    TXL_FAIL(where(Source{name}, e.mark), ": invalid YAML: ", e.msg);
  }
}

// ------------------------------------------------------------------------ scalar parsing

std::string lower(std::string text) {
  for (char& ch : text) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return text;
}

bool parse_bool(const std::string& text, bool* out) {
  const std::string t = lower(text);
  if (t == "true" || t == "yes" || t == "on") {
    *out = true;
    return true;
  }
  if (t == "false" || t == "no" || t == "off") {
    *out = false;
    return true;
  }
  return false;
}

enum class Number { kOk, kTooSmall, kTooLarge, kNotANumber };

// Finite decimal numbers only: no setting means anything with .inf or .nan, and a NaN would slip
// through range checks unnoticed. A number beyond a double (1e400) is kTooLarge; one too small
// for it (1e-400) is kTooSmall and reads as the nearest double (0 or a denormal).
Number read_double(const std::string& text, double* out) {
  const std::string t = lower(text);
  // strtod alone would also take "inf", "nan" and hex floats.
  if (t.empty() || t.find_first_not_of("0123456789+-.e") != std::string::npos) {
    return Number::kNotANumber;
  }
  if (t.find_first_of("0123456789") == std::string::npos) return Number::kNotANumber;
  char* end = nullptr;
  errno = 0;
  double value = std::strtod(t.c_str(), &end);
  if (end != t.c_str() + t.size()) return Number::kNotANumber;
  if (errno == ERANGE && std::isinf(value)) return Number::kTooLarge;
  *out = value;
  return errno == ERANGE ? Number::kTooSmall : Number::kOk;
}

// Integers as digits, or as an exact float such as 1e6 (researchers write token budgets so).
template <typename T>
bool parse_integer(const std::string& text, T* out) {
  const std::size_t sign = !text.empty() && (text[0] == '-' || text[0] == '+') ? 1 : 0;
  const bool digits =
      text.size() > sign && text.find_first_not_of("0123456789", sign) == std::string::npos;
  if (digits) {
    errno = 0;
    if constexpr (std::is_signed_v<T>) {
      const long long v = std::strtoll(text.c_str(), nullptr, 10);
      if (errno == ERANGE || v < std::numeric_limits<T>::min() ||
          v > std::numeric_limits<T>::max()) {
        return false;
      }
      *out = static_cast<T>(v);
    } else {
      if (text[0] == '-') return false;
      const unsigned long long v = std::strtoull(text.c_str(), nullptr, 10);
      if (errno == ERANGE || v > std::numeric_limits<T>::max()) return false;
      *out = static_cast<T>(v);
    }
    return true;
  }
  double d = 0;
  // Exact values only: 1e-400 is not 0.
  if (read_double(text, &d) != Number::kOk || std::floor(d) != d) return false;
  // 2^63 and above do not fit a signed 64-bit integer; doubles that large are not exact anyway.
  if (d < static_cast<double>(std::numeric_limits<T>::min()) ||
      d >= std::ldexp(1.0, std::numeric_limits<T>::digits)) {
    return false;
  }
  *out = static_cast<T>(d);
  return true;
}

// True when `text` is a whole number of any size: digits with an optional sign
// (99999999999999999999), or a number whose value is whole (1e30) or beyond a double (1e400).
bool whole_number(const std::string& text) {
  const std::size_t sign = !text.empty() && (text[0] == '-' || text[0] == '+') ? 1 : 0;
  if (text.size() > sign && text.find_first_not_of("0123456789", sign) == std::string::npos) {
    return true;
  }
  double d = 0;
  const Number number = read_double(text, &d);
  return number == Number::kTooLarge || (number == Number::kOk && std::floor(d) == d);
}

// What an integer field expected, given the text it got: the range when the text is a whole
// number that does not fit (e.g. 3000000000 for a 32-bit field), else just the kind.
template <typename T>
std::string expected_integer(const YAML::Node& value) {
  const bool whole = value.IsScalar() && value.Tag() != "!" && whole_number(value.Scalar());
  const bool negative = whole && value.Scalar()[0] == '-';
  if (std::is_unsigned_v<T> && (!whole || negative)) return "expected a non-negative integer";
  if (!whole) return "expected an integer";
  return "expected an integer between " + std::to_string(std::numeric_limits<T>::min()) +
         " and " + std::to_string(std::numeric_limits<T>::max());
}

// A text the dump must quote: some YAML reader (1.1 or 1.2, yaml-cpp or PyYAML) could otherwise
// take it for a null, a boolean or a number. Any text opening like a number is quoted.
bool needs_quotes(const std::string& text) {
  if (text.empty()) return true;
  static const std::set<std::string> kSpecial = {"~",  "null", "y",   "n",    "yes",
                                                 "no", "on",   "off", "true", "false"};
  if (kSpecial.count(lower(text))) return true;
  const char first = text[0];
  return std::isdigit(static_cast<unsigned char>(first)) || first == '+' || first == '-' ||
         first == '.' || text.find_first_of(" #:'\"") != std::string::npos;
}

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
                      const std::set<std::string>& reserved) {
    // An empty document sets nothing; apply_experiment_file refuses a file that holds nothing.
    if (!root.IsDefined() || root.IsNull()) return;
    if (!root.IsMap()) {
      error(
          where(source, root.Mark()),
          "expected a mapping of sections (run, data, model, train, eval), got " + describe(root));
      return;
    }
    reserved_ = reserved;
    apply_mapping(root, "", source);
  }

  // A mapping whose keys are relative to `prefix` ("" = top level, "model", ...).
  void apply_mapping(const YAML::Node& map, const std::string& prefix, const Source& source) {
    std::map<std::string, YAML::Mark> seen;
    for (auto it = map.begin(); it != map.end(); ++it) {
      const YAML::Node key_node = it->first;  // a copy: the iterator hands out a temporary
      if (!key_node.IsScalar()) {
        error(where(source, key_node.Mark()),
              "keys must be plain names, got " + describe(key_node));
        continue;
      }
      const std::string key = key_node.Scalar();
      auto [first, inserted] = seen.emplace(key, key_node.Mark());
      if (!inserted) {
        error(where(source, key_node.Mark()), "duplicate key " +
                                                  detail::quoted(join(prefix, key)) +
                                                  " (first at " + where(source, first->second) +
                                                  ")");
        continue;
      }
      if (prefix.empty() && reserved_.count(key)) continue;
      const YAML::Node value = it->second;
      apply_value(join(prefix, key), value, source, key_node.Mark());
    }
  }

  // One `key.path=value` override; the value is YAML (`[2000, 6000]`, `true`, `kjv`).
  void apply_override(const std::string& text) {
    const Source source{"--set " + detail::shorten(text), false};
    reserved_.clear();  // base: and friends belong to files, not to --set
    const std::size_t equals = text.find('=');
    std::string key = equals == std::string::npos ? "" : trim(text.substr(0, equals));
    if (key.empty()) {
      error(source.name, "expected key.path=value, e.g. --set model.n_layer=2");
      return;
    }
    YAML::Node value;
    if (util::find_invalid_utf8(text)) {
      error(source.name, "the value is not UTF-8 text");
      return;
    }
    try {
      value = YAML::Load(text.substr(equals + 1));
    } catch (const YAML::ParserException& e) {
      error(source.name, "the value is not valid YAML: " + e.msg);
      return;
    }
    apply_value(key, value, source, YAML::Mark::null_mark());
  }

  // Records where `key` got its value when the caller sets it in code (an ablation's run.name).
  void note_origin(const std::string& key, const std::string& location) {
    state_.origin[key] = location;
  }

  // Adds an error that is not about a key (e.g. an ablation's own fields).
  void error(const std::string& location, const std::string& message) {
    errors_.push_back(location.empty() ? message : location + ": " + message);
  }

  // Range and consistency rules, each pointing at where its key was set.
  void validate(const std::string& context = "") {
    for (const detail::Violation& v : detail::check_experiment(state_.config)) {
      auto found = state_.origin.find(v.key);
      std::string location = found != state_.origin.end() ? found->second : state_.config.source;
      error(location, context + v.key + ": " + v.message);
    }
  }

  bool has_errors() const { return !errors_.empty(); }
  void throw_if_errors() const { throw_errors(errors_); }

  static void throw_errors(const std::vector<std::string>& errors) {
    if (errors.empty()) return;
    std::string message;
    for (std::size_t i = 0; i < errors.size() && i < kMaxReportedErrors; ++i) {
      message += (i > 0 ? "\n" : "") + errors[i];
    }
    if (errors.size() > kMaxReportedErrors) {
      message += "\n... and " + std::to_string(errors.size() - kMaxReportedErrors) + " more errors";
    }
    throw Error(message);
  }
  const std::vector<std::string>& errors() const { return errors_; }

 private:
  static std::string join(const std::string& prefix, const std::string& key) {
    return prefix.empty() ? key : prefix + "." + key;
  }
  static std::string trim(const std::string& text) {
    const std::size_t begin = text.find_first_not_of(" \t");
    if (begin == std::string::npos) return "";
    return text.substr(begin, text.find_last_not_of(" \t") - begin + 1);
  }
  static bool is_section(const std::string& key) {
    const auto& sections = detail::section_keys();
    return std::find(sections.begin(), sections.end(), key) != sections.end();
  }

  void apply_value(const std::string& key, const YAML::Node& value, const Source& source,
                   const YAML::Mark& key_mark) {
    auto found = index_.find(key);
    if (found != index_.end()) {
      set_field(fields_[found->second], value, source, key_mark);
    } else if (is_section(key)) {
      if (value.IsNull()) return;  // `model:` with nothing under it changes nothing
      if (!value.IsMap()) {
        error(where(source, value_mark(value, key_mark)),
              key + ": expected a mapping of " + key + " keys, got " + describe(value));
        return;
      }
      apply_mapping(value, key, source);
    } else {
      error(where(source, key_mark), unknown_key_message(key));
    }
  }

  std::string unknown_key_message(const std::string& key) const {
    std::string message = "unknown key " + detail::quoted(key);
    if (key == "variants") {
      return message + " (it belongs in an ablation file: load that with txl-ablate)";
    }
    // A key put in the wrong section (or none): the same name exists elsewhere. Of several
    // (run.seed, data.synthetic.seed) the one closest to what was written.
    const std::string last = "." + key.substr(key.rfind('.') + 1);
    std::string moved;
    for (const Field& field : fields_) {
      if (field.key.size() > last.size() &&
          field.key.compare(field.key.size() - last.size(), last.size(), last) == 0 &&
          (moved.empty() ||
           detail::edit_distance(key, field.key) < detail::edit_distance(key, moved))) {
        moved = field.key;
      }
    }
    if (!moved.empty()) return message + "; did you mean '" + moved + "'?";
    std::vector<std::string> candidates;
    for (const Field& field : fields_) candidates.push_back(field.key);
    for (const std::string& section : detail::section_keys()) candidates.push_back(section);
    for (const std::string& reserved : reserved_) {
      if (reserved != key) candidates.push_back(reserved);  // e.g. `--set base=...`
    }
    const std::string suggestion = detail::closest(key, candidates);
    if (!suggestion.empty()) return message + "; did you mean '" + suggestion + "'?";
    // No plausible typo: list what the enclosing section accepts.
    std::string parent;
    for (const std::string& section : detail::section_keys()) {
      if (key.rfind(section + ".", 0) == 0) parent = section;  // deepest wins (listed in order)
    }
    std::set<std::string> names;
    std::vector<std::string> ordered;
    auto add = [&](const std::string& full) {
      if (!parent.empty() && full.rfind(parent + ".", 0) != 0) return;
      std::string rest = parent.empty() ? full : full.substr(parent.size() + 1);
      rest = rest.substr(0, rest.find('.'));
      if (names.insert(rest).second) ordered.push_back(rest);
    };
    for (const Field& field : fields_) add(field.key);
    if (parent.empty()) {
      for (const std::string& reserved : reserved_) add(reserved);
    }
    std::string list;
    for (const std::string& name : ordered) list += (list.empty() ? "" : ", ") + name;
    return message + "; valid keys " + (parent.empty() ? "at the top" : "in '" + parent + "'") +
           ": " + list;
  }

  void set_field(const Field& field, const YAML::Node& value, const Source& source,
                 const YAML::Mark& key_mark) {
    const std::string location = where(source, value_mark(value, key_mark));
    if (!allow_repeats_) {
      auto [first, inserted] = layer_.emplace(field.key, location);
      if (!inserted) {
        error(where(source, key_mark),
              "'" + field.key + "' is set twice (first at " + first->second + ")");
        return;
      }
    } else {
      layer_[field.key] = location;
    }
    std::string problem =
        std::visit([&](auto member) { return assign(member, field, value); }, field.target);
    if (!problem.empty()) {
      error(location, field.key + ": " + problem);
      return;
    }
    state_.origin[field.key] = location;
  }

  // Each assign() parses `value` into the member and returns "" or what is wrong with it.
  std::string assign(std::string* member, const Field& field, const YAML::Node& value) {
    std::string text;
    if (!value.IsNull()) {
      if (!value.IsScalar()) return "expected a string, got " + describe(value);
      text = value.Scalar();
    }
    std::string problem = check_choice(field, text);
    if (problem.empty()) *member = text;
    return problem;
  }

  // An enum by the name its table gives a value; any other text lists the names.
  std::string assign(const detail::EnumRef& member, const Field& field, const YAML::Node& value) {
    std::string text;
    if (!value.IsNull()) {
      if (!value.IsScalar()) {
        return "expected one of " + detail::join_choices(field.choices) + ", got " +
               describe(value);
      }
      text = value.Scalar();
    }
    return member.set(text) ? "" : check_choice(field, text);
  }

  std::string assign(bool* member, const Field&, const YAML::Node& value) {
    if (value.IsScalar() && value.Tag() != "!" && parse_bool(value.Scalar(), member)) return "";
    return "expected true or false, got " + describe(value);
  }

  std::string assign(double* member, const Field&, const YAML::Node& value) {
    const bool scalar = value.IsScalar() && value.Tag() != "!";
    const Number number = scalar ? read_double(value.Scalar(), member) : Number::kNotANumber;
    if (number == Number::kOk || number == Number::kTooSmall) return "";
    const std::string got = "expected a number, got " + describe(value);
    return number == Number::kTooLarge ? got + " (beyond a double's range, about 1.8e308)" : got;
  }

  template <typename T>
  std::enable_if_t<std::is_integral_v<T>, std::string> assign(T* member, const Field&,
                                                              const YAML::Node& value) {
    if (value.IsScalar() && value.Tag() != "!" && parse_integer(value.Scalar(), member)) return "";
    return expected_integer<T>(value) + ", got " + describe(value);
  }

  template <typename T>
  std::string assign(std::vector<T>* member, const Field& field, const YAML::Node& value) {
    const std::string kind = std::is_same_v<T, std::string> ? "strings" : "integers";
    if (value.IsNull()) {  // `cutoffs:` with nothing = the empty list
      member->clear();
      return "";
    }
    if (!value.IsSequence()) {
      return "expected a list of " + kind + " like [" +
             (std::is_same_v<T, std::string> ? "a, b" : "2000, 6000") + "], got " + describe(value);
    }
    std::vector<T> items(value.size());
    for (std::size_t i = 0; i < value.size(); ++i) {
      const YAML::Node item = value[i];
      std::string problem;
      if constexpr (std::is_same_v<T, std::string>) {
        if (!item.IsScalar()) {
          problem = "expected a string, got " + describe(item);
        } else {
          items[i] = item.Scalar();
          problem = check_choice(field, items[i]);
        }
      } else {
        if (!item.IsScalar() || item.Tag() == "!" || !parse_integer(item.Scalar(), &items[i])) {
          problem = expected_integer<T>(item) + ", got " + describe(item);
        }
      }
      if (!problem.empty()) return "item " + std::to_string(i + 1) + ": " + problem;
    }
    *member = std::move(items);
    return "";
  }

  static std::string check_choice(const Field& field, const std::string& text) {
    if (field.choices.empty() ||
        std::find(field.choices.begin(), field.choices.end(), text) != field.choices.end()) {
      return "";
    }
    std::string message =
        detail::quoted(text) + " is not one of " + detail::join_choices(field.choices);
    const std::string suggestion = detail::closest(text, field.choices);
    if (!suggestion.empty()) message += "; did you mean '" + suggestion + "'?";
    return message;
  }

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
std::string read_config_file(const stdfs::path& path, const std::string& what,
                             const std::string& prefix, const std::string& hint = "") {
  const std::string name = detail::shorten(path.string());
  std::error_code ec;
  const stdfs::file_status status = stdfs::status(path, ec);
  if (status.type() == stdfs::file_type::not_found) {
    // ENOTDIR (a file used as a folder) is also "not found"; say so.
    const bool plain = !ec || ec == std::errc::no_such_file_or_directory;
    TXL_FAIL(prefix, what, " not found: ", name, plain ? "" : " (" + ec.message() + ")", hint);
  }
  if (ec) TXL_FAIL(prefix, "cannot read ", what, " ", name, ": ", ec.message());
  if (stdfs::is_directory(status)) {
    TXL_FAIL(prefix, what, " ", name, " is a directory; expected a YAML file");
  }
  if (!stdfs::is_regular_file(status)) {
    TXL_FAIL(prefix, what, " ", name, " is not a regular file; expected a YAML file");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) TXL_FAIL(prefix, "cannot read ", what, " ", name, ": ", std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) TXL_FAIL(prefix, "cannot read ", what, " ", name, ": ", std::strerror(errno));
  return text.str();
}

// ------------------------------------------------------------------------------ base chains

std::string chain_text(const std::vector<std::string>& chain, const std::string& last) {
  std::string text;
  for (const std::string& name : chain) text += name + " -> ";
  return text + last;
}

struct Chain {
  std::vector<std::string> names;     // as shown to the user
  std::vector<stdfs::path> resolved;  // canonical, for cycle detection
};

bool apply_experiment_node(Loader& loader, const YAML::Node& root, const std::string& name,
                           const stdfs::path& folder, Chain& chain);

// Reads the experiment file at `path` (its base chain first) into `loader`. `included_from` is
// where the `base:` naming it sits ("" for the file the user named).
void apply_experiment_file(Loader& loader, const stdfs::path& path,
                           const std::string& included_from, Chain& chain) {
  const std::string name = path.string();
  std::error_code ec;
  const stdfs::path resolved = stdfs::weakly_canonical(stdfs::absolute(path), ec);
  for (const stdfs::path& previous : chain.resolved) {
    if (previous == resolved) {
      TXL_FAIL(included_from, ": base cycle: ", chain_text(chain.names, name),
               " (remove one of these base: keys)");
    }
  }
  const std::string text =
      included_from.empty()
          ? read_config_file(path, "experiment file", "")
          : read_config_file(path, "base file", included_from + ": ",
                             " (a base path is relative to the folder of the file naming it)");
  const YAML::Node root = parse_yaml(text, name);
  chain.names.push_back(name);
  chain.resolved.push_back(resolved);
  const std::size_t errors_before = loader.errors().size();
  const bool holds_settings =
      apply_experiment_node(loader, root, name, path.parent_path(), chain);
  if (!holds_settings && loader.errors().size() == errors_before) {
    // Else an empty file (or a truncated one, or one of comments) would train the built-in
    // defaults as if they had been asked for.
    loader.error(name, std::string("holds no settings (it is empty, or only comments or empty "
                                   "sections)") +
                           (included_from.empty() ? "" : "; it is the base named at " +
                                                             included_from) +
                           "; an experiment file needs at least one setting or a base:");
  }
  chain.names.pop_back();
  chain.resolved.pop_back();
}

// Applies a document of sections (`base:` first) from a file or an ablation's inline base. True
// when the document holds a base: or sets at least one key (`model: {}` sets none).
bool apply_experiment_node(Loader& loader, const YAML::Node& root, const std::string& name,
                           const stdfs::path& folder, Chain& chain) {
  const Source source{name};
  if (root.IsMap() && root["base"]) {
    const YAML::Node base = root["base"];
    const std::string location = where(source, base.Mark());
    if (!base.IsScalar() || base.Scalar().empty()) {
      TXL_FAIL(location, ": base: expected the path of an experiment file, got ", describe(base));
    }
    apply_experiment_file(loader, (folder / base.Scalar()).lexically_normal(), location, chain);
  }
  loader.begin_layer();
  loader.apply_document(root, source, {"base"});
  return (root.IsMap() && root["base"]) || !loader.layer_keys().empty();
}

// Applies --set overrides, each a layer of its own so a later one may repeat an earlier key.
void apply_overrides(Loader& loader, const std::vector<std::string>& overrides) {
  for (const std::string& text : overrides) {
    loader.begin_layer(true);
    loader.apply_override(text);
  }
}

ExperimentConfig finish(Loader& loader) {
  loader.throw_if_errors();  // type errors first: range checks on half-read values mislead
  loader.validate();
  loader.throw_if_errors();
  return loader.state().config;
}

// "" when an ablation's or a variant's name is a plain folder name (they make up run.name
// "<ablation>/<variant>"), else the message, e.g. "variant name 'a/b' must be ...: it holds '/'".
std::string name_error(const std::string& what, const std::string& name) {
  const std::string problem = detail::plain_name_problem(name, /*parts=*/false);
  if (problem.empty()) return "";
  return what + " " + detail::quoted(name) +
         " must be letters, digits, '_', '-' or '.' only (it names a folder under runs/): " +
         problem;
}

// Reads an optional string field of the ablation file itself.
std::string ablation_string(Loader& loader, const YAML::Node& root, const std::string& key,
                            const Source& source) {
  const YAML::Node node = root[key];
  if (!node || node.IsNull()) return "";
  if (!node.IsScalar()) {
    loader.error(where(source, node.Mark()), key + ": expected a string, got " + describe(node));
    return "";
  }
  return node.Scalar();
}

// An ablation-level list of integers (seeds, contexts): each at least `least`, no repeats,
// strictly increasing when `increasing`; an error at the offending item otherwise.
std::vector<std::int64_t> ablation_int_list(Loader& loader, const YAML::Node& root,
                                            const std::string& key, const Source& source,
                                            std::int64_t least, bool increasing) {
  std::vector<std::int64_t> out;
  const YAML::Node node = root[key];
  if (!node || node.IsNull()) return out;
  if (!node.IsSequence() || node.size() == 0) {
    loader.error(where(source, node.Mark()),
                 key + ": expected a non-empty list of integers, e.g. " + key + ": [1, 2, 3], got " +
                     describe(node));
    return out;
  }
  for (const YAML::Node& item : node) {
    std::int64_t value = 0;
    const std::string text = item.IsScalar() ? item.Scalar() : "";
    std::size_t used = 0;
    try {
      value = std::stoll(text, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    const std::string at = where(source, item.Mark());
    if (text.empty() || used != text.size()) {
      loader.error(at, key + ": expected an integer, got " + describe(item));
    } else if (value < least) {
      loader.error(at, key + ": " + text + " is below the least allowed, " + std::to_string(least));
    } else if (std::find(out.begin(), out.end(), value) != out.end()) {
      loader.error(at, key + ": " + text + " is listed twice");
    } else if (increasing && !out.empty() && value < out.back()) {
      loader.error(at, key + ": " + text + " comes after " + std::to_string(out.back()) +
                           "; list them in increasing order");
    } else {
      out.push_back(value);
      continue;
    }
    return {};
  }
  return out;
}

// `sbatch:` of an ablation: a list of option strings.
std::vector<std::string> ablation_string_list(Loader& loader, const YAML::Node& root,
                                              const std::string& key, const Source& source) {
  std::vector<std::string> out;
  const YAML::Node node = root[key];
  if (!node || node.IsNull()) return out;
  if (!node.IsSequence()) {
    loader.error(where(source, node.Mark()),
                 key + ": expected a list of strings, e.g. [\"--time=60\"], got " + describe(node));
    return out;
  }
  for (const YAML::Node& item : node) {
    if (!item.IsScalar()) {
      loader.error(where(source, item.Mark()), key + ": expected a string, got " + describe(item));
      return {};
    }
    out.push_back(item.Scalar());
  }
  return out;
}

// Threads belong to the process, which txl-ablate sets once before the first variant, so every
// variant asks for the same run.threads. "" when `variant` agrees with the first variant loaded,
// else the error at the place that set its run.threads (the variant's name when none did).
std::string threads_error(const AblationConfig& ablation, const std::string& name,
                          const State& variant, const std::string& location) {
  if (ablation.variants.empty()) return "";
  const auto& [first_name, first] = ablation.variants.front();
  const int threads = variant.config.run.threads;
  if (threads == first.run.threads) return "";
  const auto set_at = variant.origin.find("run.threads");
  return (set_at != variant.origin.end() ? set_at->second : location) +
         ": run.threads: variant '" + name + "' asks for " + std::to_string(threads) +
         ", variant '" + first_name + "' for " + std::to_string(first.run.threads) +
         "; threads belong to the process, which txl-ablate sets once for every variant: set "
         "run.threads in the ablation's own run section or with --set";
}

// ------------------------------------------------------------------------------ ablations

// The ablation's name and output_dir, checked (a name is required and must be a folder name).
AblationConfig read_ablation_names(Loader& loader, const YAML::Node& root, const Source& source) {
  AblationConfig ablation;
  ablation.name = ablation_string(loader, root, "name", source);
  ablation.output_dir = ablation_string(loader, root, "output_dir", source);
  ablation.seeds = ablation_int_list(loader, root, "seeds", source, 0, false);
  ablation.contexts = ablation_int_list(loader, root, "contexts", source, 1, true);
  ablation.sbatch = ablation_string_list(loader, root, "sbatch", source);
  if (!root["name"]) {
    loader.error(source.name,
                 "name: missing; every ablation needs a name (its runs go to runs/<name>/)");
  } else if (!loader.has_errors() && !name_error("name:", ablation.name).empty()) {
    loader.error(where(source, root["name"].Mark()), name_error("name:", ablation.name));
  }
  return ablation;
}

// Applies the ablation's base (an experiment file, or an inline mapping of sections), then the
// ablation file's own sections, which every variant shares.
void apply_ablation_base(Loader& loader, const YAML::Node& root, const Source& source) {
  Chain chain;
  const stdfs::path folder = stdfs::path(source.name).parent_path();
  const YAML::Node base_node = root["base"];
  if (base_node && base_node.IsScalar()) {
    apply_experiment_file(loader, (folder / base_node.Scalar()).lexically_normal(),
                          where(source, base_node.Mark()), chain);
  } else if (base_node && base_node.IsMap()) {
    apply_experiment_node(loader, base_node, source.name, folder, chain);
  } else if (base_node && !base_node.IsNull()) {
    loader.error(where(source, base_node.Mark()),
                 "base: expected an experiment file path or a mapping of sections, got " +
                     describe(base_node));
  }
  loader.begin_layer();
  loader.apply_document(root, source,
                        {"name", "output_dir", "base", "variants", "seeds", "contexts", "sbatch"});
}

// An error unless `variants` is a non-empty mapping of variant name -> overrides.
void check_variants_node(Loader& loader, const YAML::Node& variants, const Source& source) {
  if (!variants || variants.IsNull() || (variants.IsMap() && variants.size() == 0)) {
    loader.error(source.name,
                 "variants: missing or empty; list at least one, e.g. variants: {xl: {}}");
  } else if (!variants.IsMap()) {
    loader.error(
        where(source, variants.Mark()),
        "variants: expected a mapping of variant name -> overrides, got " + describe(variants));
  }
}

// The base with the --set overrides, which may not name the runs (each variant's are its own).
ExperimentConfig base_with_overrides(const State& base, const std::vector<std::string>& overrides) {
  Loader resolved(base);
  for (const std::string& text : overrides) {
    resolved.begin_layer(true);
    resolved.apply_override(text);
    for (const char* key : {"run.name", "run.output_dir"}) {
      if (resolved.layer_keys().count(key)) {
        resolved.error("--set " + detail::shorten(text),
                       std::string(key) +
                           ": an ablation names its variants itself "
                           "(<ablation>/<variant>); set it per variant in the file");
      }
    }
  }
  resolved.throw_if_errors();
  return resolved.state().config;
}

// One entry of an ablation's variants: its name, where it sits and its overrides.
struct VariantNode {
  std::string name;
  std::string location;  // "file:line:col" of its name
  YAML::Node changes;
  const Source& source;
};

// Resolves one variant (the base, its changes, the --set overrides, its run name and folder)
// and appends it to `ablation`, or its errors to `errors`.
void load_variant(const State& base, AblationConfig& ablation, const VariantNode& node,
                  const std::vector<std::string>& overrides, std::vector<std::string>& errors) {
  const std::string context = "variant '" + node.name + "': ";
  Loader variant(base);
  variant.begin_layer();
  if (node.changes.IsMap()) {
    variant.apply_mapping(node.changes, "", node.source);
  } else if (!node.changes.IsNull()) {
    variant.error(where(node.source, node.changes.Mark()),
                  context + "expected a mapping of overrides (dotted keys or sections), got " +
                      describe(node.changes));
  }
  const bool sets_name = variant.layer_keys().count("run.name") > 0;
  const bool sets_dir = variant.layer_keys().count("run.output_dir") > 0;
  apply_overrides(variant, overrides);
  ExperimentConfig& config = variant.config();
  if (!sets_name) {
    config.run.name = ablation.name + "/" + node.name;
    variant.note_origin("run.name", node.location);  // a rule on the name points at the variant
  }
  const std::string root_dir =
      ablation.output_dir.empty() ? "runs/" + ablation.name : ablation.output_dir;
  if (!sets_dir) config.run.output_dir = root_dir + "/" + node.name;
  if (!variant.has_errors()) variant.validate(context);
  errors.insert(errors.end(), variant.errors().begin(), variant.errors().end());
  if (errors.empty()) {
    const std::string threads = threads_error(ablation, node.name, variant.state(), node.location);
    if (!threads.empty()) errors.push_back(threads);
  }
  if (errors.empty()) ablation.variants.emplace_back(node.name, config);
}

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
      {"train.max_steps", true}, {"train.max_tokens", true}, {"train.max_minutes", true},
      // How often it validates, how patient early stopping is, and how much of valid the
      // periodic evaluation reads: they decide when it stops and which weights are kept as
      // checkpoint_best (with schedule: plateau they time the decays), not what a step computes.
      {"train.eval_interval", true}, {"train.patience", true}, {"train.eval_max_tokens", true},
      // How often it saves: a checkpoint is a copy of the state, and a resume from it is exact.
      {"train.checkpoint_interval", false},
      // The divergence guard decides when to give up on a run and which weights may be kept,
      // never what a step does.
      {"train.divergence_factor", true}, {"train.divergence_patience", true},
      // Where and how fast it runs, and what it prints: the checkpoint restores the same state on
      // any device or thread count (only dropout draws start afresh when the device kind or the
      // number of processes changes); the same computation on other hardware.
      {"run.threads", false}, {"run.device", false}, {"run.log_interval", false},
      {"run.dist_timeout", false},
      // Folders the user chose: the run folder may have moved, and caches are found by the
      // fingerprint of what they hold, not by where they live.
      {"run.output_dir", false}, {"data.cache_dir", false},
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

ExperimentConfig load_experiment(const std::string& path,
                                 const std::vector<std::string>& overrides) {
  Loader loader;
  loader.config().source = path;
  Chain chain;
  apply_experiment_file(loader, path, "", chain);
  apply_overrides(loader, overrides);
  return finish(loader);
}

ExperimentConfig parse_experiment_string(const std::string& yaml, const std::string& origin,
                                         const std::vector<std::string>& overrides) {
  Loader loader;
  loader.config().source = origin;
  const std::string name = origin.empty() ? "<string>" : origin;
  Chain chain;
  chain.names.push_back(name);
  apply_experiment_node(loader, parse_yaml(yaml, name), name, stdfs::path(origin).parent_path(),
                        chain);
  apply_overrides(loader, overrides);
  return finish(loader);
}

AblationConfig load_ablation(const std::string& path, const std::vector<std::string>& overrides) {
  const YAML::Node root = parse_yaml(read_config_file(path, "ablation file", ""), path);
  const Source source{path};
  TXL_CHECK(root.IsMap(), where(source, root.Mark()),
            ": expected an ablation (name, base, variants), got ", describe(root));
  Loader base;
  base.config().source = path;
  AblationConfig ablation = read_ablation_names(base, root, source);
  apply_ablation_base(base, root, source);
  check_variants_node(base, root["variants"], source);
  base.throw_if_errors();
  ablation.base = base_with_overrides(base.state(), overrides);
  std::vector<std::string> errors;
  std::set<std::string> names;
  const YAML::Node variants = root["variants"];
  for (auto it = variants.begin(); it != variants.end(); ++it) {
    const std::string name = it->first.Scalar();
    const std::string location = where(source, it->first.Mark());
    if (!name_error("variant name", name).empty()) {
      errors.push_back(location + ": " + name_error("variant name", name));
    } else if (!names.insert(name).second) {
      errors.push_back(location + ": variant '" + name + "' is listed twice");
    } else {
      load_variant(base.state(), ablation, {name, location, it->second, source}, overrides,
                   errors);
    }
  }
  Loader::throw_errors(errors);
  return ablation;
}

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

void validate_experiment(const ExperimentConfig& config) {
  std::vector<std::string> errors;
  const std::string prefix = config.source.empty() ? "" : config.source + ": ";
  for (const detail::Violation& v : detail::check_experiment(config)) {
    errors.push_back(prefix + v.key + ": " + v.message);
  }
  Loader::throw_errors(errors);
}

std::string fingerprint(const ExperimentConfig& config) {
  return fs::hex64(fs::fnv1a(dump_experiment(config)));
}

std::vector<std::string> diff_experiments(const ExperimentConfig& before,
                                          const ExperimentConfig& after) {
  return diff_lines(before, after, [](const std::string&) { return true; }, false);
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
