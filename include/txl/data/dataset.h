#pragma once
// Corpus -> tokenizer -> token ids, cached on disk.
//
// load_dataset(cfg) reads the corpus, trains or loads the tokenizer and encodes each split
// (with <eos> after every line when cfg.add_eos), all cached under
//   <cache_dir>/<corpus>-<16 hex digits of hash(corpus source, tokenizer options)>/
//     tokenizer.meta, tokenizer.model | tokenizer.vocab
//     train.bin, valid.bin, test.bin
// A later run with the same corpus bytes and options reuses everything without re-encoding;
// changed corpus bytes, tokenizer or options make the files stale: detected, logged, rebuilt.
//
// load_dataset(cfg, fixed) encodes with a given tokenizer (a checkpoint's own) and never another.
// When the folder above holds the tokenizer cfg builds from this corpus and it is `fixed` (same
// kind and fingerprint), its splits are used; otherwise the splits go to
//   <cache_dir>/<corpus>-given-<16 hex digits of hash(corpus source, fixed kind + fingerprint)>/
// (with a copy of `fixed` for inspection), the other folder's tokenizer files are left alone, and
// a warning says that the corpus's own tokenizer differs from the given one.
//
// Encoded split file (little-endian), format version kCacheVersion:
//   offset  0  char[8]   magic "TXLTOKS\0"
//           8  uint32    format version (4; a file of an earlier version is rebuilt with a
//                        warning: 3 put document starts before the ids, 2 had no n_words, 1 no
//                        checksum)
//          12  uint32    dtype: 1 = int16 (vocab_size <= 32768), 2 = int32
//          16  uint64    token count N
//          24  uint64    document count n_docs
//          32  int64     n_bytes of the original text
//          40  int64     n_chars of the original text
//          48  uint64    fingerprint: hash(version, corpus bytes, split, tokenizer, add_eos)
//          56  uint64    checksum: XXH64 of bytes 0..55 and 64..71 (the header but the checksum)
//                        followed by the XXH64 of bytes 72..end (8 bytes, little-endian)
//          64  int64     n_words of the original text (corpus.h, count_words)
//          72  dtype[N]  token ids
//              zero bytes up to a multiple of 8
//              int64[n_docs]  document start offsets
// The ids come first so that a split is written as it is encoded, chunk after chunk, and the
// file is used in place: the ids and document starts of a loaded split are tensors over a
// private (copy-on-write) memory map of the file, never read whole into memory.
// A file is rebuilt when it is missing, of another version, stale (fingerprint), or damaged:
// a size that disagrees with its header, a wrong magic or dtype, a checksum mismatch (a flipped
// bit anywhere), an id >= the tokenizer's vocab_size, document starts out of order. Damage is a
// warning naming the file and the reason. Checking a file reads it once, in blocks of a few MB.

#include <torch/torch.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "txl/config/config.h"
#include "txl/data/corpus.h"
#include "txl/data/tokenizer.h"
#include "txl/util/fs.h"

namespace txl::data {

constexpr std::uint32_t kCacheVersion = 4;

// XXH64 (xxhash.com, the 64-bit variant): 8 bytes a step, several GB/s, so checking a cache costs
// a fraction of reading it. Xxh64 takes the data in pieces of any size: update(a); update(b)
// gives the digest of a + b.
class Xxh64 {
 public:
  explicit Xxh64(std::uint64_t seed = 0);
  void update(std::string_view data);
  std::uint64_t digest() const;

