// The per-token groups of the memory-gain analysis (memory_gain.h): distance to the previous
// occurrence in the document, train-frequency class, and the case of the token's word.
#include <algorithm>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "txl/eval/memory_gain.h"
#include "txl/util/error.h"

namespace txl::eval {

namespace {

// Integer ids (a cache's int16 or int32, or int64) as a checked int64 [N] CPU tensor.
torch::Tensor checked_ids(const torch::Tensor& ids) {
  TXL_CHECK(ids.defined() && ids.dim() == 1 &&
                at::isIntegralType(ids.scalar_type(), /*includeBool=*/false),
            "where memory helps: token ids must be integers [N], got ",
            ids.defined() ? ids.sizes() : torch::IntArrayRef{});
  return ids.to(torch::kCPU, torch::kInt64).contiguous();  // [N]
}

// The document starts as offsets (first 0, strictly increasing, below n); {0} when undefined.
std::vector<std::int64_t> document_starts(const torch::Tensor& doc_starts, std::int64_t n) {
  if (!doc_starts.defined()) return {0};
  TXL_CHECK(
      doc_starts.dim() == 1 && doc_starts.scalar_type() == torch::kInt64 && doc_starts.numel() >= 1,
      "where memory helps: document starts must be int64 [D], D >= 1");
  const auto s = doc_starts.to(torch::kCPU).contiguous();  // [D]
  std::vector<std::int64_t> out(s.data_ptr<std::int64_t>(), s.data_ptr<std::int64_t>() + s.numel());
  TXL_CHECK(out[0] == 0, "where memory helps: the first document must start at 0, not ", out[0]);
  for (size_t d = 1; d < out.size(); ++d)
    TXL_CHECK(out[d] > out[d - 1] && out[d] < n, "where memory helps: document start ", d, " = ",
              out[d], " must follow ", out[d - 1], " and lie below N = ", n);
  return out;
}

// A document start flag for each of n offsets.
std::vector<bool> start_flags(const std::vector<std::int64_t>& starts, std::int64_t n) {
  std::vector<bool> flags(static_cast<size_t>(n), false);
  for (std::int64_t s : starts) flags[static_cast<size_t>(s)] = true;
  return flags;
}

// The case of a code point's letter: 1 upper, -1 lower, 0 not a cased letter (ASCII, Latin-1,
// Greek and Cyrillic are read; other scripts count as uncased).
int letter_case(std::uint32_t cp) {
  if (cp >= 'A' && cp <= 'Z') return 1;
  if (cp >= 'a' && cp <= 'z') return -1;
  if (cp >= 0xC0 && cp <= 0xDE && cp != 0xD7) return 1;
  if (cp >= 0xDF && cp <= 0xFF && cp != 0xF7) return -1;
  if ((cp >= 0x391 && cp <= 0x3A9) || (cp >= 0x400 && cp <= 0x42F)) return 1;
  if ((cp >= 0x3B1 && cp <= 0x3C9) || (cp >= 0x430 && cp <= 0x45F)) return -1;
  return 0;
}

// The case of the first cased letter of UTF-8 `text` (a malformed byte is read as uncased).
int first_case(const std::string& text) {
  for (size_t i = 0; i < text.size();) {
    const auto lead = static_cast<unsigned char>(text[i]);
    const size_t len = lead < 0x80 ? 1 : (lead >> 5) == 6 ? 2 : (lead >> 4) == 14 ? 3 : 4;
    if (lead >= 0x80 && ((lead >> 6) == 2 || i + len > text.size())) {
      ++i;  // a stray continuation byte or a truncated sequence
      continue;
    }
    std::uint32_t cp = len == 1 ? lead : lead & (0x7F >> len);
    for (size_t k = 1; k < len; ++k)
      cp = (cp << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3F);
    if (const int c = letter_case(cp)) return c;
    i += len;
  }
  return 0;
}

const std::string kWordMark = "\xE2\x96\x81";  // U+2581, sentencepiece's start of a word

}  // namespace

torch::Tensor previous_occurrence(const torch::Tensor& ids_in, const torch::Tensor& doc_starts) {
  const auto ids = checked_ids(ids_in);
  const std::int64_t n = ids.size(0);
  const auto starts = start_flags(document_starts(doc_starts, n), n);
  const auto* id = ids.data_ptr<std::int64_t>();
  auto out = torch::empty({n}, torch::kInt64);  // [N]
  auto* prev = out.data_ptr<std::int64_t>();
  std::unordered_map<std::int64_t, std::int64_t> last;
  for (std::int64_t u = 0; u < n; ++u) {
    if (starts[static_cast<size_t>(u)]) last.clear();
    auto [it, fresh] = last.try_emplace(id[u], u);
    prev[u] = fresh ? -1 : it->second;
    it->second = u;
  }
  return out;
}

const char* distance_group_name(std::int64_t group) {
  static const char* const kNames[kDistanceGroups] = {"in segment", "in memory", "beyond memory",
                                                      "first in document"};
  TXL_CHECK(group >= 0 && group < kDistanceGroups, "no distance group ", group);
  return kNames[group];
}

torch::Tensor distance_groups(const torch::Tensor& ids, const torch::Tensor& doc_starts,
                              const SegmentReach& reach) {
  const auto prev = previous_occurrence(ids, doc_starts);  // [N]
  const std::int64_t n = prev.size(0), t = reach.target.numel();
  TXL_CHECK(reach.segment_begin.numel() == t && reach.visible_begin.numel() == t,
            "where memory helps: a reach of ", t, " targets with ", reach.segment_begin.numel(),
            " segment and ", reach.visible_begin.numel(), " visible starts");
  const auto target = reach.target.to(torch::kCPU, torch::kInt64).contiguous();      // [T]
  const auto seg = reach.segment_begin.to(torch::kCPU, torch::kInt64).contiguous();  // [T]
  const auto vis = reach.visible_begin.to(torch::kCPU, torch::kInt64).contiguous();  // [T]
  const auto* u = target.data_ptr<std::int64_t>();
  const auto* p = prev.data_ptr<std::int64_t>();
  auto out = torch::empty({t}, torch::kInt64);  // [T]
  auto* g = out.data_ptr<std::int64_t>();
  for (std::int64_t k = 0; k < t; ++k) {
    TXL_CHECK(u[k] >= 1 && u[k] < n, "where memory helps: target offset ", u[k],
              " outside a split of ", n, " tokens (are the reach and the ids of one split?)");
    const std::int64_t at = p[u[k]];
    if (at < 0) {
      g[k] = kFirstInDocument;
    } else if (at < vis.data_ptr<std::int64_t>()[k]) {
      g[k] = kBeyondMemory;
    } else {
      g[k] = at >= seg.data_ptr<std::int64_t>()[k] ? kInSegment : kInMemory;
    }
  }
  return out;
}

torch::Tensor frequency_ranks(const torch::Tensor& train_counts) {
  TXL_CHECK(train_counts.defined() && train_counts.dim() == 1 &&
                train_counts.scalar_type() == torch::kInt64 && train_counts.numel() >= 1,
            "where memory helps: train counts must be int64 [V], V >= 1");
  const auto counts = train_counts.to(torch::kCPU).contiguous();  // [V]
  const std::int64_t v = counts.numel();
  const auto* c = counts.data_ptr<std::int64_t>();
  std::vector<std::int64_t> sorted(c, c + v);
  TXL_CHECK(*std::min_element(sorted.begin(), sorted.end()) >= 0,
            "where memory helps: a negative train count");
  std::sort(sorted.begin(), sorted.end(), std::greater<>());
  auto out = torch::empty({v}, torch::kInt64);  // [V]
  auto* rank = out.data_ptr<std::int64_t>();
  for (std::int64_t i = 0; i < v; ++i)  // ids with a strictly larger count
    rank[i] =
        std::lower_bound(sorted.begin(), sorted.end(), c[i], std::greater<>()) - sorted.begin();
  return out;
}

torch::Tensor frequency_groups(const torch::Tensor& targets, const torch::Tensor& ranks,
                               const std::vector<std::int64_t>& edges) {
  TXL_CHECK(!edges.empty() && edges.front() > 0,
            "where memory helps: frequency rank edges must "
            "be given and above 0, e.g. {100, 1000}");
  for (size_t k = 1; k < edges.size(); ++k)
    TXL_CHECK(edges[k] > edges[k - 1], "where memory helps: frequency rank edges must increase, ",
              edges[k - 1], " is followed by ", edges[k]);
  const auto ids = checked_ids(targets);
  const auto r = ranks.to(torch::kCPU, torch::kInt64).contiguous();  // [V]
  const auto* id = ids.data_ptr<std::int64_t>();
  auto out = torch::empty({ids.size(0)}, torch::kInt64);  // [T]
  auto* g = out.data_ptr<std::int64_t>();
  for (std::int64_t k = 0; k < ids.size(0); ++k) {
    TXL_CHECK(id[k] >= 0 && id[k] < r.numel(), "where memory helps: token id ", id[k],
              " outside the ", r.numel(), " ids the train counts cover");
    const std::int64_t rank = r.data_ptr<std::int64_t>()[id[k]];
    g[k] = std::upper_bound(edges.begin(), edges.end(), rank) - edges.begin();
  }
  return out;
}

WordFlags word_flags_of_pieces(const std::vector<std::string>& pieces,
                               const std::vector<std::int64_t>& separators) {
  WordFlags f;
  const size_t v = pieces.size();
  f.separator.assign(v, 0);
  f.starts_word.assign(v, 0);
  f.first_case.assign(v, 0);
  for (size_t i = 0; i < v; ++i) {
    f.starts_word[i] = pieces[i].rfind(kWordMark, 0) == 0 ? 1 : 0;
    f.first_case[i] = static_cast<std::int8_t>(first_case(pieces[i]));
  }
  for (std::int64_t s : separators) {
    TXL_CHECK(s >= 0 && s < static_cast<std::int64_t>(v), "where memory helps: separator id ", s,
              " outside ", v, " pieces");
    f.separator[s] = 1;
    f.starts_word[s] = 0;
    f.first_case[s] = 0;
  }
  return f;
}

WordFlags word_flags(const data::Tokenizer& tokenizer) {
  const std::int64_t v = tokenizer.vocab_size();
  const std::vector<std::int64_t> specials = {tokenizer.pad_id(), tokenizer.eos_id()};
  if (tokenizer.kind() == "byte") {
    std::vector<std::string> bytes;
    for (std::int64_t i = 0; i < v; ++i)
      bytes.emplace_back(1, i < 128 ? static_cast<char>(i) : ' ');
    WordFlags f = word_flags_of_pieces(bytes, specials);
    for (std::int64_t i = 0; i < v; ++i) {
      const bool space = (i >= 9 && i <= 13) || i == 32;
      if (space) f.separator[i] = 1;
      if (i >= 128) f.first_case[i] = 0;  // part of a multi-byte character: case not read
    }
    return f;
  }
  std::vector<std::string> pieces;
  for (std::int64_t i = 0; i < v; ++i) pieces.push_back(tokenizer.piece(i));
  WordFlags f = word_flags_of_pieces(pieces, specials);
  const std::int64_t unk = tokenizer.unk_id();
  if (unk >= 0 && unk < v) f.first_case[unk] = 0;  // "<unk>": a token of unknown text
  if (tokenizer.kind() == "word") {
    for (std::int64_t i = 0; i < v; ++i) f.starts_word[i] = f.separator[i] ? 0 : 1;
  }
  return f;
}

const char* case_group_name(std::int64_t group) {
  static const char* const kNames[kCaseGroups] = {"capitalised word", "lowercase word",
                                                  "no cased letter"};
  TXL_CHECK(group >= 0 && group < kCaseGroups, "no case group ", group);
  return kNames[group];
}

torch::Tensor case_groups(const torch::Tensor& ids_in, const torch::Tensor& doc_starts,
                          const WordFlags& flags) {
  const auto ids = checked_ids(ids_in);
  const std::int64_t n = ids.size(0);
  const auto v = static_cast<std::int64_t>(flags.separator.size());
  TXL_CHECK(flags.starts_word.size() == flags.separator.size() &&
                flags.first_case.size() == flags.separator.size(),
            "where memory helps: word flags of different sizes");
  const auto starts = start_flags(document_starts(doc_starts, n), n);
  const auto* id = ids.data_ptr<std::int64_t>();
  auto out = torch::full({n}, static_cast<std::int64_t>(kNoCase), torch::kInt64);  // [N]
  auto* g = out.data_ptr<std::int64_t>();
  std::int64_t word = -1;  // the open word's first offset, -1 = none
  int word_case = 0;
  const auto close = [&](std::int64_t end) {
    const std::int64_t group = word_case > 0   ? kCapitalisedWord
                               : word_case < 0 ? kLowercaseWord
                                               : kNoCase;
    for (std::int64_t k = word; word >= 0 && k < end; ++k) g[k] = group;
    word = -1;
    word_case = 0;
  };
  for (std::int64_t u = 0; u < n; ++u) {
    TXL_CHECK(id[u] >= 0 && id[u] < v, "where memory helps: token id ", id[u], " at offset ", u,
              " outside the ", v, " ids of the word flags");
    if (flags.separator[id[u]]) {
      close(u);
      continue;
    }
    if (word < 0 || flags.starts_word[id[u]] || starts[static_cast<size_t>(u)]) {
      close(u);
      word = u;
    }
    if (word_case == 0) word_case = flags.first_case[id[u]];
  }
  close(n);
  return out;
}

}  // namespace txl::eval
