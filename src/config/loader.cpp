// The Loader (loader.h): applies YAML layers (a file, an ablation variant, a --set override) onto
// a typed ExperimentConfig, parsing each value into its field and collecting every error with the
// place that set the key.

#include "loader.h"

#include <algorithm>
#include <cstddef>
#include <map>
#include <set>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "fields.h"
#include "scalars.h"
#include "txl/util/error.h"
#include "txl/util/text.h"
#include "validate.h"

namespace txl::config::detail {

namespace {

// Errors beyond this many are summarised: the first ones are what a researcher fixes first.
constexpr std::size_t kMaxReportedErrors = 20;

}  // namespace

void Loader::apply_document(const YAML::Node& root, const Source& source,
                            const std::set<std::string>& reserved) {
  // An empty document sets nothing; apply_experiment_file refuses a file that holds nothing.
  if (!root.IsDefined() || root.IsNull()) return;
  if (!root.IsMap()) {
    error(where(source, root.Mark()),
          "expected a mapping of sections (run, data, model, train, eval), got " + describe(root));
    return;
  }
  reserved_ = reserved;
  apply_mapping(root, "", source);
}

void Loader::apply_mapping(const YAML::Node& map, const std::string& prefix, const Source& source) {
  std::map<std::string, YAML::Mark> seen;
  for (auto it = map.begin(); it != map.end(); ++it) {
    const YAML::Node key_node = it->first;  // a copy: the iterator hands out a temporary
    if (!key_node.IsScalar()) {
      error(where(source, key_node.Mark()), "keys must be plain names, got " + describe(key_node));
      continue;
    }
    const std::string key = key_node.Scalar();
    auto [first, inserted] = seen.emplace(key, key_node.Mark());
    if (!inserted) {
      error(where(source, key_node.Mark()), "duplicate key " + detail::quoted(join(prefix, key)) +
                                                " (first at " + where(source, first->second) + ")");
      continue;
    }
    if (prefix.empty() && reserved_.count(key)) continue;
    const YAML::Node value = it->second;
    apply_value(join(prefix, key), value, source, key_node.Mark());
  }
}

void Loader::apply_override(const std::string& text) {
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

void Loader::validate(const std::string& context) {
  for (const detail::Violation& v : detail::check_experiment(state_.config)) {
    auto found = state_.origin.find(v.key);
    std::string location = found != state_.origin.end() ? found->second : state_.config.source;
    error(location, context + v.key + ": " + v.message);
  }
}

void Loader::throw_errors(const std::vector<std::string>& errors) {
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

std::string Loader::join(const std::string& prefix, const std::string& key) {
  return prefix.empty() ? key : prefix + "." + key;
}

std::string Loader::trim(const std::string& text) {
  const std::size_t begin = text.find_first_not_of(" \t");
  if (begin == std::string::npos) return "";
  return text.substr(begin, text.find_last_not_of(" \t") - begin + 1);
}

bool Loader::is_section(const std::string& key) {
  const auto& sections = detail::section_keys();
  return std::find(sections.begin(), sections.end(), key) != sections.end();
}

void Loader::apply_value(const std::string& key, const YAML::Node& value, const Source& source,
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

std::string Loader::unknown_key_message(const std::string& key) const {
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

void Loader::set_field(const Field& field, const YAML::Node& value, const Source& source,
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

std::string Loader::assign(std::string* member, const Field& field, const YAML::Node& value) {
  std::string text;
  if (!value.IsNull()) {
    if (!value.IsScalar()) return "expected a string, got " + describe(value);
    text = value.Scalar();
  }
  std::string problem = check_choice(field, text);
  if (problem.empty()) *member = text;
  return problem;
}

std::string Loader::assign(const detail::EnumRef& member, const Field& field,
                           const YAML::Node& value) {
  std::string text;
  if (!value.IsNull()) {
    if (!value.IsScalar()) {
      return "expected one of " + detail::join_choices(field.choices) + ", got " + describe(value);
    }
    text = value.Scalar();
  }
  return member.set(text) ? "" : check_choice(field, text);
}

std::string Loader::assign(bool* member, const Field&, const YAML::Node& value) {
  if (value.IsScalar() && value.Tag() != "!" && parse_bool(value.Scalar(), member)) return "";
  return "expected true or false, got " + describe(value);
}

std::string Loader::assign(double* member, const Field&, const YAML::Node& value) {
  const bool scalar = value.IsScalar() && value.Tag() != "!";
  const Number number = scalar ? read_double(value.Scalar(), member) : Number::kNotANumber;
  if (number == Number::kOk || number == Number::kTooSmall) return "";
  const std::string got = "expected a number, got " + describe(value);
  return number == Number::kTooLarge ? got + " (beyond a double's range, about 1.8e308)" : got;
}

template <typename T>
std::enable_if_t<std::is_integral_v<T>, std::string> Loader::assign(T* member, const Field&,
                                                                    const YAML::Node& value) {
  if (value.IsScalar() && value.Tag() != "!" && parse_integer(value.Scalar(), member)) return "";
  return expected_integer<T>(value) + ", got " + describe(value);
}

template <typename T>
std::string Loader::assign(std::vector<T>* member, const Field& field, const YAML::Node& value) {
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

std::string Loader::check_choice(const Field& field, const std::string& text) {
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

}  // namespace txl::config::detail
