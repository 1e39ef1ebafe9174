#pragma once
// The one table of experiment settings: every field of ExperimentConfig under its dotted YAML
// key, in struct order, with the allowed values of the enums. Loading, dumping, diffing and
// fingerprinting all walk this table, so a field added to config.h is registered here once.
// Private to src/config.

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "txl/config/config.h"

namespace txl::config::detail {

// An enum member of one particular ExperimentConfig, read and written by name through its enum's
// name table (EnumNames), so the loader, the dump and the diff treat every enum alike.
class EnumRef {
 public:
  template <typename E>
  explicit EnumRef(E* member) : member_(member), get_(&get_of<E>), set_(&set_of<E>) {}

  // The value's name, e.g. "vanilla".
  std::string name() const { return get_(member_); }
  // Sets the value called `text`; false (and nothing set) when the table has no such name.
  bool set(const std::string& text) const { return set_(member_, text); }

 private:
  template <typename E>
  static std::string get_of(const void* member) {
    return to_string(*static_cast<const E*>(member));
  }
  template <typename E>
  static bool set_of(void* member, const std::string& text) {
    const std::optional<E> value = parse_enum<E>(text);
    if (value) *static_cast<E*>(member) = *value;
    return value.has_value();
  }

  void* member_;
  std::string (*get_)(const void*);
  bool (*set_)(void*, const std::string&);
};

// Where a field's value lives in one particular ExperimentConfig.
using Target =
    std::variant<std::string*, bool*, int*, std::int64_t*, std::uint64_t*, double*,
                 std::vector<std::string>*, std::vector<std::int64_t>*, std::vector<int>*, EnumRef>;

struct Field {
  std::string key;                   // dotted, e.g. "data.tokenizer.vocab_size"
  Target target;                     // the member of the config the table was built for
  std::vector<std::string> choices;  // allowed values of a string, string list or enum (its
                                     // table's names); empty = any
  bool omitted_at_default = false;   // left out of the dump (and so of the fingerprint) while it
                                     // holds its default: a field added after configs were stored
};

// The table for `config`: its targets point into `config`, so build it for the object at hand.
std::vector<Field> fields_of(ExperimentConfig& config);

// Every section key ("run", "data", "data.tokenizer", ...), parents before children.
const std::vector<std::string>& section_keys();

// The value in canonical text form, what equality and diffs compare: strings and enum names as
// they are, list items of strings quoted, doubles as format_double.
std::string format_value(const Target& target);

// Shortest decimal text that parses back to exactly `value`, always with a '.' or an exponent
// marker so every YAML reader (1.1 and 1.2) takes it as a float: 0.1, 1.0, 2.5e-05, .inf.
std::string format_double(double value);

// The allowed values joined for messages: "cosine | inv_sqrt | constant | plateau".
std::string join_choices(const std::vector<std::string>& choices);

// A user's text as an error message quotes it: whole when short, else its first bytes (cut at a
// UTF-8 character boundary) and its size, so that a 10 MB value cannot flood the terminal.
// shorten: "abc" or "abcd... (10485760 bytes)"; quoted: "'abc'" or "'abcd...' (10485760 bytes)".
std::string shorten(const std::string& text);
std::string quoted(const std::string& text);

// Optimal-string-alignment edit distance (insertions, deletions, substitutions, transpositions).
std::size_t edit_distance(const std::string& a, const std::string& b);

// The candidate closest to `word` if it is close enough to be a plausible typo, else the first
// candidate that `word` abbreviates (at least 2 characters), else "". Candidates whose length alone
// rules them out are skipped, so a huge `word` costs no more than reading it.
std::string closest(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace txl::config::detail
