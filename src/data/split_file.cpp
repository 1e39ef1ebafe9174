// The encoded-split cache file (dataset.h gives the layout): XXH64, writing chunk after chunk,
// and reading back with every check that makes a damaged or stale file a rebuild instead of a
// wrong number, streamed in blocks and then mapped in place.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "document_starts.h"
#include "txl/data/dataset.h"
#include "txl/util/error.h"
#include "txl/util/fs.h"

namespace txl::data {

namespace stdfs = std::filesystem;

namespace {

constexpr char kMagic[8] = {'T', 'X', 'L', 'T', 'O', 'K', 'S', '\0'};
constexpr std::uint32_t kDtypeInt16 = 1, kDtypeInt32 = 2;
constexpr std::uint64_t kChecksumOffset = 56, kHeaderSize = 72;
constexpr std::uint64_t kBlock = std::uint64_t{8} << 20;  // bytes read or written at a time

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

std::uint64_t elem_size(std::uint32_t dtype) { return dtype == kDtypeInt16 ? 2 : 4; }

// Where the document starts begin: after the ids, at a multiple of 8.
std::uint64_t starts_offset(std::uint64_t n, std::uint32_t dtype) {
  return (kHeaderSize + n * elem_size(dtype) + 7) / 8 * 8;
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

Xxh64::Xxh64(std::uint64_t seed)
    : seed_(seed), lanes_{seed + kP1 + kP2, seed + kP2, seed, seed - kP1} {}

void Xxh64::update(std::string_view data) {
  const char* p = data.data();
  const char* const end = p + data.size();
  total_ += data.size();
  // Four independent lanes of 8 bytes: the multiplies of one stripe overlap.
  auto stripe = [this](const char* s) {
    for (int lane = 0; lane < 4; ++lane)
      lanes_[lane] = xxh_round(lanes_[lane], get<std::uint64_t>(s + 8 * lane));
  };
  if (buffered_ > 0) {
    const std::size_t take = std::min<std::size_t>(32 - buffered_, data.size());
    std::memcpy(buffer_ + buffered_, p, take);
    buffered_ += take;
    p += take;
    if (buffered_ < 32) return;
    stripe(buffer_);
    buffered_ = 0;
  }
  for (; end - p >= 32; p += 32) stripe(p);
  buffered_ = static_cast<std::size_t>(end - p);
  std::memcpy(buffer_, p, buffered_);
}

std::uint64_t Xxh64::digest() const {
  std::uint64_t h;
  if (total_ >= 32) {
    const std::uint64_t* v = lanes_;
    h = rotl(v[0], 1) + rotl(v[1], 7) + rotl(v[2], 12) + rotl(v[3], 18);
    for (int lane = 0; lane < 4; ++lane) h = xxh_merge(h, v[lane]);
  } else {
    h = seed_ + kP5;
  }
  h += total_;
  const char* p = buffer_;
  const char* const end = buffer_ + buffered_;
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

std::uint64_t xxh64(std::string_view data, std::uint64_t seed) {
  Xxh64 hash(seed);
  hash.update(data);
  return hash.digest();
}

// ------------------------------------------------------------------------ cache files

namespace {

// The header's 72 bytes; the checksum field as given.
std::string header_bytes(std::uint32_t dtype, std::uint64_t n, std::uint64_t n_docs,
                         std::int64_t n_bytes, std::int64_t n_chars, std::uint64_t fingerprint,
                         std::uint64_t checksum, std::int64_t n_words) {
  std::string out;
  out.append(kMagic, sizeof kMagic);
  put<std::uint32_t>(&out, kCacheVersion);
  put<std::uint32_t>(&out, dtype);
  put<std::uint64_t>(&out, n);
  put<std::uint64_t>(&out, n_docs);
  put<std::int64_t>(&out, n_bytes);
  put<std::int64_t>(&out, n_chars);
  put<std::uint64_t>(&out, fingerprint);
  put<std::uint64_t>(&out, checksum);
  put<std::int64_t>(&out, n_words);
  return out;
}

// The checksum of a header (its first 72 bytes) and the XXH64 of everything after it.
std::uint64_t sealed_checksum(std::string_view header, std::uint64_t body_hash) {
  Xxh64 hash;
  hash.update(header.substr(0, kChecksumOffset));
  hash.update(header.substr(kChecksumOffset + 8, kHeaderSize - kChecksumOffset - 8));
  hash.update(std::string_view(reinterpret_cast<const char*>(&body_hash), sizeof body_hash));
  return hash.digest();
}

}  // namespace

std::uint64_t encoded_split_checksum(std::string_view bytes) {
  TXL_CHECK(bytes.size() >= kHeaderSize, "a cache file has at least ", kHeaderSize, " bytes, got ",
            bytes.size());
  return sealed_checksum(bytes, xxh64(bytes.substr(kHeaderSize)));
}

EncodedSplitWriter::EncodedSplitWriter(const stdfs::path& path, std::int64_t vocab_size,
                                       std::uint64_t fingerprint)
    : file_(std::make_unique<fs::AtomicWriter>(path)),
      starts_kept_(std::make_unique<DocumentStarts>()),
      vocab_size_(vocab_size),
      fingerprint_(fingerprint),
      dtype_(vocab_size <= 32768 ? kDtypeInt16 : kDtypeInt32) {
  file_->write(std::string(kHeaderSize, '\0'));  // the header, filled in by commit()
  starts_ = std::tmpfile();  // opened last: nothing is left open when the constructor throws
  TXL_CHECK(starts_ != nullptr, "cannot write ", path.string(),
            ": no temporary file for its document starts: ", std::strerror(errno));
}

EncodedSplitWriter::~EncodedSplitWriter() {
  if (starts_ != nullptr) std::fclose(starts_);
}

void EncodedSplitWriter::add_start(std::int64_t start) {
  TXL_CHECK(std::fwrite(&start, sizeof start, 1, starts_) == 1,
            "cannot write a temporary file of document starts: ", std::strerror(errno));
  ++n_docs_;
}

void EncodedSplitWriter::append(const EncodedSplit& chunk) {
  TXL_CHECK(chunk.ids.dim() == 1 && !chunk.ids.is_floating_point(),
            "encoded ids must be an integer tensor [N]");
  const auto ids = chunk.ids.to(torch::kCPU, torch::kLong).contiguous();  // [n]
  const auto* src = ids.data_ptr<std::int64_t>();
  const std::int64_t n = ids.numel();
  std::string out(static_cast<size_t>(n) * elem_size(dtype_), '\0');
  for (std::int64_t i = 0; i < n; ++i) {
    TXL_CHECK(src[i] >= 0 && src[i] < vocab_size_, "token id ", src[i], " at ", n_ + i,
              " outside the vocabulary [0, ", vocab_size_, ")");
    if (dtype_ == kDtypeInt16) {
      const auto v = static_cast<std::int16_t>(src[i]);
      std::memcpy(out.data() + i * 2, &v, 2);
    } else {
      const auto v = static_cast<std::int32_t>(src[i]);
      std::memcpy(out.data() + i * 4, &v, 4);
    }
  }
  starts_kept_->add(chunk.doc_starts, n_, n, [this](std::int64_t start) { add_start(start); });
  body_hash_.update(out);
  file_->write(out);
  n_ += n;
  n_bytes_ += chunk.n_bytes;
  n_chars_ += chunk.n_chars;
  n_words_ += chunk.n_words;
}

void EncodedSplitWriter::commit() {
  starts_kept_->finish([this](std::int64_t start) { add_start(start); });
  const std::uint64_t at = starts_offset(static_cast<std::uint64_t>(n_), dtype_);
  std::string padding(at - file_->size(), '\0');
  body_hash_.update(padding);
  file_->write(padding);
  TXL_CHECK(std::fflush(starts_) == 0 && std::fseek(starts_, 0, SEEK_SET) == 0,
            "cannot read back the temporary file of document starts: ", std::strerror(errno));
  std::string block(kBlock, '\0');
  for (std::int64_t left = n_docs_ * 8; left > 0;) {
    const size_t want = static_cast<size_t>(std::min<std::int64_t>(left, kBlock));
    TXL_CHECK(std::fread(block.data(), 1, want, starts_) == want,
              "cannot read back the temporary file of document starts");
    const std::string_view part(block.data(), want);
    body_hash_.update(part);
    file_->write(part);
    left -= static_cast<std::int64_t>(want);
  }
  std::string header =
      header_bytes(dtype_, static_cast<std::uint64_t>(n_), static_cast<std::uint64_t>(n_docs_),
                   n_bytes_, n_chars_, fingerprint_, 0, n_words_);
  const std::uint64_t checksum = sealed_checksum(header, body_hash_.digest());
  std::memcpy(header.data() + kChecksumOffset, &checksum, sizeof checksum);
  file_->write_at(0, header);
  file_->commit();
}

void write_encoded_split(const stdfs::path& path, const EncodedSplit& split,
                         std::int64_t vocab_size, std::uint64_t fingerprint) {
  EncodedSplitWriter writer(path, vocab_size, fingerprint);
  writer.append(split);
  writer.commit();
}

namespace {

// The fields of a cache file's header, checked against the file size.
struct SplitHeader {
  std::uint32_t dtype = 0;
  std::uint64_t n = 0, n_docs = 0;  // token and document counts
  std::int64_t n_bytes = 0, n_chars = 0, n_words = 0;
  std::uint64_t fingerprint = 0, checksum = 0;
  std::uint64_t starts_at() const { return starts_offset(n, dtype); }
};

std::nullopt_t missed(CacheMiss* miss, CacheMiss::Kind kind, std::string reason) {
  if (miss) *miss = CacheMiss{kind, std::move(reason)};
  return std::nullopt;
}

// `head` holds the first min(size, 72) bytes of a file of `size` bytes.
std::optional<SplitHeader> parse_split_header(std::string_view head, std::uint64_t size,
                                              CacheMiss* miss) {
  using Kind = CacheMiss::Kind;
  const std::string size_text = std::to_string(size) + " bytes";
  if (size < 12) return missed(miss, Kind::kDamaged, "truncated (" + size_text + ")");
  if (std::memcmp(head.data(), kMagic, sizeof kMagic) != 0)
    return missed(miss, Kind::kDamaged, "foreign file (bad magic)");
  const auto version = get<std::uint32_t>(head.data() + 8);
  if (version != kCacheVersion)
    return missed(miss, Kind::kOutdated,
                  "format version " + std::to_string(version) + ", expected " +
                      std::to_string(kCacheVersion));
  if (size < kHeaderSize)
    return missed(miss, Kind::kDamaged, "truncated (" + size_text + ", shorter than the header)");
  const char* h = head.data();
  SplitHeader header;
  header.dtype = get<std::uint32_t>(h + 12);
  if (header.dtype != kDtypeInt16 && header.dtype != kDtypeInt32)
    return missed(miss, Kind::kDamaged,
                  "foreign file (unknown dtype " + std::to_string(header.dtype) + ")");
  header.n = get<std::uint64_t>(h + 16);
  header.n_docs = get<std::uint64_t>(h + 24);
  header.n_bytes = get<std::int64_t>(h + 32);
  header.n_chars = get<std::int64_t>(h + 40);
  header.fingerprint = get<std::uint64_t>(h + 48);
  header.checksum = get<std::uint64_t>(h + kChecksumOffset);
  header.n_words = get<std::int64_t>(h + 64);
  // Guard the multiplication against a garbage header before trusting the sizes.
  constexpr std::uint64_t kMaxCount = std::uint64_t{1} << 40;
  const bool huge = header.n > kMaxCount || header.n_docs > kMaxCount;
  const std::uint64_t expected = huge ? 0 : header.starts_at() + header.n_docs * 8;
  if (huge || size != expected)
    return missed(miss, Kind::kDamaged,
                  "truncated or damaged (" + size_text + ", the header says " +
                      (huge ? std::string("more than 2^40 entries") : std::to_string(expected)) +
                      ")");
  return header;
}

// Reads `n` bytes at `offset` into `dst`; false on a read error.
using ReadAt = std::function<bool(std::uint64_t offset, char* dst, std::uint64_t n)>;

// The first index in ids[0, n) (little-endian T) outside [0, vocab_size), or -1.
template <typename T>
std::int64_t first_outside(const char* ids, std::int64_t n, std::int64_t vocab_size) {
  std::int64_t lo = 0, hi = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const auto v =
        static_cast<std::int64_t>(get<T>(ids + i * static_cast<std::int64_t>(sizeof(T))));
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  if (lo >= 0 && hi < vocab_size) return -1;  // the common case: one branch-free pass
  for (std::int64_t i = 0; i < n; ++i) {
    const auto v =
        static_cast<std::int64_t>(get<T>(ids + i * static_cast<std::int64_t>(sizeof(T))));
    if (v < 0 || v >= vocab_size) return i;
  }
  return -1;
}

// Everything after the header, read once in blocks: the checksum, then (only when it holds) the
// fingerprint, the text sizes, every id against the vocabulary and the document starts.
std::optional<SplitHeader> check_split(std::string_view head, std::uint64_t size,
                                       const ReadAt& read_at, std::uint64_t expected_fingerprint,
                                       std::int64_t vocab_size, CacheMiss* miss) {
  using Kind = CacheMiss::Kind;
  auto header = parse_split_header(head, size, miss);
  if (!header) return std::nullopt;
  const std::uint64_t elem = elem_size(header->dtype);
  const std::uint64_t ids_end = kHeaderSize + header->n * elem, starts_at = header->starts_at();
  std::string block;
  Xxh64 hash;
  std::int64_t bad_at = -1, bad_id = 0;
  bool starts_ok = header->n_docs > 0;
  std::int64_t previous = -1;
  for (std::uint64_t at = kHeaderSize; at < size;) {
    // Blocks end where the ids end and where the starts begin, so that a block holds whole ids
    // or whole starts.
    const std::uint64_t limit = at < ids_end ? ids_end : at < starts_at ? starts_at : size;
    const std::uint64_t want = std::min(kBlock / 8 * 8, limit - at);
    block.resize(want);
    if (!read_at(at, block.data(), want))
      return missed(miss, Kind::kDamaged, std::string("cannot read: ") + std::strerror(errno));
    hash.update(block);
    if (at < ids_end && bad_at < 0) {
      const auto count = static_cast<std::int64_t>(want / elem);
      const std::int64_t i = header->dtype == kDtypeInt16
                                 ? first_outside<std::int16_t>(block.data(), count, vocab_size)
                                 : first_outside<std::int32_t>(block.data(), count, vocab_size);
      if (i >= 0) {
        bad_at = static_cast<std::int64_t>((at - kHeaderSize) / elem) + i;
        bad_id = header->dtype == kDtypeInt16 ? get<std::int16_t>(block.data() + i * 2)
                                              : get<std::int32_t>(block.data() + i * 4);
      }
    }
    for (std::uint64_t p = std::max(at, starts_at); p + 8 <= at + want && starts_ok; p += 8) {
      const auto start = get<std::int64_t>(block.data() + (p - at));
      starts_ok = previous < 0 ? start == 0
                               : start > previous && start < static_cast<std::int64_t>(header->n);
      previous = start;
    }
    at += want;
  }
  // The checksum first: a damaged fingerprint or count is damage, not staleness.
  const std::uint64_t checksum = sealed_checksum(head, hash.digest());
  if (checksum != header->checksum)
    return missed(miss, Kind::kDamaged,
                  "checksum mismatch (header " + fs::hex64(header->checksum) + ", content " +
                      fs::hex64(checksum) + ")");
  if (header->fingerprint != expected_fingerprint)
    return missed(miss, Kind::kStale, "stale (corpus, tokenizer or options changed)");
  if (header->n_bytes < 0 || header->n_chars < 0 || header->n_words < 0)
    return missed(miss, Kind::kDamaged, "damaged (negative text size in the header)");
  if (!starts_ok)
    return missed(miss, Kind::kDamaged, "damaged (document starts out of order or range)");
  if (bad_at >= 0)
    return missed(miss, Kind::kDamaged,
                  "token id " + std::to_string(bad_id) + " at " + std::to_string(bad_at) +
                      " outside the tokenizer's vocabulary [0, " + std::to_string(vocab_size) +
                      ")");
  return header;
}

torch::ScalarType id_type(const SplitHeader& header) {
  return header.dtype == kDtypeInt16 ? torch::kShort : torch::kInt;
}

}  // namespace

std::optional<EncodedSplit> parse_encoded_split(std::string_view bytes,
                                                std::uint64_t expected_fingerprint,
                                                std::int64_t vocab_size, CacheMiss* miss) {
  const ReadAt read_at = [&](std::uint64_t offset, char* dst, std::uint64_t n) {
    std::memcpy(dst, bytes.data() + offset, n);
    return true;
  };
  auto header = check_split(bytes.substr(0, std::min<size_t>(bytes.size(), kHeaderSize)),
                            bytes.size(), read_at, expected_fingerprint, vocab_size, miss);
  if (!header) return std::nullopt;
  EncodedSplit split;
  split.n_bytes = header->n_bytes;
  split.n_chars = header->n_chars;
  split.n_words = header->n_words;
  const auto n = static_cast<std::int64_t>(header->n);
  const auto n_docs = static_cast<std::int64_t>(header->n_docs);
  split.ids = torch::empty({n}, id_type(*header));          // [N]
  split.doc_starts = torch::empty({n_docs}, torch::kLong);  // [n_docs]
  std::memcpy(split.ids.data_ptr(), bytes.data() + kHeaderSize,
              static_cast<size_t>(header->n * elem_size(header->dtype)));
  std::memcpy(split.doc_starts.data_ptr(), bytes.data() + header->starts_at(),
              static_cast<size_t>(header->n_docs * 8));
  return split;
}

std::optional<EncodedSplit> read_encoded_split(const stdfs::path& path,
                                               std::uint64_t expected_fingerprint,
                                               std::int64_t vocab_size, CacheMiss* miss) {
  std::error_code ec;
  if (!stdfs::is_regular_file(path, ec))
    return missed(miss, CacheMiss::Kind::kMissing, "not cached yet");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  struct stat info {};
  if (fd < 0 || ::fstat(fd, &info) != 0) {
    const std::string reason = std::strerror(errno);
    if (fd >= 0) ::close(fd);
    return missed(miss, CacheMiss::Kind::kDamaged, "cannot read: " + reason);
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  const ReadAt read_at = [fd](std::uint64_t offset, char* dst, std::uint64_t n) {
    for (std::uint64_t done = 0; done < n;) {
      const ssize_t got = ::pread(fd, dst + done, n - done, static_cast<off_t>(offset + done));
      if (got < 0 && errno == EINTR) continue;
      if (got == 0) errno = EIO;  // the file shrank while being read
      if (got <= 0) return false;
      done += static_cast<std::uint64_t>(got);
    }
    return true;
  };
  const auto size = static_cast<std::uint64_t>(info.st_size);
  std::string head(std::min<std::uint64_t>(size, kHeaderSize), '\0');
  if (!read_at(0, head.data(), head.size()))
    return missed(miss, CacheMiss::Kind::kDamaged,
                  std::string("cannot read: ") + std::strerror(errno));
  auto header = check_split(head, size, read_at, expected_fingerprint, vocab_size, miss);
  if (!header) return std::nullopt;
  // The same open file is mapped: a file renamed over it since cannot slip in unchecked. The
  // map is private and writable (copy-on-write: a write through a tensor never reaches the file),
  // unmapped with its last tensor; a truncation of the file by another program while it is mapped
  // ends the program with a line naming the file (fs::MappedFile, txl::ProcessSetup).
  std::string reason;
  auto mapping = std::make_shared<fs::MappedFile>(fd, size, path,
                                                  fs::MappedFile::Access::kCopyOnWrite, &reason);
  if (mapping->data() == nullptr)
    return missed(miss, CacheMiss::Kind::kDamaged, "cannot map: " + reason);
  char* base = mapping->data();
  auto keep = [mapping](void*) {};
  EncodedSplit split;
  split.n_bytes = header->n_bytes;
  split.n_chars = header->n_chars;
  split.n_words = header->n_words;
  split.ids = torch::from_blob(base + kHeaderSize, {static_cast<std::int64_t>(header->n)}, keep,
                               torch::TensorOptions().dtype(id_type(*header)));  // [N]
  split.doc_starts =
      torch::from_blob(base + header->starts_at(), {static_cast<std::int64_t>(header->n_docs)},
                       keep, torch::TensorOptions().dtype(torch::kLong));  // [n_docs]
  return split;
}

}  // namespace txl::data
