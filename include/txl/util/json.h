#pragma once
// JSON that is always valid: numbers that are not finite (an overflowing perplexity, a diverged
// loss) are written as null, and the record says why under "null_because"; get_number reads
// them back as they were. The records themselves are nlohmann::json objects (ordered_json where
// the order of the keys is part of the format), kept inside .cpp files: this header is included
// only by sources, never by another public header.

#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "txl/util/text.h"

namespace txl::json {

// The deepest nesting of arrays and objects a file txl reads may have: serde_json's limit, which
// Hugging Face's safetensors reader inherits. nlohmann's parser has none, and a header of 90 MB
// of '[' costs it gigabytes before it fails.
inline constexpr int kMaxDepth = 128;

// Whether `text` nests arrays and objects deeper than `max_depth` (brackets inside strings do not
// count). One pass, no allocation: run it before nlohmann's parser on any text read from a file.
inline bool nested_deeper_than(std::string_view text, int max_depth = kMaxDepth) {
  int depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character, whatever it is
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return true;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return false;
}

using Json = nlohmann::json;                 // keys sorted
using OrderedJson = nlohmann::ordered_json;  // keys in insertion order

// record[key] = value, or null with record["null_because"][key] = "nan" | "+inf" | "-inf".
template <typename JsonT>
void put_number(JsonT& record, const std::string& key, double value) {
  if (std::isfinite(value)) {
    record[key] = value;
    return;
  }
  record[key] = nullptr;
  record["null_because"][key] = std::isnan(value) ? "nan" : value > 0 ? "+inf" : "-inf";
}

// record[key] = `bytes` when they are well-formed UTF-8 (JSON holds Unicode text only); else the
// text with each byte that is not UTF-8 as U+FFFD, and the exact bytes in base64 under
// key + "_base64" (e.g. a byte-level model's output cut inside a character).
template <typename JsonT>
void put_text(JsonT& record, const std::string& key, const std::string& bytes) {
  if (!util::find_invalid_utf8(bytes)) {
    record[key] = bytes;
    return;
  }
  record[key] = util::replace_invalid_utf8(bytes);
  record[key + "_base64"] = util::base64(bytes);
}

// A list of numbers, each non-finite one (e.g. a mean over nothing) as null.
inline Json number_list(const std::vector<double>& values) {
  Json list = Json::array();
  for (double v : values) list.push_back(std::isfinite(v) ? Json(v) : Json());
  return list;
}

// The number put_number wrote under `key`: the value, or for null the non-finite number that
// record["null_because"][key] names (NaN when it names none); `missing` when the key is absent
// or holds no number.
template <typename JsonT>
double get_number(const JsonT& record, const std::string& key, double missing) {
  const auto it = record.find(key);
  if (it == record.end()) return missing;
  if (it->is_number()) return it->template get<double>();
  if (!it->is_null()) return missing;
  const auto because = record.find("null_because");
  std::string reason;
  if (because != record.end() && because->is_object()) {
    const auto r = because->find(key);
    if (r != because->end() && r->is_string()) reason = r->template get<std::string>();
  }
  if (reason == "+inf") return std::numeric_limits<double>::infinity();
  if (reason == "-inf") return -std::numeric_limits<double>::infinity();
  return std::numeric_limits<double>::quiet_NaN();
}

}  // namespace txl::json
