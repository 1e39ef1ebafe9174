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
#include <vector>

namespace txl::json {

using Json = nlohmann::json;                // keys sorted
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
