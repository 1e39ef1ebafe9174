#pragma once
// Records written once. A record type lists its fields in one function template, in file order:
//
//   template <typename R, typename Visit>  // R = Record or const Record
//   void fields(R& r, Visit&& visit) {
//     visit("variant", r.variant);
//     visit("seed", r.seed, record::kOptional);               // absent in older files
//     visit.derived("seconds_per_token", r.seconds_per_token());  // written, never read
//   }
//
// and that one list drives JSON out (JsonWriter), JSON in (JsonReader), and a CSV header and its
// rows (CsvHeader, CsvRow). Field types: std::string, bool, int, std::int64_t, double (non-finite
// as null with its reason, json::put_number), std::vector<double> (JSON only, left out while empty,
// nothing scored = null) and enums with a name table (found by argument-dependent lookup:
// to_string(e), parse_name(text, &e), choices_of(e), as config/enums.h defines them).
// Included only by sources, like json.h.

#include <fmt/core.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "txl/util/error.h"
#include "txl/util/json.h"

namespace txl::record {

// Field flags. kOptional: a reader keeps the field's default when the key is absent (a field
// added after files were written); without it an absent key is an error.
inline constexpr unsigned kRequired = 0;
inline constexpr unsigned kOptional = 1;

template <typename T>
inline constexpr bool kIsList = std::is_same_v<T, std::vector<double>>;

// Writes each field into a JSON object (nlohmann::json or ordered_json).
template <typename JsonT>
class JsonWriter {
 public:
  explicit JsonWriter(JsonT& out) : out_(out) {}

  template <typename T>
  void operator()(const char* key, const T& value, unsigned /*flags*/ = kRequired) {
    if constexpr (std::is_same_v<T, double>) {
      json::put_number(out_, key, value);
    } else if constexpr (kIsList<T>) {
      if (!value.empty()) out_[key] = json::number_list(value);
    } else if constexpr (std::is_enum_v<T>) {
      out_[key] = to_string(value);
    } else {
      out_[key] = value;
    }
  }
  void derived(const char* key, double value) { (*this)(key, value); }

 private:
  JsonT& out_;
};

// Reads each field from a JSON object. Every problem is a txl::Error that starts with `origin`,
// names the field and ends with `remedy`, e.g. `cache.json: result record lacks "attn_type";
// delete the file to recompute it` (noun "result").
template <typename JsonT>
class JsonReader {
 public:
  JsonReader(const JsonT& in, std::string origin, std::string noun, std::string remedy)
      : in_(in), origin_(std::move(origin)), noun_(std::move(noun)), remedy_(std::move(remedy)) {
    TXL_CHECK(in_.is_object(), origin_, ": expected a JSON object per ", noun_, " record");
  }

  template <typename T>
  void operator()(const char* key, T& value, unsigned flags = kRequired) {
    const auto it = in_.find(key);
    if (it == in_.end()) {
      TXL_CHECK((flags & kOptional) != 0 || kIsList<T>, origin_, ": ", noun_, " record lacks \"",
                key, "\" (written by another txl version?); ", remedy_);
      return;
    }
    if constexpr (kIsList<T>) {
      value = read_list(key, *it);
    } else if constexpr (std::is_enum_v<T>) {
      const std::string name = get<std::string>(key, *it);
      TXL_CHECK(parse_name(name, &value), origin_, ": ", noun_, " field \"", key, "\" is '", name,
                "', not one of ", choices_of(value), "; ", remedy_);
    } else if constexpr (std::is_same_v<T, double>) {
      value = it->is_null() ? json::get_number(in_, key, std::nan("")) : get<double>(key, *it);
    } else {
      value = get<T>(key, *it);
    }
  }
  void derived(const char* /*key*/, double /*value*/) {}

 private:
  template <typename T, typename Item>
  T get(const char* key, const Item& item) const {
    try {
      return item.template get<T>();
    } catch (const nlohmann::json::exception& e) {
      TXL_FAIL(origin_, ": ", noun_, " field \"", key, "\" has the wrong type (", e.what(), "); ",
               remedy_);
    }
  }

  // A list of numbers, null = NaN (nothing scored there).
  template <typename Item>
  std::vector<double> read_list(const char* key, const Item& list) const {
    TXL_CHECK(list.is_array(), origin_, ": ", noun_, " field \"", key, "\" must be an array; ",
              remedy_);
    std::vector<double> out;
    for (const auto& v : list) {
      TXL_CHECK(v.is_null() || v.is_number(), origin_, ": \"", key, "\" holds a non-number; ",
                remedy_);
      out.push_back(v.is_null() ? std::nan("") : v.template get<double>());
    }
    return out;
  }

  const JsonT& in_;
  std::string origin_, noun_, remedy_;
};

// RFC 4180 quoting: only when the field holds a comma, quote or line break.
inline std::string csv_text(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

// Shortest round-tripping text of a double (17 significant digits at most); nan, inf, -inf.
inline std::string csv_number(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  return fmt::format("{}", x);
}

// The CSV header line's names (lists have no column), comma-separated, no line break.
class CsvHeader {
 public:
  explicit CsvHeader(std::string& out) : out_(out) {}
  template <typename T>
  void operator()(const char* key, const T& /*value*/, unsigned /*flags*/ = kRequired) {
    if constexpr (!kIsList<T>) out_ += (out_.empty() ? "" : ",") + std::string(key);
  }
  void derived(const char* key, double value) { (*this)(key, value); }

 private:
  std::string& out_;
};

// One CSV line's cells in the header's order (booleans as 1 / 0), no line break.
class CsvRow {
 public:
  explicit CsvRow(std::string& out) : out_(out) {}
  template <typename T>
  void operator()(const char* /*key*/, const T& value, unsigned /*flags*/ = kRequired) {
    if constexpr (!kIsList<T>) {
      if (!first_) out_ += ',';
      first_ = false;
      if constexpr (std::is_same_v<T, double>) {
        out_ += csv_number(value);
      } else if constexpr (std::is_same_v<T, std::string>) {
        out_ += csv_text(value);
      } else if constexpr (std::is_enum_v<T>) {
        out_ += csv_text(to_string(value));
      } else if constexpr (std::is_same_v<T, bool>) {
        out_ += value ? "1" : "0";
      } else {
        out_ += std::to_string(value);
      }
    }
  }
  void derived(const char* key, double value) { (*this)(key, value); }

 private:
  std::string& out_;
  bool first_ = true;
};

}  // namespace txl::record
