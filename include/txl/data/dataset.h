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
//           8  uint32    format version (3; a file of version 2, without n_words, or 1, without a
//                        checksum, is rebuilt with a warning)
//          12  uint32    dtype: 1 = uint16, 2 = int32 (uint16 when vocab_size <= 65536)
//          16  uint64    token count N
//          24  uint64    document count n_docs
//          32  int64     n_bytes of the original text
//          40  int64     n_chars of the original text
//          48  uint64    fingerprint: hash(version, corpus bytes, split, tokenizer, add_eos)
//          56  uint64    checksum: XXH64 of bytes 64..end (n_words, document starts and ids),
//                        seeded with XXH64 of bytes 0..55 (so it covers the header too)
//          64  int64     n_words of the original text (corpus.h, count_words)
//          72  int64[n_docs]  document start offsets
//              dtype[N]       token ids
// A file is rebuilt when it is missing, of another version, stale (fingerprint), or damaged:
// a size that disagrees with its header, a wrong magic or dtype, a checksum mismatch (a flipped
// bit anywhere), an id >= the tokenizer's vocab_size, document starts out of order. Damage is a
// warning naming the file and the reason.

#include <torch/torch.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "txl/config/config.h"
#include "txl/data/corpus.h"
#include "txl/data/tokenizer.h"

namespace txl::data {

constexpr std::uint32_t kCacheVersion = 3;

struct EncodedSplit {
  torch::Tensor ids;         // int64 [N], the token ids of the split in text order
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
  double encode_seconds = 0.0;       // wall time of that encoding
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

// Writes a cache file (format above) atomically. Throws txl::Error for an id outside
// [0, vocab_size).
void write_encoded_split(const std::filesystem::path& path, const EncodedSplit& split,
                         std::int64_t vocab_size, std::uint64_t fingerprint);

// Parses the bytes of a cache file: nullopt (with `miss` set) unless the header, fingerprint,
// checksum, document starts and every id (< vocab_size) are right. Never throws or crashes on
// arbitrary bytes (fuzzed: tests/fuzz/fuzz_encoded_split.cpp).
std::optional<EncodedSplit> parse_encoded_split(std::string_view bytes,
                                                std::uint64_t expected_fingerprint,
                                                std::int64_t vocab_size, CacheMiss* miss = nullptr);

// Reads a cache file (mapped, then parse_encoded_split).
std::optional<EncodedSplit> read_encoded_split(const std::filesystem::path& path,
                                               std::uint64_t expected_fingerprint,
                                               std::int64_t vocab_size, CacheMiss* miss = nullptr);

// The checksum the header of a cache file with these bytes must hold (offset 56; the bytes at
// 56..63 are not part of it). Requires bytes.size() >= 64.
std::uint64_t encoded_split_checksum(std::string_view bytes);

// XXH64 (xxhash.com, the 64-bit variant): 8 bytes a step, several GB/s, so checking a 400 MB
// cache costs a fraction of reading it.
std::uint64_t xxh64(std::string_view data, std::uint64_t seed = 0);

}  // namespace txl::data
