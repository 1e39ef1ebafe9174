#include "txl/data/corpus.h"

#include <cstdlib>
#include <numeric>

#include "data_test_support.h"
#include "support/test_support.h"
#include "txl/util/error.h"
#include "txl/util/text.h"

namespace {

using txl::config::Corpus;
using txl::data::CorpusSplit;
using txl::data::CorpusText;
using txl::data::make_corpus_reader;
using txl::test::TempDir;
using txl::test::write_text;

txl::config::DataConfig data_config(txl::config::Corpus corpus, const std::string& path) {
  txl::config::DataConfig cfg;
  cfg.corpus = corpus;
  cfg.path = path;
  return cfg;
}

std::int64_t text_bytes(const CorpusSplit& s) {
  std::int64_t n = 0;
  for (const auto& l : s.lines) n += static_cast<std::int64_t>(l.size()) + 1;
  return n;
}

// ------------------------------------------------------------------------------ helpers

TEST(Corpus, ParseVerseLineStripsReference) {
  auto v =
      txl::data::parse_verse_line("Ge1:1 In the beginning God created the heaven and the earth.");
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->book, "Ge");
  EXPECT_EQ(v->chapter, 1);
  EXPECT_EQ(v->verse, 1);
  EXPECT_EQ(v->text, "In the beginning God created the heaven and the earth.");

  v = txl::data::parse_verse_line("1Sm3:10 And the LORD came: and stood.");
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->book, "1Sm");
  EXPECT_EQ(v->chapter, 3);
  EXPECT_EQ(v->verse, 10);
  EXPECT_EQ(v->text, "And the LORD came: and stood.");

  v = txl::data::parse_verse_line("Psa119:176 I have gone astray like a lost sheep;");
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->chapter, 119);
  EXPECT_EQ(v->verse, 176);
  EXPECT_EQ(v->text, "I have gone astray like a lost sheep;");

  for (const char* bad : {"", "In the beginning", "Ge1 In", "Ge1:1", "Ge:1 x", "Ge1:x y",
                          "1:1 text", "Ge0:1 text", "Ge1:1text"}) {
    EXPECT_FALSE(txl::data::parse_verse_line(bad).has_value()) << bad;
  }
}

