// load_dataset on a text corpus: its cache reused, rebuilt and checked, and a given tokenizer.
#include "txl/data/dataset.h"

#include <cstring>
#include <filesystem>
#include <map>

#include "support/test_support.h"
#include "txl/util/fs.h"

namespace {

using txl::data::CacheMiss;
using txl::data::Dataset;
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
    EXPECT_EQ(a.split(s).n_words, b.split(s).n_words) << s;
  }
}

// A small PG-19 layout, loaded as a dataset: one document per book (books in id order), the
// split by folder, the word counts of the rule (whitespace runs; line ends are not words for
// PG-19), kept through the cache.
TEST(Dataset, Pg19LayoutGivesDocumentsSplitsAndWordCounts) {
  TempDir dir;
  for (const char* split : {"train", "validation", "test"})
    stdfs::create_directories(dir / "pg19" / split);
  write_text(dir / "pg19" / "train" / "12.txt", "The old man , he said.\nNo.\n");        // 6 + 1
  write_text(dir / "pg19" / "train" / "3.txt", "Call me Ishmael.\n\nSome years ago\n");  // 6
  write_text(dir / "pg19" / "validation" / "5.txt", "It was the best of times\n");       // 6
  write_text(dir / "pg19" / "test" / "7.txt", "  Happy families  are\talike;\n");        // 4
  txl::config::DataConfig cfg;
  cfg.corpus = txl::config::Corpus::kPg19;
  cfg.path = (dir / "pg19").string();
  cfg.cache_dir = (dir / "cache").string();
  cfg.tokenizer.type = txl::config::TokenizerType::kWord;
  const Dataset ds = load_dataset(cfg);
  EXPECT_EQ(ds.train.n_words, 6 + 7);
  EXPECT_EQ(ds.valid.n_words, 6);
  EXPECT_EQ(ds.test.n_words, 4);
  // Book 3 first (ids in numeric order): its 3 lines (6 words + 3 eos) then book 12.
  EXPECT_TRUE(tensor_equal(ds.train.doc_starts, torch::tensor({0, 6 + 3}, torch::kLong)));
  EXPECT_EQ(ds.train.ids[0].item<std::int64_t>(), ds.tokenizer->encode("Call")[0]);
  EXPECT_EQ(ds.test.doc_starts.numel(), 1);
  Dataset again = load_dataset(cfg);
  EXPECT_EQ(again.stats.splits_reused, 3);
  expect_same(ds, again);
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

// --------------------------------------------------------------------- load_dataset cache

std::vector<std::int64_t> as_vector(const torch::Tensor& t) {
  const auto wide = t.to(torch::kLong).contiguous();  // a cache's ids are int16 or int32
  return std::vector<std::int64_t>(wide.data_ptr<std::int64_t>(),
                                   wide.data_ptr<std::int64_t>() + wide.numel());
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
  std::uint64_t n = 0, n_docs = 0, elem = 0;
  size_t ids_at() const { return 72; }
  size_t starts_at() const { return (72 + n * elem + 7) / 8 * 8; }
};

SplitLayout layout_of(const std::string& bytes) {
  SplitLayout l;
  std::uint32_t dtype = 0;
  std::memcpy(&dtype, bytes.data() + 12, 4);
  l.elem = dtype == 1 ? 2 : 4;
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
  // One bit of the 10th id (int16): still a valid id, so only the checksum can tell.
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
  damage("test", 8, 3);       // format version 3 (starts before ids): outdated, rebuilt, warned
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
  EXPECT_NE(log.find("warning: cache " + f.split_file(first, "test").string() +
                     " was written by another version of txl (format version 3, expected 4)"),
            std::string::npos)
      << log;
  EXPECT_EQ(log.find("warning: cache " + f.split_file(first, "test").string() + " is damaged"),
            std::string::npos)
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

}  // namespace
