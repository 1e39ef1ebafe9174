#include "txl/util/text.h"

#include <cstdint>

namespace txl::util {

std::optional<std::size_t> find_invalid_utf8(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  for (std::size_t i = 0, n = text.size(); i < n;) {
    const unsigned c = s[i];
    const std::size_t len = c < 0x80                 ? 1
                            : c >= 0xC2 && c <= 0xDF ? 2
                            : c >= 0xE0 && c <= 0xEF ? 3
                            : c >= 0xF0 && c <= 0xF4 ? 4
                                                     : 0;
    if (len == 0 || i + len > n) return i;
    for (std::size_t k = 1; k < len; ++k)
      if ((s[i + k] & 0xC0) != 0x80) return i;
    // The second byte's range excludes overlong forms (E0, F0), surrogates (ED) and code points
    // past U+10FFFF (F4); C0, C1 and F5..FF never start a well-formed sequence.
    const unsigned next = len > 1 ? s[i + 1] : 0x80;
    if ((c == 0xE0 && next < 0xA0) || (c == 0xED && next > 0x9F) || (c == 0xF0 && next < 0x90) ||
        (c == 0xF4 && next > 0x8F))
      return i;
    i += len;
  }
  return std::nullopt;
}

std::string replace_invalid_utf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  while (!bytes.empty()) {
    const std::size_t bad = find_invalid_utf8(bytes).value_or(bytes.size());
    out.append(bytes.substr(0, bad));
    if (bad == bytes.size()) break;
    out += "\xEF\xBF\xBD";  // U+FFFD
    bytes.remove_prefix(bad + 1);
  }
  return out;
}

std::string base64(std::string_view bytes) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (std::size_t i = 0; i < bytes.size(); i += 3) {
    const std::size_t n = bytes.size() - i < 3 ? bytes.size() - i : 3;
    std::uint32_t group = 0;
    for (std::size_t k = 0; k < 3; ++k)
      group = (group << 8) | (k < n ? static_cast<unsigned char>(bytes[i + k]) : 0u);
    for (std::size_t k = 0; k < 4; ++k)
      out += k <= n ? kAlphabet[(group >> (18 - 6 * k)) & 0x3F] : '=';
  }
  return out;
}

}  // namespace txl::util
