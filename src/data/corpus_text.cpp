// The corpus helpers every reader shares (corpus.h): lines, characters, words, verse references,
// the byte-corpus split, and a reader's splits joined in memory.
#include <cctype>
#include <limits>
#include <utility>

#include "txl/data/corpus.h"
#include "txl/util/error.h"

namespace txl::data {

int split_index(std::string_view split) {
  if (split == "train") return 0;
  if (split == "valid") return 1;
  if (split == "test") return 2;
  TXL_FAIL("unknown split '", split, "': expected train, valid or test");
}

const CorpusSplit& CorpusText::split(std::string_view split_name) const {
  const CorpusSplit* parts[] = {&train, &valid, &test};
  return *parts[split_index(split_name)];
}

CorpusSplit& CorpusText::split(std::string_view split_name) {
  return const_cast<CorpusSplit&>(std::as_const(*this).split(split_name));
}

CorpusText CorpusReader::read() const {
  CorpusText corpus;
  corpus.name = name();
  const std::pair<const char*, CorpusSplit*> parts[] = {
      {"train", &corpus.train}, {"valid", &corpus.valid}, {"test", &corpus.test}};
  for (const auto& [name, target] : parts) {
    CorpusSplit& split = *target;
    read_split(name, std::numeric_limits<std::int64_t>::max(), [&](CorpusSplit&& chunk) {
      const auto offset = static_cast<std::int64_t>(split.lines.size());
      for (std::int64_t start : chunk.doc_starts) split.doc_starts.push_back(offset + start);
      for (auto& line : chunk.lines) split.lines.push_back(std::move(line));
      split.n_bytes += chunk.n_bytes;
      split.n_chars += chunk.n_chars;
      split.line_end_is_word = chunk.line_end_is_word;
    });
  }
  return corpus;
}

// ---------------------------------------------------------------------------- helpers

std::vector<std::string> split_lines(std::string_view text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    lines.emplace_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

std::int64_t count_utf8_chars(std::string_view text) {
  std::int64_t n = 0;
  for (unsigned char c : text) n += (c & 0xC0) != 0x80;
  return n;
}

std::int64_t count_words(std::string_view text) {
  std::int64_t n = 0;
  bool in_word = false;
  for (unsigned char c : text) {
    const bool space = c == ' ' || (c >= '\t' && c <= '\r');
    n += !space && !in_word;
    in_word = !space;
  }
  return n;
}

std::optional<VerseLine> parse_verse_line(std::string_view line) {
  // Book: an optional leading digit ("1Sm"), then letters; then chapter ':' verse ' '.
  size_t i = 0;
  if (i < line.size() && line[i] >= '1' && line[i] <= '3') ++i;
  size_t letters = i;
  while (i < line.size() && std::isalpha(static_cast<unsigned char>(line[i]))) ++i;
  if (i == letters) return std::nullopt;
  VerseLine v;
  v.book = line.substr(0, i);
  auto read_number = [&](int* out) {
    size_t begin = i;
    int value = 0;
    while (i < line.size() && std::isdigit(static_cast<unsigned char>(line[i])) && i - begin < 4) {
      value = value * 10 + (line[i] - '0');
      ++i;
    }
    *out = value;
    return i > begin;
  };
  if (!read_number(&v.chapter) || i >= line.size() || line[i] != ':') return std::nullopt;
  ++i;
  if (!read_number(&v.verse) || i >= line.size() || line[i] != ' ') return std::nullopt;
  if (v.chapter < 1 || v.verse < 1) return std::nullopt;
  v.text = line.substr(i + 1);
  return v;
}

ByteSplit byte_corpus_split(std::int64_t size) {
  constexpr std::int64_t kStandard = 100000000, kHeldOut = 5000000;
  if (size >= kStandard) return {size - 2 * kHeldOut, size - kHeldOut, size, true};
  std::int64_t train_end = size * 90 / 100;
  std::int64_t valid_end = train_end + size * 5 / 100;
  return {train_end, valid_end, size, false};
}

}  // namespace txl::data
