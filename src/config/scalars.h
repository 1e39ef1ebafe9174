#pragma once
// Scalar parsing for the loader: booleans, finite decimal numbers and integers as YAML text
// writes them, what an integer field expected when one does not fit, and which strings the dump
// must quote. Private to src/config.

#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <type_traits>

namespace txl::config::detail {

bool parse_bool(const std::string& text, bool* out);

enum class Number { kOk, kTooSmall, kTooLarge, kNotANumber };

// Finite decimal numbers only: no setting means anything with .inf or .nan, and a NaN would slip
// through range checks unnoticed. A number beyond a double (1e400) is kTooLarge; one too small
// for it (1e-400) is kTooSmall and reads as the nearest double (0 or a denormal).
Number read_double(const std::string& text, double* out);

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
bool whole_number(const std::string& text);

// What an integer field expected, given the text it got: the range when the text is a whole
// number that does not fit (e.g. 3000000000 for a 32-bit field), else just the kind.
template <typename T>
std::string expected_integer(const YAML::Node& value) {
  const bool whole = value.IsScalar() && value.Tag() != "!" && whole_number(value.Scalar());
  const bool negative = whole && value.Scalar()[0] == '-';
  if (std::is_unsigned_v<T> && (!whole || negative)) return "expected a non-negative integer";
  if (!whole) return "expected an integer";
  return "expected an integer between " + std::to_string(std::numeric_limits<T>::min()) + " and " +
         std::to_string(std::numeric_limits<T>::max());
}

// A text the dump must quote: some YAML reader (1.1 or 1.2, yaml-cpp or PyYAML) could otherwise
// take it for a null, a boolean or a number. Any text opening like a number is quoted.
bool needs_quotes(const std::string& text);

}  // namespace txl::config::detail
