#pragma once
// Bytes as text: whether they are well-formed UTF-8, and base64 for bytes that are not, so that
// any byte string has a place in JSON (which holds Unicode text only).

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace txl::util {

// The offset of the first byte that is not well-formed UTF-8 (RFC 3629: no overlong forms,
// surrogates or code points past U+10FFFF), or nullopt when all of `text` is.
std::optional<std::size_t> find_invalid_utf8(std::string_view text);

// `bytes` with each byte that is not part of a well-formed UTF-8 sequence replaced by U+FFFD
// (the replacement character), so that the result is valid UTF-8; well-formed text is unchanged.
std::string replace_invalid_utf8(std::string_view bytes);

// `bytes` in base64 (RFC 4648, the standard alphabet, padded with '='): Python reads it back
// with base64.b64decode.
std::string base64(std::string_view bytes);

}  // namespace txl::util
