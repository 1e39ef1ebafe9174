// Data that streams: corpora read in chunks, splits encoded chunk by chunk into the cache file,
// tokenizers built from streamed text, and cache files mapped in place. Each chunked path is
// checked against the whole-text path it replaces, with chunks small enough to cut everywhere.
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "support/test_support.h"
#include "txl/config/config.h"
#include "txl/data/corpus.h"
#include "txl/data/dataset.h"
#include "txl/data/tokenizer.h"
#include "txl/util/error.h"
#include "txl/util/fs.h"

namespace {

using txl::config::Corpus;
using txl::data::CorpusSplit;
using txl::data::EncodedSplit;
using txl::test::longs;
using txl::test::TempDir;
using txl::test::tensor_equal;
using txl::test::write_text;
namespace stdfs = std::filesystem;

constexpr std::int64_t kWhole = std::numeric_limits<std::int64_t>::max();

TEST(Xxh64, PiecesGiveTheDigestOfTheWhole) {
  std::string bytes;
  for (int i = 0; i < 1000; ++i) bytes += static_cast<char>((i * 131 + 7) % 256);
  for (std::uint64_t seed : {0ull, 7ull}) {
    for (size_t size : {0, 3, 31, 32, 33, 200, 1000}) {
      const std::string_view whole = std::string_view(bytes).substr(0, size);
      for (size_t piece : {1, 5, 32, 64, 999}) {
        txl::data::Xxh64 hash(seed);
        for (size_t at = 0; at < whole.size(); at += piece) hash.update(whole.substr(at, piece));
        EXPECT_EQ(hash.digest(), txl::data::xxh64(whole, seed))
            << "size " << size << ", pieces of " << piece << ", seed " << seed;
      }
    }
  }
}

// ------------------------------------------------------------------------- corpora

// A corpus of each layout, with what makes chunking hard: documents that start at blank-line runs
// (WikiText titles), blank separators (text), "<page>" lines (enwik8), books (PG-19), a final line
// without a newline, and empty lines.
struct Corpora {
  TempDir dir;
  Corpora() {
    const std::string wiki =
        " = Alpha = \n\n Alpha is a letter . \n\n = = History = = \n\n It came first . \n"
        "\n\n = Beta = \n\n Beta follows Alpha . \n \n = Gamma = \n Gamma ends \n";
    for (const char* split : {"train", "valid", "test"}) {
      write_text(dir / "wiki" / (std::string("wiki.") + split + ".tokens"), wiki);
      write_text(dir / "ptb" / (std::string("ptb.") + split + ".txt"), " a b \n c d e \n\n f \n");
      write_text(dir / "text" / (std::string(split) + ".txt"),
                 "one two\nthree\n\n\nfour five six\n  \nseven\neight nine");
    }
    std::string xml;
    for (int page = 0; page < 40; ++page)
      xml += "  <page>\n    <title>T" + std::to_string(page) + "</title>\n    text é " +
             std::to_string(page * page) + "\n  </page>\n";
    write_text(dir / "enwik8" / "enwik8", xml);
    const char* folders[3] = {"train", "validation", "test"};
    for (int s = 0; s < 3; ++s) {
      for (int book = 1; book <= 3; ++book) {
        write_text(dir / "pg19" / folders[s] / (std::to_string(book * 10 + s) + ".txt"),
                   "CHAPTER I\n\nIt was a dark night, said " + std::to_string(book) +
                       ".\n\nThe end.\n" + (book == 2 ? "no newline" : ""));
      }
    }
  }
  txl::config::DataConfig config(Corpus corpus, const char* folder) const {
    txl::config::DataConfig cfg;
    cfg.corpus = corpus;
    cfg.path = (dir / folder).string();
    cfg.tokenizer.type = txl::config::TokenizerType::kWord;
    return cfg;
  }
  std::vector<txl::config::DataConfig> all() const {
    return {config(Corpus::kWikitext, "wiki"), config(Corpus::kPtb, "ptb"),
            config(Corpus::kText, "text"), config(Corpus::kEnwik8, "enwik8"),
            config(Corpus::kPg19, "pg19")};
  }
};

// A split's chunks joined, as CorpusReader::read joins them.
CorpusSplit joined(const txl::data::CorpusReader& reader, const char* split, std::int64_t bytes,
                   int* chunks) {
  CorpusSplit out;
  *chunks = 0;
  reader.read_split(split, bytes, [&](CorpusSplit&& chunk) {
    ++*chunks;
    for (auto start : chunk.doc_starts)
      out.doc_starts.push_back(static_cast<std::int64_t>(out.lines.size()) + start);
    for (auto& line : chunk.lines) out.lines.push_back(line);
    out.n_bytes += chunk.n_bytes;
    out.n_chars += chunk.n_chars;
    out.line_end_is_word = chunk.line_end_is_word;
  });
  return out;
}

TEST(Streaming, ChunkedReadingJoinsToTheWholeSplit) {
  Corpora corpora;
  for (const auto& cfg : corpora.all()) {
    auto reader = txl::data::make_corpus_reader(cfg);
    for (const char* split : {"train", "valid", "test"}) {
      int whole_chunks = 0;
      const CorpusSplit whole = joined(*reader, split, kWhole, &whole_chunks);
      EXPECT_EQ(whole_chunks, 1);
      ASSERT_FALSE(whole.lines.empty());
      EXPECT_EQ(whole.doc_starts.front(), 0);
      for (std::int64_t bytes : {1, 7, 40}) {
        int chunks = 0;
        const CorpusSplit part = joined(*reader, split, bytes, &chunks);
        const std::string where =
            reader->name() + " " + split + " in chunks of " + std::to_string(bytes) + " bytes";
        if (bytes == 1) {
          EXPECT_GT(chunks, 1) << where;
        }
        EXPECT_EQ(part.lines, whole.lines) << where;
        EXPECT_EQ(part.doc_starts, whole.doc_starts) << where;
        EXPECT_EQ(part.n_bytes, whole.n_bytes) << where;
        EXPECT_EQ(part.n_chars, whole.n_chars) << where;
        EXPECT_EQ(part.line_end_is_word, whole.line_end_is_word) << where;
      }
    }
  }
}

// The file sizes are the byte counts, and WikiText's articles start at the blank lines before
// their titles however the chunks fall: the joined split is the right one, not only a stable one.
TEST(Streaming, ChunkedSplitsCountTheFileAndFindTheArticles) {
  Corpora corpora;
  auto wiki = txl::data::make_corpus_reader(corpora.config(Corpus::kWikitext, "wiki"));
  int chunks = 0;
  const CorpusSplit train = joined(*wiki, "train", 1, &chunks);
  EXPECT_EQ(train.n_bytes, static_cast<std::int64_t>(
                               stdfs::file_size(corpora.dir / "wiki" / "wiki.train.tokens")));
  // Lines: 0 " = Alpha = ", 1 "", 2 ..., 5 "", 6 " It came first . ", 7 "", 8 "", 9 " = Beta = ",
  // ..., 12 " ", 13 " = Gamma = ": Beta takes in lines 7-8, Gamma line 12 (" " is blank).
  EXPECT_EQ(train.doc_starts, (std::vector<std::int64_t>{0, 7, 12}));
  auto text = txl::data::make_corpus_reader(corpora.config(Corpus::kText, "text"));
  const CorpusSplit valid = joined(*text, "valid", 1, &chunks);
  EXPECT_EQ(valid.lines,
            (std::vector<std::string>{"one two", "three", "four five six", "seven", "eight nine"}));
  EXPECT_EQ(valid.doc_starts, (std::vector<std::int64_t>{0, 2, 3}));
  EXPECT_EQ(valid.n_bytes, 49);  // the whole file, blank separators included
}

// ------------------------------------------------------------------------- encoding

std::uint64_t kFingerprint = 0x5eed;

TEST(Streaming, EncodedInChunksEqualsEncodedWhole) {
  Corpora corpora;
  for (auto cfg : corpora.all()) {
    for (bool add_eos : {true, false}) {
      auto reader = txl::data::make_corpus_reader(cfg);
      const auto text = reader->read();
      auto tok = txl::data::build_word_tokenizer(text.train.lines, 0);
      for (const char* split : {"train", "test"}) {
        const EncodedSplit whole = txl::data::encode_split(text.split(split), *tok, add_eos);
        for (std::int64_t bytes : {std::int64_t{1}, std::int64_t{30}, kWhole}) {
          const stdfs::path file = corpora.dir / "cache" / (reader->name() + split + ".bin");
          const EncodedSplit part =
              txl::data::encode_to_file(*reader, split, *tok, add_eos, file, kFingerprint, bytes);
          const std::string where = reader->name() + " " + split + " in chunks of " +
                                    std::to_string(bytes) + " bytes, add_eos " +
                                    std::to_string(add_eos);
          EXPECT_TRUE(tensor_equal(part.ids, whole.ids)) << where;
          EXPECT_TRUE(tensor_equal(part.doc_starts, whole.doc_starts)) << where;
          EXPECT_EQ(part.n_bytes, whole.n_bytes) << where;
          EXPECT_EQ(part.n_chars, whole.n_chars) << where;
          EXPECT_EQ(part.n_words, whole.n_words) << where;
        }
      }
    }
  }
}

// Document starts across chunk boundaries: a start with no token after it in its chunk waits for
// the next chunk's tokens, a repeated start is one start, and a start at the very end is dropped;
// encode_split's rule for a whole split.
TEST(Streaming, WriterKeepsTheStartsOfTheWholeSplit) {
  TempDir dir;
  auto chunk = [](std::vector<std::int64_t> ids, std::vector<std::int64_t> starts) {
    EncodedSplit c;
    c.ids = longs(ids);
    c.doc_starts = longs(starts);
    c.n_bytes = 10;
    c.n_chars = 9;
    c.n_words = 2;
    return c;
  };
  txl::data::EncodedSplitWriter writer(dir / "s.bin", 50, 7);
  writer.append(chunk({4, 5}, {1, 2}));  // starts at 1 (so 0 first) and at the end (2)
  writer.append(chunk({}, {0}));         // no tokens: 2 still waits
  writer.append(chunk({6}, {0, 0}));     // 2 is taken once
  writer.append(chunk({7, 8}, {2}));     // a start at the very end: dropped
  EXPECT_FALSE(stdfs::exists(dir / "s.bin")) << "nothing is in place before commit()";
  writer.commit();
  auto back = txl::data::read_encoded_split(dir / "s.bin", 7, 50);
  ASSERT_TRUE(back.has_value());
  EXPECT_TRUE(tensor_equal(back->ids, longs({4, 5, 6, 7, 8})));
  EXPECT_TRUE(tensor_equal(back->doc_starts, longs({0, 1, 2})));
  EXPECT_EQ(back->n_bytes, 40);
  EXPECT_EQ(back->n_chars, 36);
  EXPECT_EQ(back->n_words, 8);
}

// A tokenizer that cannot encode one line, to fail an encoding half-way.
class FailingTokenizer : public txl::data::Tokenizer {
 public:
  std::string kind() const override { return "word"; }
  std::vector<std::int64_t> encode(std::string_view text) const override {
    TXL_CHECK(text.find("night, said 3") == std::string_view::npos, "cannot encode this line");
    return std::vector<std::int64_t>(text.size() % 5 + 1, 3);
  }
  std::string decode(const std::vector<std::int64_t>&) const override { return ""; }
  std::int64_t vocab_size() const override { return 10; }
  std::int64_t pad_id() const override { return 0; }
  std::int64_t eos_id() const override { return 2; }
  std::int64_t unk_id() const override { return 1; }
  std::string piece(std::int64_t) const override { return ""; }
  std::string fingerprint() const override { return "0000000000000000"; }
  void save(const stdfs::path&) const override {}
  std::string serialize() const override { return ""; }
};

TEST(Streaming, AFailureHalfWayLeavesTheCacheAsItWas) {
  Corpora corpora;
  auto reader = txl::data::make_corpus_reader(corpora.config(Corpus::kPg19, "pg19"));
  const stdfs::path file = corpora.dir / "cache" / "train.bin";
  write_text(file, "the previous file");
  FailingTokenizer tok;
  TXL_EXPECT_THROW_WITH(
      txl::data::encode_to_file(*reader, "train", tok, true, file, kFingerprint, 1),
      "corpus 'pg19', train split: cannot encode line");
  EXPECT_EQ(txl::fs::read_file(file), "the previous file");
  for (const auto& entry : stdfs::directory_iterator(file.parent_path()))
    EXPECT_EQ(entry.path().filename(), "train.bin") << "a temporary file was left behind";
}

// ------------------------------------------------------------------------- mapped caches

TEST(Streaming, LoadedSplitsAreTheFileMappedCopyOnWrite) {
  Corpora corpora;
  auto cfg = corpora.config(Corpus::kPg19, "pg19");
  cfg.cache_dir = (corpora.dir / "cache").string();
  auto first = txl::data::load_dataset(cfg);
  EXPECT_EQ(first.train.ids.scalar_type(), torch::kShort);  // the file's int16, not widened
  const auto kept = first.train.ids.to(torch::kLong);       // [N]
  const stdfs::path file = first.stats.cache_path / "train.bin";
  const std::string bytes = txl::fs::read_file(file);
  first.train.ids.fill_(1);  // private pages: the file does not change
  EXPECT_EQ(txl::fs::read_file(file), bytes);
  auto second = txl::data::load_dataset(cfg);
  EXPECT_EQ(second.stats.splits_reused, 3);
  EXPECT_TRUE(tensor_equal(second.train.ids, kept));
  // The tensor outlives everything else of its load: the map stays while a tensor holds it.
  torch::Tensor alone;
  {
    auto third = txl::data::load_dataset(cfg);
    alone = third.test.ids.narrow(0, 1, 3);
  }
  EXPECT_TRUE(tensor_equal(alone, second.test.ids.narrow(0, 1, 3)));
}

// ------------------------------------------------------------------------- tokenizers

// The sample of max_sentences lines taken in two passes over streamed text is the one an even
// stride over the lines in memory takes: the same sentencepiece model.
TEST(Streaming, SentencePieceTrainsOnTheBoundedSampleOfTheStream) {
  std::vector<std::string> lines;
  for (int i = 0; i < 600; ++i)
    lines.push_back(i % 7 == 3 ? "  "
                               : "line " + std::to_string(i) + " of the text, word " +
                                     std::to_string(i * 37 % 101));
  txl::config::TokenizerConfig cfg;
  cfg.type = txl::config::TokenizerType::kSentencePiece;
  cfg.vocab_size = 60;
  cfg.max_sentences = 50;
  int passes = 0;
  const txl::data::TrainText stream = [&](const txl::data::LineVisitor& visit) {
    ++passes;
    for (const auto& line : lines) visit(line);
  };
  auto streamed = txl::data::train_sentencepiece(cfg, stream);
  EXPECT_EQ(passes, 2);
  std::vector<std::string> text, sample;
  for (const auto& line : lines)
    if (line.find_first_not_of(' ') != std::string::npos) text.push_back(line);
  for (size_t k = 0; k < 50; ++k) sample.push_back(text[k * text.size() / 50]);
  auto in_memory = txl::data::train_sentencepiece(cfg, sample);
  EXPECT_EQ(streamed->fingerprint(), in_memory->fingerprint());
  // Control: another sample gives another model, so the comparison can fail.
  sample[0] = "another first line, unlike the others";
  EXPECT_NE(txl::data::train_sentencepiece(cfg, sample)->fingerprint(), streamed->fingerprint());
}

TEST(Streaming, AtomicWriterPutsNothingInPlaceUntilCommitted) {
  TempDir dir;
  write_text(dir / "f", "old");
  {
    txl::fs::AtomicWriter out(dir / "f");
    out.write("new and longer");
    out.write_at(0, "NEW");
    EXPECT_EQ(txl::fs::read_file(dir / "f"), "old");
  }  // no commit: the temporary file goes
  EXPECT_EQ(txl::fs::read_file(dir / "f"), "old");
  txl::fs::AtomicWriter out(dir / "f");
  out.write("new and longer");
  out.write_at(0, "NEW");
  TXL_EXPECT_THROW_WITH(out.write_at(10, "12345"), "outside the 14 bytes");
  out.commit();
  EXPECT_EQ(txl::fs::read_file(dir / "f"), "NEW and longer");
  int files = 0;
  for ([[maybe_unused]] const auto& entry : stdfs::directory_iterator(dir.path())) ++files;
  EXPECT_EQ(files, 1);
}

}  // namespace
