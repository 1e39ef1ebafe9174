// The encoded-split cache file (dataset.h gives the layout): XXH64, writing, and reading back
// with every check that makes a damaged or stale file a rebuild instead of a wrong number.
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "txl/data/dataset.h"
#include "txl/util/error.h"
#include "txl/util/fs.h"

namespace txl::data {

namespace stdfs = std::filesystem;

namespace {

constexpr char kMagic[8] = {'T', 'X', 'L', 'T', 'O', 'K', 'S', '\0'};
constexpr std::uint32_t kDtypeUint16 = 1, kDtypeInt32 = 2;
constexpr std::size_t kChecksumOffset = 56, kWordsOffset = 64, kHeaderSize = 72;

template <typename T>
void put(std::string* out, T value) {
  out->append(reinterpret_cast<const char*>(&value), sizeof value);
}

template <typename T>
T get(const char* data) {
  T value;
  std::memcpy(&value, data, sizeof value);
  return value;
}

}  // namespace

// ------------------------------------------------------------------------------ xxh64

namespace {

constexpr std::uint64_t kP1 = 0x9E3779B185EBCA87ull, kP2 = 0xC2B2AE3D27D4EB4Full,
                        kP3 = 0x165667B19E3779F9ull, kP4 = 0x85EBCA77C2B2AE63ull,
                        kP5 = 0x27D4EB2F165667C5ull;

std::uint64_t rotl(std::uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
std::uint64_t xxh_round(std::uint64_t acc, std::uint64_t lane) {
  return rotl(acc + lane * kP2, 31) * kP1;
}
std::uint64_t xxh_merge(std::uint64_t h, std::uint64_t lane) {
  return (h ^ xxh_round(0, lane)) * kP1 + kP4;
}

}  // namespace

std::uint64_t xxh64(std::string_view data, std::uint64_t seed) {
  const char* p = data.data();
  const char* const end = p + data.size();
  std::uint64_t h;
  if (data.size() >= 32) {
    // Four independent lanes of 8 bytes: the multiplies of one stripe overlap.
    std::uint64_t v1 = seed + kP1 + kP2, v2 = seed + kP2, v3 = seed, v4 = seed - kP1;
    for (; end - p >= 32; p += 32) {
      v1 = xxh_round(v1, get<std::uint64_t>(p));
      v2 = xxh_round(v2, get<std::uint64_t>(p + 8));
      v3 = xxh_round(v3, get<std::uint64_t>(p + 16));
      v4 = xxh_round(v4, get<std::uint64_t>(p + 24));
    }
    h = rotl(v1, 1) + rotl(v2, 7) + rotl(v3, 12) + rotl(v4, 18);
    h = xxh_merge(xxh_merge(xxh_merge(xxh_merge(h, v1), v2), v3), v4);
  } else {
    h = seed + kP5;
  }
  h += static_cast<std::uint64_t>(data.size());
  for (; end - p >= 8; p += 8) h = rotl(h ^ xxh_round(0, get<std::uint64_t>(p)), 27) * kP1 + kP4;
  if (end - p >= 4) {
    h = rotl(h ^ (get<std::uint32_t>(p) * kP1), 23) * kP2 + kP3;
    p += 4;
  }
  for (; p < end; ++p) h = rotl(h ^ (static_cast<unsigned char>(*p) * kP5), 11) * kP1;
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  return h ^ (h >> 32);
}

// ------------------------------------------------------------------------ cache files

std::uint64_t encoded_split_checksum(std::string_view bytes) {
  TXL_CHECK(bytes.size() >= kHeaderSize, "a cache file has at least ", kHeaderSize, " bytes, got ",
            bytes.size());
  return xxh64(bytes.substr(kWordsOffset), xxh64(bytes.substr(0, kChecksumOffset)));
}

void write_encoded_split(const stdfs::path& path, const EncodedSplit& split,
                         std::int64_t vocab_size, std::uint64_t fingerprint) {
  TXL_CHECK(split.ids.dtype() == torch::kLong && split.ids.dim() == 1,
            "encoded ids must be int64 [N]");
  const std::uint32_t dtype = vocab_size <= 65536 ? kDtypeUint16 : kDtypeInt32;
  const size_t elem = dtype == kDtypeUint16 ? 2 : 4;
  auto ids = split.ids.contiguous();                             // [N]
  auto starts = split.doc_starts.to(torch::kLong).contiguous();  // [n_docs]
  const auto n = static_cast<std::uint64_t>(ids.numel());
  const auto n_docs = static_cast<std::uint64_t>(starts.numel());
  std::string out;
  out.reserve(kHeaderSize + n_docs * 8 + n * elem);
  out.append(kMagic, sizeof kMagic);
  put<std::uint32_t>(&out, kCacheVersion);
  put<std::uint32_t>(&out, dtype);
  put<std::uint64_t>(&out, n);
  put<std::uint64_t>(&out, n_docs);
  put<std::int64_t>(&out, split.n_bytes);
  put<std::int64_t>(&out, split.n_chars);
  put<std::uint64_t>(&out, fingerprint);
  put<std::uint64_t>(&out, 0);  // the checksum, filled in below
  put<std::int64_t>(&out, split.n_words);
  out.append(reinterpret_cast<const char*>(starts.data_ptr<std::int64_t>()), n_docs * 8);
  const auto* src = ids.data_ptr<std::int64_t>();
  const size_t body = out.size();
  out.resize(body + n * elem);
  char* dst = out.data() + body;
  for (std::uint64_t i = 0; i < n; ++i) {
    TXL_CHECK(src[i] >= 0 && src[i] < vocab_size, "token id ", src[i], " at ", i,
              " outside the vocabulary [0, ", vocab_size, ")");
    if (dtype == kDtypeUint16) {
      auto v = static_cast<std::uint16_t>(src[i]);
      std::memcpy(dst + i * 2, &v, 2);
    } else {
      auto v = static_cast<std::int32_t>(src[i]);
      std::memcpy(dst + i * 4, &v, 4);
    }
  }
  const std::uint64_t checksum = encoded_split_checksum(out);
  std::memcpy(out.data() + kChecksumOffset, &checksum, sizeof checksum);
  fs::write_atomic(path, out);
}

namespace {

// The fields of a cache file's header, checked against the file size.
struct SplitHeader {
  std::uint32_t dtype = 0;
  std::uint64_t n = 0, n_docs = 0;  // token and document counts
  std::int64_t n_bytes = 0, n_chars = 0, n_words = 0;
  std::uint64_t fingerprint = 0, checksum = 0;
  size_t elem() const { return dtype == kDtypeUint16 ? 2 : 4; }
};

std::nullopt_t missed(CacheMiss* miss, CacheMiss::Kind kind, std::string reason) {
  if (miss) *miss = CacheMiss{kind, std::move(reason)};
  return std::nullopt;
}

std::optional<SplitHeader> parse_split_header(std::string_view bytes, CacheMiss* miss) {
  using Kind = CacheMiss::Kind;
  const std::string size = std::to_string(bytes.size()) + " bytes";
  if (bytes.size() < 12) return missed(miss, Kind::kDamaged, "truncated (" + size + ")");
  if (std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0)
    return missed(miss, Kind::kDamaged, "foreign file (bad magic)");
  const auto version = get<std::uint32_t>(bytes.data() + 8);
  if (version != kCacheVersion)
    return missed(miss, Kind::kOutdated,
                  "format version " + std::to_string(version) + ", expected " +
                      std::to_string(kCacheVersion));
  if (bytes.size() < kHeaderSize)
    return missed(miss, Kind::kDamaged, "truncated (" + size + ", shorter than the header)");
  const char* h = bytes.data();
  SplitHeader header;
  header.dtype = get<std::uint32_t>(h + 12);
  if (header.dtype != kDtypeUint16 && header.dtype != kDtypeInt32)
    return missed(miss, Kind::kDamaged,
                  "foreign file (unknown dtype " + std::to_string(header.dtype) + ")");
  header.n = get<std::uint64_t>(h + 16);
  header.n_docs = get<std::uint64_t>(h + 24);
  header.n_bytes = get<std::int64_t>(h + 32);
  header.n_chars = get<std::int64_t>(h + 40);
  header.fingerprint = get<std::uint64_t>(h + 48);
  header.checksum = get<std::uint64_t>(h + kChecksumOffset);
  header.n_words = get<std::int64_t>(h + kWordsOffset);
  // Guard the multiplication against a garbage header before trusting the sizes.
  constexpr std::uint64_t kMaxCount = std::uint64_t{1} << 40;
  if (header.n > kMaxCount || header.n_docs > kMaxCount ||
      bytes.size() != kHeaderSize + header.n_docs * 8 + header.n * header.elem())
    return missed(
        miss, Kind::kDamaged,
        "truncated or damaged (" + size + ", the header says " +
            (header.n > kMaxCount || header.n_docs > kMaxCount
                 ? std::string("more than 2^40 entries")
                 : std::to_string(kHeaderSize + header.n_docs * 8 + header.n * header.elem())) +
            ")");
  return header;
}

// Copies n little-endian ids of type T from `src` into `dst`; returns the index of the first id
// outside [0, vocab_size), or -1. The common case is one branch-free pass.
template <typename T>
std::int64_t widen_ids(const char* src, std::int64_t n, std::int64_t vocab_size,
                       std::int64_t* dst) {
  std::int64_t lo = 0, hi = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, src + i * static_cast<std::int64_t>(sizeof v), sizeof v);
    dst[i] = v;
    lo = std::min<std::int64_t>(lo, v);
    hi = std::max<std::int64_t>(hi, v);
  }
  if (n == 0 || (lo >= 0 && hi < vocab_size)) return -1;
  for (std::int64_t i = 0; i < n; ++i)
    if (dst[i] < 0 || dst[i] >= vocab_size) return i;
  return -1;
}

}  // namespace

