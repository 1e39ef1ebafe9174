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
// Encoded split file (little-endian), format version kCacheVersion:
//   offset  0  char[8]   magic "TXLTOKS\0"
//           8  uint32    format version
//          12  uint32    dtype: 1 = uint16, 2 = int32 (uint16 when vocab_size <= 65536)
//          16  uint64    token count N
//          24  uint64    document count n_docs
//          32  int64     n_bytes of the original text
//          40  int64     n_chars of the original text
//          48  uint64    fingerprint: hash(version, corpus bytes, split, tokenizer, add_eos)
//          56  int64[n_docs]  document start offsets
//              dtype[N]       token ids
// A file whose size disagrees with its header is truncated; a wrong magic or version is
// foreign; both are rebuilt.

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

constexpr std::uint32_t kCacheVersion = 1;

struct EncodedSplit {
  torch::Tensor ids;         // int64 [N], the token ids of the split in text order
  torch::Tensor doc_starts;  // int64 [n_docs], token offsets where documents start, sorted, first 0
  std::int64_t n_bytes = 0;  // UTF-8 bytes of the original text (for bits per byte)
  std::int64_t n_chars = 0;  // characters of the original text (for bits per character)
};

// Where each piece of a load came from, and how fast encoding ran.
struct DatasetStats {
  std::filesystem::path cache_path;  // the directory holding tokenizer and splits
  bool tokenizer_reused = false;     // loaded from the cache (false: trained or built now)
  int splits_reused = 0;             // splits loaded from the cache, 0..3
  double tokenizer_seconds = 0.0;    // time to train/build the tokenizer (0 when reused)
  std::int64_t encoded_tokens = 0;   // tokens encoded in this run (0 when all reused)
  double encode_seconds = 0.0;       // wall time of that encoding
  double tokens_per_second() const {
    return encode_seconds > 0 ? static_cast<double>(encoded_tokens) / encode_seconds : 0.0;
  }
};

struct Dataset {
  std::string corpus;  // corpus name, e.g. "kjv"
  std::shared_ptr<Tokenizer> tokenizer;
  EncodedSplit train, valid, test;
  DatasetStats stats;
  const EncodedSplit& split(std::string_view name) const;  // "train" | "valid" | "test"
};

// Reads, tokenizes and encodes cfg's corpus, through the cache in cfg.cache_dir. Logs corpus
// statistics under [data]. Throws txl::Error for bad corpora or options.
Dataset load_dataset(const config::DataConfig& cfg);

// Encodes lines (eos after each when add_eos) on all cores, keeping order. doc_starts are the
// line indices where documents start (converted to token offsets). n_bytes/n_chars are copied.
EncodedSplit encode_split(const CorpusSplit& split, const Tokenizer& tokenizer, bool add_eos);

// Encodes any text file (e.g. for evaluation): one line a line, eos after each when add_eos,
// one document; n_bytes is the file size.
EncodedSplit encode_text_file(const std::filesystem::path& path, const Tokenizer& tokenizer,
                              bool add_eos = true);

// The cache file format, exposed for tests and tools.
void write_encoded_split(const std::filesystem::path& path, const EncodedSplit& split,
                         std::int64_t vocab_size, std::uint64_t fingerprint);
// Reads a cache file; nullopt (with `why` set) when missing, foreign, truncated or its
// fingerprint differs from `expected_fingerprint`.
std::optional<EncodedSplit> read_encoded_split(const std::filesystem::path& path,
                                               std::uint64_t expected_fingerprint,
                                               std::string* why = nullptr);

}  // namespace txl::data