 private:
  std::uint64_t seed_, lanes_[4];
  std::uint64_t total_ = 0;
  char buffer_[32];
  std::size_t buffered_ = 0;
};
std::uint64_t xxh64(std::string_view data, std::uint64_t seed = 0);

// The corpus text is read and encoded in chunks of about this many bytes (whole lines).
constexpr std::int64_t kEncodeChunkBytes = std::int64_t{32} << 20;

struct EncodedSplit {
  // [N] token ids of the split in text order: int64 when encoded in memory (encode_split); the
  // file's int16 or int32 when loaded from the cache (a memory map). Readers that need int64 take
  // .to(torch::kLong) of the part they use.
  torch::Tensor ids;
  torch::Tensor doc_starts;  // int64 [n_docs], token offsets where documents start, sorted, first 0
  std::int64_t n_bytes = 0;  // UTF-8 bytes of the original text (for bits per byte)
  std::int64_t n_chars = 0;  // characters of the original text (for bits per character)
  std::int64_t n_words = 0;  // words of the original text (for word-level perplexity)
};

// Where each piece of a load came from, and how fast encoding ran.
struct DatasetStats {
  std::filesystem::path cache_path;  // the directory holding tokenizer and splits
  bool tokenizer_reused = false;     // loaded from the cache (false: trained or built now)
  bool tokenizer_given = false;      // the caller's tokenizer (load_dataset with `fixed`)
  int splits_reused = 0;             // splits loaded from the cache, 0..3
  double tokenizer_seconds = 0.0;    // time to train/build the tokenizer (0 when reused)
  std::int64_t encoded_tokens = 0;   // tokens encoded in this run (0 when all reused)
  double encode_seconds = 0.0;       // wall time of that encoding: reading the text, encoding,
                                     // writing and checking the cache files
  double tokens_per_second() const {
    return encode_seconds > 0 ? static_cast<double>(encoded_tokens) / encode_seconds : 0.0;
  }
};

struct Dataset {
  std::string corpus;              // corpus name, e.g. "kjv"
  std::string corpus_fingerprint;  // 16 hex digits of the corpus source bytes (what was read)
  std::shared_ptr<const Tokenizer> tokenizer;
  EncodedSplit train, valid, test;
  DatasetStats stats;
  const EncodedSplit& split(std::string_view name) const;  // "train" | "valid" | "test"
};

// Reads, tokenizes and encodes cfg's corpus, through the cache in cfg.cache_dir. Logs corpus
// statistics under [data]. Throws txl::Error for bad corpora or options.
Dataset load_dataset(const config::DataConfig& cfg);

// What a load made and reused, one line each (what txl-prepare prints): the corpus, the
// tokenizer (kind, vocabulary, fingerprint, from the cache or built in how long), each split's
// tokens, bytes, characters and documents, the encoding speed when anything was encoded, and
// the cache folder ("hit", or how many splits were rebuilt).
std::string describe(const Dataset& dataset);

// The same corpus encoded with `fixed` and no other tokenizer (cfg.tokenizer only names the
// folder that may already hold these splits; see the top of this file). Throws txl::Error for a
// null tokenizer, bad corpora or text `fixed` cannot encode.
Dataset load_dataset(const config::DataConfig& cfg, std::shared_ptr<const Tokenizer> fixed);

// Encodes lines (eos after each when add_eos) on all cores, keeping order. doc_starts are the
// line indices where documents start (converted to token offsets). n_bytes/n_chars are copied;
// n_words counts the lines' words (count_words), plus one a line when add_eos and
// split.line_end_is_word.
EncodedSplit encode_split(const CorpusSplit& split, const Tokenizer& tokenizer, bool add_eos);

// Reads `split` of `reader` in chunks of about chunk_bytes, encodes each chunk as encode_split does
// (document starts and counts as if the split were encoded whole) and writes it to the cache file
// `path` (EncodedSplitWriter), then returns the file mapped (read_encoded_split). Memory holds one
// chunk at a time. Throws txl::Error naming the corpus and split for text the tokenizer cannot
// encode, or the file for a write error; `path` is then untouched.
EncodedSplit encode_to_file(const CorpusReader& reader, std::string_view split,
                            const Tokenizer& tokenizer, bool add_eos,
                            const std::filesystem::path& path, std::uint64_t fingerprint,
                            std::int64_t chunk_bytes = kEncodeChunkBytes);

// Encodes any text file (e.g. for evaluation): one line a line, eos after each when add_eos,
// one document; n_bytes is the file size.
EncodedSplit encode_text_file(const std::filesystem::path& path, const Tokenizer& tokenizer,
                              bool add_eos = true);

// ------------------------------------------------------------------------- cache files
// Why a cached split was not used.
struct CacheMiss {
  enum class Kind {
    kMissing,   // no file yet
    kOutdated,  // another format version (rebuilt with a warning)
    kStale,     // another corpus, tokenizer or option (fingerprint differs)
    kDamaged,   // truncated, foreign, checksum mismatch, ids outside the vocabulary, ...
  };
  Kind kind = Kind::kMissing;
  std::string reason;  // e.g. "checksum mismatch (header 3f0c..., content 9a41...)"
};

class DocumentStarts;  // which document starts to keep (src/data/document_starts.h)

// Writes a cache file (format above) atomically, chunk after chunk, holding one chunk at a time:
// append() adds a chunk's ids (any integer dtype, each checked against the vocabulary) and its
// document starts (token offsets within the chunk; duplicates of the running offset and a start
// with no token after it in the split are dropped, and the split's first start is 0), and adds its
// byte, character and word counts. commit() puts the file in place; without it nothing is
// written. Throws txl::Error for an id outside [0, vocab_size) or a write error naming the file.
class EncodedSplitWriter {
 public:
  EncodedSplitWriter(const std::filesystem::path& path, std::int64_t vocab_size,
                     std::uint64_t fingerprint);
  ~EncodedSplitWriter();
  EncodedSplitWriter(const EncodedSplitWriter&) = delete;
  EncodedSplitWriter& operator=(const EncodedSplitWriter&) = delete;
  void append(const EncodedSplit& chunk);
  void commit();
  std::int64_t tokens() const { return n_; }

 private:
  void add_start(std::int64_t start);
  std::unique_ptr<fs::AtomicWriter> file_;
  std::unique_ptr<DocumentStarts> starts_kept_;  // which document starts to write
  std::FILE* starts_ = nullptr;                  // the document starts, until commit() appends them
  std::int64_t vocab_size_;
  std::uint64_t fingerprint_;
  std::uint32_t dtype_;
  Xxh64 body_hash_;
  std::int64_t n_ = 0, n_docs_ = 0;
  std::int64_t n_bytes_ = 0, n_chars_ = 0, n_words_ = 0;
};

// Writes a whole split (an EncodedSplitWriter with one chunk).
void write_encoded_split(const std::filesystem::path& path, const EncodedSplit& split,
                         std::int64_t vocab_size, std::uint64_t fingerprint);

// Checks the bytes of a cache file: nullopt (with `miss` set) unless the header, fingerprint,
// checksum, document starts and every id (< vocab_size) are right; the split is a copy of the
// bytes. Never throws or crashes on arbitrary bytes (fuzzed: tests/fuzz/fuzz_encoded_split.cpp).
std::optional<EncodedSplit> parse_encoded_split(std::string_view bytes,
                                                std::uint64_t expected_fingerprint,
                                                std::int64_t vocab_size, CacheMiss* miss = nullptr);

// Reads a cache file: the same checks, streamed through in blocks, then the split mapped in
// place (copy-on-write: writing to its tensors never reaches the file).
std::optional<EncodedSplit> read_encoded_split(const std::filesystem::path& path,
                                               std::uint64_t expected_fingerprint,
                                               std::int64_t vocab_size, CacheMiss* miss = nullptr);

// The checksum the header of a cache file with these bytes must hold (offset 56; the bytes at
// 56..63 are not part of it). Requires bytes.size() >= 72.
std::uint64_t encoded_split_checksum(std::string_view bytes);

}  // namespace txl::data