std::optional<EncodedSplit> parse_encoded_split(std::string_view bytes,
                                                std::uint64_t expected_fingerprint,
                                                std::int64_t vocab_size, CacheMiss* miss) {
  using Kind = CacheMiss::Kind;
  auto header = parse_split_header(bytes, miss);
  if (!header) return std::nullopt;
  // The checksum first: a damaged fingerprint or count is damage, not staleness.
  const std::uint64_t checksum = encoded_split_checksum(bytes);
  if (checksum != header->checksum)
    return missed(miss, Kind::kDamaged,
                  "checksum mismatch (header " + fs::hex64(header->checksum) + ", content " +
                      fs::hex64(checksum) + ")");
  if (header->fingerprint != expected_fingerprint)
    return missed(miss, Kind::kStale, "stale (corpus, tokenizer or options changed)");
  if (header->n_bytes < 0 || header->n_chars < 0 || header->n_words < 0)
    return missed(miss, Kind::kDamaged, "damaged (negative text size in the header)");

  const auto n = static_cast<std::int64_t>(header->n);
  const auto n_docs = static_cast<std::int64_t>(header->n_docs);
  EncodedSplit split;
  split.n_bytes = header->n_bytes;
  split.n_chars = header->n_chars;
  split.n_words = header->n_words;
  split.doc_starts = torch::empty({n_docs}, torch::kLong);  // [n_docs]
  auto* starts = split.doc_starts.data_ptr<std::int64_t>();
  if (n_docs > 0) std::memcpy(starts, bytes.data() + kHeaderSize, static_cast<size_t>(n_docs) * 8);
  // Document starts: 0 first, strictly increasing, inside the ids.
  bool starts_ok = n_docs > 0 && starts[0] == 0;
  for (std::int64_t d = 1; starts_ok && d < n_docs; ++d)
    starts_ok = starts[d] > starts[d - 1] && starts[d] < n;
  if (!starts_ok)
    return missed(miss, Kind::kDamaged, "damaged (document starts out of order or range)");

  split.ids = torch::empty({n}, torch::kLong);  // [N]
  const char* src = bytes.data() + kHeaderSize + n_docs * 8;
  auto* dst = split.ids.data_ptr<std::int64_t>();
  const std::int64_t bad = header->dtype == kDtypeUint16
                               ? widen_ids<std::uint16_t>(src, n, vocab_size, dst)
                               : widen_ids<std::int32_t>(src, n, vocab_size, dst);
  if (bad >= 0)
    return missed(miss, Kind::kDamaged,
                  "token id " + std::to_string(dst[bad]) + " at " + std::to_string(bad) +
                      " outside the tokenizer's vocabulary [0, " + std::to_string(vocab_size) +
                      ")");
  return split;
}

std::optional<EncodedSplit> read_encoded_split(const stdfs::path& path,
                                               std::uint64_t expected_fingerprint,
                                               std::int64_t vocab_size, CacheMiss* miss) {
  std::error_code ec;
  if (!stdfs::is_regular_file(path, ec))
    return missed(miss, CacheMiss::Kind::kMissing, "not cached yet");
  std::string error;
  fs::MappedFile file(path, &error);
  if (!error.empty()) return missed(miss, CacheMiss::Kind::kDamaged, "cannot read: " + error);
  return parse_encoded_split(file.bytes(), expected_fingerprint, vocab_size, miss);
}

}  // namespace txl::data