TEST(Corpus, SplitLinesAndCounts) {
  EXPECT_EQ(txl::data::split_lines("a\nb\n"), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(txl::data::split_lines("a\n\nb"), (std::vector<std::string>{"a", "", "b"}));
  EXPECT_TRUE(txl::data::split_lines("").empty());
  EXPECT_EQ(txl::data::count_utf8_chars("h\xC3\xA9llo \xE2\x82\xAC"), 7);  // "héllo €"
  EXPECT_FALSE(txl::util::find_invalid_utf8("h\xC3\xA9llo \xF0\x9F\x98\x80").has_value());
  EXPECT_EQ(txl::util::find_invalid_utf8("ab\xC3").value(), 2u);  // truncated sequence
  EXPECT_EQ(txl::util::find_invalid_utf8("a\xFF"
                                         "b")
                .value(),
            1u);                                                         // never valid byte
  EXPECT_EQ(txl::util::find_invalid_utf8("\xC0\xAF").value(), 0u);       // overlong '/'
  EXPECT_EQ(txl::util::find_invalid_utf8("x\xED\xA0\x80").value(), 1u);  // surrogate
}

TEST(Corpus, ByteSplitFollowsTransformerXlPreprocessing) {
  auto s = txl::data::byte_corpus_split(100000000);
  EXPECT_TRUE(s.standard);
  EXPECT_EQ(s.train_end, 90000000);
  EXPECT_EQ(s.valid_end, 95000000);
  s = txl::data::byte_corpus_split(150000000);  // the last 10M are held out, the rest trains
  EXPECT_EQ(s.train_end, 140000000);
  EXPECT_EQ(s.valid_end, 145000000);
  s = txl::data::byte_corpus_split(1000);
  EXPECT_FALSE(s.standard);
  EXPECT_EQ(s.train_end, 900);
  EXPECT_EQ(s.valid_end, 950);
}

// ---------------------------------------------------------------------------------- kjv

TEST(Corpus, KjvFromBibleProgram) {
  if (!txl::test::bible_available()) GTEST_SKIP() << "bible-kjv not installed";
  auto reader = make_corpus_reader(data_config(Corpus::kKjv, ""));
  CorpusText c = reader->read();
  // 31,102 verses in canonical order split 90/5/5.
  EXPECT_EQ(c.train.lines.size(), 27991u);
  EXPECT_EQ(c.valid.lines.size(), 1555u);
  EXPECT_EQ(c.test.lines.size(), 1556u);
  EXPECT_EQ(c.train.lines.front(), "In the beginning God created the heaven and the earth.");
  EXPECT_EQ(c.test.lines.back(), "The grace of our Lord Jesus Christ be with you all. Amen.");
  // Chapters are documents: Genesis 1 has 31 verses, so Genesis 2 starts at line 31.
  ASSERT_GE(c.train.doc_starts.size(), 2u);
  EXPECT_EQ(c.train.doc_starts[0], 0);
  EXPECT_EQ(c.train.doc_starts[1], 31);
  EXPECT_EQ(c.train.lines[31],
            "Thus the heavens and the earth were finished, and all the host of them.");
  // 1,189 chapters; valid and test each start a document at their first verse as well.
  auto starts = c.train.doc_starts.size() + c.valid.doc_starts.size() + c.test.doc_starts.size();
  EXPECT_GE(starts, 1189u);
  EXPECT_LE(starts, 1191u);
  for (const CorpusSplit* s : {&c.train, &c.valid, &c.test}) {
    EXPECT_EQ(s->doc_starts.front(), 0);
    EXPECT_TRUE(std::is_sorted(s->doc_starts.begin(), s->doc_starts.end()));
    EXPECT_EQ(s->n_bytes, text_bytes(*s));  // ASCII text + one newline a verse
    EXPECT_EQ(s->n_chars, s->n_bytes);
  }
  // No reference prefix survives.
  for (const auto& line : c.valid.lines) EXPECT_FALSE(txl::data::parse_verse_line(line)) << line;
  // The fingerprint is stable and matches the content.
  EXPECT_EQ(reader->fingerprint(),
            make_corpus_reader(data_config(Corpus::kKjv, ""))->fingerprint());
}

TEST(Corpus, KjvFromFileInBibleFormat) {
  TempDir dir;
  std::string text;
  // 20 verses: chapter 1 has 8, chapter 2 has 12.
  for (int v = 1; v <= 8; ++v)
    text += "Ge1:" + std::to_string(v) + " one " + std::to_string(v) + "\n";
  for (int v = 1; v <= 12; ++v)
    text += "Ge2:" + std::to_string(v) + " two " + std::to_string(v) + "\n";
  write_text(dir / "kjv.txt", text);
  CorpusText c = make_corpus_reader(data_config(Corpus::kKjv, (dir / "kjv.txt").string()))->read();
  ASSERT_EQ(c.train.lines.size(), 18u);
  ASSERT_EQ(c.valid.lines.size(), 1u);
  ASSERT_EQ(c.test.lines.size(), 1u);
  EXPECT_EQ(c.train.lines[0], "one 1");
  EXPECT_EQ(c.train.lines[8], "two 1");
  EXPECT_EQ(c.train.doc_starts, (std::vector<std::int64_t>{0, 8}));
  EXPECT_EQ(c.valid.lines[0], "two 11");
  EXPECT_EQ(c.test.lines[0], "two 12");
  EXPECT_EQ(c.test.doc_starts, (std::vector<std::int64_t>{0}));
}

TEST(Corpus, KjvErrors) {
  TempDir dir;
  write_text(dir / "bad.txt", "Ge1:1 fine\nthis line has no reference\n");
  TXL_EXPECT_THROW_WITH(
      make_corpus_reader(data_config(Corpus::kKjv, (dir / "bad.txt").string()))->read(), "line 2");
  // Without the bible program the message says which package to install.
  const char* old = std::getenv("PATH");
  std::string saved = old ? old : "";
  ::setenv("PATH", dir.path().c_str(), 1);
  TXL_EXPECT_THROW_WITH(make_corpus_reader(data_config(Corpus::kKjv, ""))->read(), "bible-kjv");
  ::setenv("PATH", saved.c_str(), 1);
}

// ----------------------------------------------------------------------------- wikitext

TEST(Corpus, WikitextArticlesAreDocuments) {
  TempDir dir;
  const std::string train =
      " \n"
      " = Valkyria Chronicles III = \n"
      " \n"
      " Senjō no Valkyria 3 is a game . \n"
      " \n"
      " = = Gameplay = = \n"
      " \n"
      " It is played in turns . \n"
      " \n"
      " = Tower Building = \n"
      " \n"
      " The tower is tall . \n";
  write_text(dir / "wiki.train.tokens", train);
  write_text(dir / "wiki.valid.tokens", " \n = A = \n \n text a \n");
  write_text(dir / "wiki.test.tokens", " \n = B = \n \n text b \n");
  CorpusText c = make_corpus_reader(data_config(Corpus::kWikitext, dir.path().string()))->read();
  ASSERT_EQ(c.train.lines.size(), 12u);  // every line kept, blank ones included
  EXPECT_EQ(c.train.lines[1], " = Valkyria Chronicles III = ");
  // Two articles; the section heading does not start one; the blank line before a title
  // belongs to the article it introduces.
  EXPECT_EQ(c.train.doc_starts, (std::vector<std::int64_t>{0, 8}));
  EXPECT_EQ(c.train.n_bytes, static_cast<std::int64_t>(train.size()));
  EXPECT_EQ(c.train.n_chars, static_cast<std::int64_t>(train.size()) - 1);  // "ō" is 2 bytes
  EXPECT_EQ(c.valid.doc_starts, (std::vector<std::int64_t>{0}));
  EXPECT_EQ(c.test.lines[3], " text b ");
}

TEST(Corpus, PtbOneDocumentPerSplit) {
  TempDir dir;
  write_text(dir / "ptb.train.txt", " aer banknote berlitz \n pierre <unk> N years old \n");
  write_text(dir / "ptb.valid.txt", " consumers may want \n");
  write_text(dir / "ptb.test.txt", " no it was n't black monday \n");
  CorpusText c = make_corpus_reader(data_config(Corpus::kPtb, dir.path().string()))->read();
  EXPECT_EQ(c.train.lines,
            (std::vector<std::string>{" aer banknote berlitz ", " pierre <unk> N years old "}));
  EXPECT_EQ(c.train.doc_starts, (std::vector<std::int64_t>{0}));
  EXPECT_EQ(c.train.n_bytes, 50);
  EXPECT_EQ(c.test.lines.size(), 1u);
}

TEST(Corpus, TextFolderBlankLinesSeparateDocuments) {
  TempDir dir;
  write_text(dir / "train.txt", "doc one line one\ndoc one line two\n\n\ndoc two\n\ndoc three\n");
  write_text(dir / "valid.txt", "v\n");
  write_text(dir / "test.txt", "t1\n\nt2");  // no final newline
  CorpusText c = make_corpus_reader(data_config(Corpus::kText, dir.path().string()))->read();
  EXPECT_EQ(c.train.lines, (std::vector<std::string>{"doc one line one", "doc one line two",
                                                     "doc two", "doc three"}));
  EXPECT_EQ(c.train.doc_starts, (std::vector<std::int64_t>{0, 2, 3}));
  EXPECT_EQ(c.test.lines, (std::vector<std::string>{"t1", "t2"}));
  EXPECT_EQ(c.test.doc_starts, (std::vector<std::int64_t>{0, 1}));
  EXPECT_EQ(c.test.n_bytes, 6);
}

// PG-19's layout: a book a document, books in the order of their numeric ids, validation/ as
// valid, counts of the books' bytes and characters; the fingerprint follows the books' bytes and
// the split they are in.
TEST(Corpus, Pg19BooksAreDocumentsInTheOrderOfTheirIds) {
  TempDir dir;
  for (const char* split : {"train", "validation", "test"}) {
    std::filesystem::create_directories(dir / split);
  }
  write_text(dir / "train" / "10.txt", "Ten, line one\nline two\n");
  write_text(dir / "train" / "9.txt", "Nine\n");
  write_text(dir / "train" / "100.txt", "Caf\xc3\xa9 hundred");  // no final newline
  write_text(dir / "train" / "notes.md", "not a book");
  write_text(dir / "validation" / "7.txt", "Seven\n\nafter a blank line\n");
  write_text(dir / "test" / "3.txt", "Three\n");
  write_text(dir / "metadata.csv", "_id,short_book_title,publication_date,url\n");
  auto reader = make_corpus_reader(data_config(Corpus::kPg19, dir.path().string()));
  CorpusText c = reader->read();
  EXPECT_EQ(c.name, "pg19");
  EXPECT_EQ(c.train.lines,
            (std::vector<std::string>{"Nine", "Ten, line one", "line two", "Caf\xc3\xa9 hundred"}));
  EXPECT_EQ(c.train.doc_starts, (std::vector<std::int64_t>{0, 1, 3}));
  EXPECT_EQ(c.train.n_bytes, 5 + 23 + 13);
  EXPECT_EQ(c.train.n_chars, 5 + 23 + 12);
  EXPECT_EQ(c.valid.lines, (std::vector<std::string>{"Seven", "", "after a blank line"}));
  EXPECT_EQ(c.valid.doc_starts, (std::vector<std::int64_t>{0}));
  EXPECT_EQ(c.test.lines, (std::vector<std::string>{"Three"}));
  const auto before = reader->fingerprint();
  write_text(dir / "test" / "3.txt", "Three!\n");
  EXPECT_NE(reader->fingerprint(), before);
  write_text(dir / "test" / "3.txt", "Three\n");
  EXPECT_EQ(reader->fingerprint(), before);
  std::filesystem::rename(dir / "train" / "9.txt", dir / "test" / "9.txt");
  EXPECT_NE(reader->fingerprint(), before);
}

// A folder without a split, a split without books, an empty book and invalid UTF-8: one line
// naming the folder or file.
TEST(Corpus, Pg19MalformedInputIsAClearError) {
  TempDir dir;
  auto read = [&] {
    return make_corpus_reader(data_config(Corpus::kPg19, dir.path().string()))->read();
  };
  std::filesystem::create_directories(dir / "train");
  std::filesystem::create_directories(dir / "test");
  write_text(dir / "train" / "1.txt", "One\n");
  write_text(dir / "test" / "2.txt", "Two\n");
  TXL_EXPECT_THROW_WITH(read(), (dir / "validation").string() + " is missing");
  std::filesystem::create_directories(dir / "validation");
  TXL_EXPECT_THROW_WITH(read(), (dir / "validation").string() + " holds no <id>.txt book");
  write_text(dir / "validation" / "5.txt", "\n \n");
  TXL_EXPECT_THROW_WITH(
      read(), (dir / "validation" / "5.txt").string() + " holds only blank lines (an empty book)");
  write_text(dir / "validation" / "5.txt", "");
  TXL_EXPECT_THROW_WITH(read(), (dir / "validation" / "5.txt").string() + " is empty");
  write_text(dir / "validation" / "5.txt", "Fine\nthen \xff here\n");
  TXL_EXPECT_THROW_WITH(read(), (dir / "validation" / "5.txt").string() +
                                    " is not UTF-8 (an invalid byte at offset 10)");
  TXL_EXPECT_THROW_WITH(make_corpus_reader(data_config(Corpus::kPg19, "")), "needs data.path");
}

// The books corpus is the same layout under its own name (its cache folder and fingerprint
// differ from pg19's), read from data/corpora/books unless data.path says otherwise; a missing
// folder says how to build it.
TEST(Corpus, BooksReadsTheBuiltFolder) {
  TempDir dir;
  for (const char* split : {"train", "validation", "test"})
    std::filesystem::create_directories(dir / split);
  write_text(dir / "train" / "austen-emma.txt", "EMMA\n\nBy Jane Austen\n");
  write_text(dir / "train" / "kjv-01-ge.txt", "In the beginning\n");
  write_text(dir / "validation" / "austen-persuasion.txt", "Persuasion\n");
  write_text(dir / "test" / "shakespeare-hamlet.txt", "HAMLET\n");
  auto books = make_corpus_reader(data_config(Corpus::kBooks, dir.path().string()));
  auto pg19 = make_corpus_reader(data_config(Corpus::kPg19, dir.path().string()));
  CorpusText c = books->read();
  EXPECT_EQ(c.name, "books");
  EXPECT_EQ(c.train.lines,
            (std::vector<std::string>{"EMMA", "", "By Jane Austen", "In the beginning"}));
  EXPECT_EQ(c.train.doc_starts, (std::vector<std::int64_t>{0, 3}));
  EXPECT_EQ(c.valid.lines, (std::vector<std::string>{"Persuasion"}));
  EXPECT_NE(books->fingerprint(), pg19->fingerprint());
  EXPECT_NE(books->source_key(), pg19->source_key());
  TempDir elsewhere;
  const auto cwd = std::filesystem::current_path();
  std::filesystem::current_path(elsewhere.path());
  std::string message;
  try {
    make_corpus_reader(data_config(Corpus::kBooks, ""))->read();
  } catch (const txl::Error& e) {
    message = e.what();
  }
  std::filesystem::current_path(cwd);
  EXPECT_NE(message.find("data/corpora/books/train is missing"), std::string::npos) << message;
  EXPECT_NE(message.find("tools/books.py"), std::string::npos) << message;
}

// ------------------------------------------------------------------------- byte corpora

TEST(Corpus, Enwik8SmallFileSplitsByFraction) {
  TempDir dir;
  std::string text;
  int page = 0;
  while (text.size() < 2000) {
    text += "  <page>\n    <title>Page " + std::to_string(page++) + "</title>\n";
    text += "    <text>Some \xC3\xA9 text &amp; more</text>\n  </page>\n";
  }
  write_text(dir / "enwik8", text);
  // data.path may name the folder or the file itself.
  for (const auto& path : {dir.path().string(), (dir / "enwik8").string()}) {
    CorpusText c = make_corpus_reader(data_config(Corpus::kEnwik8, path))->read();
    const auto n = static_cast<std::int64_t>(text.size());
    EXPECT_EQ(c.train.n_bytes, n * 90 / 100);
    EXPECT_EQ(c.valid.n_bytes, n * 5 / 100);
    EXPECT_EQ(c.train.n_bytes + c.valid.n_bytes + c.test.n_bytes, n);
    // Joining the lines back gives the split's bytes exactly.
    std::string train;
    for (size_t i = 0; i < c.train.lines.size(); ++i) train += (i ? "\n" : "") + c.train.lines[i];
    EXPECT_EQ(train, text.substr(0, static_cast<size_t>(n * 90 / 100)));
    // Every "<page>" line starts a document.
    ASSERT_GT(c.train.doc_starts.size(), 5u);
    for (size_t d = 1; d < c.train.doc_starts.size(); ++d)
      EXPECT_EQ(c.train.lines[static_cast<size_t>(c.train.doc_starts[d])], "  <page>");
  }
}

TEST(Corpus, Text8IsOneLinePerSplit) {
  TempDir dir;
  std::string text;
  for (int i = 0; text.size() < 1000; ++i) text += " anarchism originated as a term";
  text.resize(1000);
  write_text(dir / "text8", text);
  CorpusText c = make_corpus_reader(data_config(Corpus::kText8, dir.path().string()))->read();
  ASSERT_EQ(c.train.lines.size(), 1u);
  EXPECT_EQ(c.train.lines[0], text.substr(0, 900));
  EXPECT_EQ(c.valid.lines[0], text.substr(900, 50));
  EXPECT_EQ(c.test.lines[0], text.substr(950));
  EXPECT_EQ(c.test.n_chars, 50);
}

// ------------------------------------------------------------------------------- errors

TEST(Corpus, MissingEmptyAndUnknownAreClearErrors) {
  TempDir dir;
  // Missing file: names the path and the README.
  TXL_EXPECT_THROW_WITH(make_corpus_reader(data_config(Corpus::kPtb, dir.path().string()))->read(),
                        (dir / "ptb.train.txt").string());
  TXL_EXPECT_THROW_WITH(
      make_corpus_reader(data_config(Corpus::kWikitext, dir.path().string()))->read(),
      "data/README.md");
  TXL_EXPECT_THROW_WITH(
      make_corpus_reader(data_config(Corpus::kEnwik8, dir.path().string()))->fingerprint(),
      "enwik8");
  // Empty file.
  write_text(dir / "train.txt", "");
  write_text(dir / "valid.txt", "v\n");
  write_text(dir / "test.txt", "t\n");
  TXL_EXPECT_THROW_WITH(make_corpus_reader(data_config(Corpus::kText, dir.path().string()))->read(),
                        "is empty");
  // No path where one is needed, unknown corpus.
  TXL_EXPECT_THROW_WITH(make_corpus_reader(data_config(Corpus::kWikitext, "")), "data.path");
  TXL_EXPECT_THROW_WITH(make_corpus_reader(data_config(static_cast<txl::config::Corpus>(99), "x")),
                        "kjv, wikitext, ptb");
}

TEST(Corpus, FingerprintFollowsBytes) {
  TempDir dir;
  write_text(dir / "train.txt", "a\n");
  write_text(dir / "valid.txt", "b\n");
  write_text(dir / "test.txt", "c\n");
  auto reader = make_corpus_reader(data_config(Corpus::kText, dir.path().string()));
  auto before = reader->fingerprint();
  EXPECT_EQ(before, reader->fingerprint());
  write_text(dir / "test.txt", "d\n");
  EXPECT_NE(before, reader->fingerprint());
}

}  // namespace
