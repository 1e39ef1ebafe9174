#pragma once
// A tokenizer folder's small "key=value" files, shared by the tokenizers (tokenizer.cpp:
// tokenizer.meta, what Tokenizer::save writes) and the cache of trained tokenizers
// (tokenizer_cache.cpp: tokenizer.source, what a cached tokenizer was trained from). Private to
// src/data.

#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace txl::data::detail {

inline constexpr const char* kMetaFile = "tokenizer.meta";      // kind + fingerprint (save)
inline constexpr const char* kSourceFile = "tokenizer.source";  // options + training text

using Meta = std::unordered_map<std::string, std::string>;

// "key=value" lines, in the order given, and back (a line without '=' is skipped).
std::string format_meta(const std::vector<std::pair<std::string, std::string>>& entries);
Meta parse_meta(const std::string& text);

// 16 hex digits.
std::string hex_of(std::uint64_t v);

}  // namespace txl::data::detail
