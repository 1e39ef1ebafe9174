// Scalar parsing for the loader (scalars.h): booleans, finite decimal numbers, whole numbers, and
// the strings the dump must quote.

#include "scalars.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <set>
#include <string>

namespace txl::config::detail {

namespace {

std::string lower(std::string text) {
  for (char& ch : text) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return text;
}

}  // namespace

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

bool whole_number(const std::string& text) {
  const std::size_t sign = !text.empty() && (text[0] == '-' || text[0] == '+') ? 1 : 0;
  if (text.size() > sign && text.find_first_not_of("0123456789", sign) == std::string::npos) {
    return true;
  }
  double d = 0;
  const Number number = read_double(text, &d);
  return number == Number::kTooLarge || (number == Number::kOk && std::floor(d) == d);
}

bool needs_quotes(const std::string& text) {
  if (text.empty()) return true;
  static const std::set<std::string> kSpecial = {"~",  "null", "y",   "n",    "yes",
                                                 "no", "on",   "off", "true", "false"};
  if (kSpecial.count(lower(text))) return true;
  const char first = text[0];
  return std::isdigit(static_cast<unsigned char>(first)) || first == '+' || first == '-' ||
         first == '.' || text.find_first_of(" #:'\"") != std::string::npos;
}

}  // namespace txl::config::detail
