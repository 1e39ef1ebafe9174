#include "txl/data/tokenizer.h"

#include <unistd.h>

#include <fstream>
#include <set>

#include "data_test_support.h"
#include "support/test_support.h"
#include "txl/util/error.h"
#include "txl/util/fs.h"

namespace {

using txl::config::SentencePieceModel;
using txl::config::TokenizerConfig;
using txl::config::TokenizerType;
using txl::data::Tokenizer;
using txl::test::TempDir;

std::vector<std::int64_t> encode_lines(const Tokenizer& tok,
                                       const std::vector<std::string>& lines) {
  std::vector<std::int64_t> ids;
  for (const auto& line : lines) {
    auto part = tok.encode(line);
    ids.insert(ids.end(), part.begin(), part.end());
    ids.push_back(tok.eos_id());
  }
  return ids;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

TokenizerConfig sp_config(SentencePieceModel model_type, int vocab) {
  TokenizerConfig cfg;
  cfg.type = TokenizerType::kSentencePiece;
  cfg.model_type = model_type;
  cfg.vocab_size = vocab;
  return cfg;
}

// --------------------------------------------------------------------- sentencepiece

class SentencePiece : public ::testing::TestWithParam<std::pair<std::string, int>> {};

// Trained on 400 KJV verses: the whole text (with eos between lines) decodes back exactly, a
// line with a character never seen maps it to <unk>, and save -> load keeps every id.
// (Subword and character models cover all the text; the word model covers only its vocabulary.)
TEST_P(SentencePiece, TrainRoundTripSaveLoad) {
  if (!txl::test::bible_available()) GTEST_SKIP() << "bible-kjv not installed";
  const auto [model_type, vocab] = GetParam();
  const bool covers_all = model_type != "word";
  auto lines = txl::test::kjv_verses(400);
  auto tok = txl::data::train_sentencepiece(
      sp_config(*txl::config::parse_enum<SentencePieceModel>(model_type), vocab), lines);
  EXPECT_EQ(tok->kind(), "sentencepiece");
  if (model_type == "char") {
    // One piece per character of the text (58 here), whatever room vocab_size leaves.
    EXPECT_GE(tok->vocab_size(), 3 + 50);
    EXPECT_LE(tok->vocab_size(), vocab);
  } else {
    EXPECT_EQ(tok->vocab_size(), vocab);
  }
  EXPECT_EQ(tok->pad_id(), 0);
  EXPECT_EQ(tok->unk_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  auto ids = encode_lines(*tok, lines);
  std::set<std::int64_t> distinct(ids.begin(), ids.end());
  EXPECT_GT(distinct.size(), 40u) << "a real vocabulary is used";
  for (auto id : ids) {
    ASSERT_GE(id, 0);
    ASSERT_LT(id, tok->vocab_size());
    if (covers_all) {
      ASSERT_NE(id, tok->unk_id());  // every character of the text is covered
    }
  }
  if (covers_all) {
    EXPECT_EQ(tok->decode(ids), joined(lines));
    // Extra spaces survive (identity normalization, whitespace kept).
    EXPECT_EQ(tok->decode(tok->encode("  And  God said ")), "  And  God said ");
    // A character the training text lacks is unknown.
    auto with_unknown = tok->encode("God #");
    EXPECT_NE(std::find(with_unknown.begin(), with_unknown.end(), tok->unk_id()),
              with_unknown.end());
  } else {
    // Frequent words round-trip; a rare name is one <unk>.
    EXPECT_EQ(tok->decode(tok->encode("And God said unto the")), "And God said unto the");
    auto rare = tok->encode("And Mahalaleel");
    ASSERT_EQ(rare.size(), 2u);
    EXPECT_EQ(rare[1], tok->unk_id());
  }

  TempDir dir;
  tok->save(dir.path());
  auto loaded = txl::data::load_tokenizer(dir.path());
  EXPECT_EQ(loaded->fingerprint(), tok->fingerprint());
  EXPECT_EQ(encode_lines(*loaded, lines), ids);
  // The saved .model file is a standard sentencepiece model, loadable by path too.
  auto by_path = txl::data::load_sentencepiece(dir / "tokenizer.model");
  EXPECT_EQ(by_path->fingerprint(), tok->fingerprint());
  EXPECT_EQ(by_path->piece(ids[0]), tok->piece(ids[0]));
}

INSTANTIATE_TEST_SUITE_P(ModelTypes, SentencePiece,
                         ::testing::Values(std::make_pair(std::string("unigram"), 200),
                                           std::make_pair(std::string("bpe"), 200),
                                           std::make_pair(std::string("char"), 100),
                                           std::make_pair(std::string("word"), 200)),
                         [](const auto& info) { return info.param.first; });

TEST(SentencePieceErrors, VocabTooLargeInvalidUtf8BadOptions) {
  if (!txl::test::bible_available()) GTEST_SKIP() << "bible-kjv not installed";
  auto lines = txl::test::kjv_verses(100);
  TXL_EXPECT_THROW_WITH(
      txl::data::train_sentencepiece(sp_config(SentencePieceModel::kUnigram, 50000), lines),
      "data.tokenizer.vocab_size 50000 does not fit this corpus");
  auto bad = lines;
  bad[2] += "\xFF";
  TXL_EXPECT_THROW_WITH(
      txl::data::train_sentencepiece(sp_config(SentencePieceModel::kUnigram, 200), bad),
      "invalid UTF-8 in the training text, line 3");
  // A model type outside the table (only a cast makes one) is refused by its number.
  TXL_EXPECT_THROW_WITH(
      txl::data::train_sentencepiece(sp_config(static_cast<SentencePieceModel>(9), 200), lines),
      "unknown data.tokenizer.model_type '9'");
  TXL_EXPECT_THROW_WITH(txl::data::load_sentencepiece("/nonexistent/m.model"),
                        "/nonexistent/m.model");
  TXL_EXPECT_THROW_WITH(txl::data::load_tokenizer("/nonexistent/tok"),
                        "no tokenizer in /nonexistent/tok");
}

// ----------------------------------------------------------------------------- byte

TEST(ByteTokenizer, ExactForAnyBytes) {
  auto tok = txl::data::make_byte_tokenizer();
  EXPECT_EQ(tok->vocab_size(), 258);
  EXPECT_EQ(tok->pad_id(), 256);
  EXPECT_EQ(tok->eos_id(), 257);
  EXPECT_EQ(tok->unk_id(), -1);
  std::string all;
  for (int b = 0; b < 256; ++b)
    if (b != '\n') all += static_cast<char>(b);  // a line never holds its newline
  auto ids = tok->encode(all);
  ASSERT_EQ(ids.size(), 255u);
  EXPECT_EQ(ids[0], 0);
  EXPECT_EQ(ids[64], 'A');  // index 64 holds byte 65: the newline was skipped
  EXPECT_EQ(ids.back(), 255);
  EXPECT_EQ(tok->decode(ids), all);
  // Lines, eos as newline, pad ignored, invalid UTF-8 kept as is.
  std::vector<std::string> lines = {"h\xC3\xA9", "\xFF\xFE", ""};
  auto multi = encode_lines(*tok, lines);
  multi.insert(multi.begin() + 1, tok->pad_id());
  EXPECT_EQ(tok->decode(multi), joined(lines));
  EXPECT_EQ(tok->piece(65), "<0x41>");
}

// ----------------------------------------------------------------------------- word

TEST(WordTokenizer, FrequencyOrderTiesAndUnknown) {
  // a x3, b x2, then c, y, z once each (ties in byte order), <unk> typed as text.
  std::vector<std::string> train = {"b a c a", "  b\ta z y <unk>", "a"};
  auto tok = txl::data::build_word_tokenizer(train, 0);
  EXPECT_EQ(tok->vocab_size(), 3 + 5);
  std::vector<std::string> expected = {"<pad>", "<unk>", "<eos>", "a", "b", "c", "y", "z"};
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_EQ(tok->piece(static_cast<std::int64_t>(i)), expected[i]);
  EXPECT_EQ(tok->encode("a b c y z"), (std::vector<std::int64_t>{3, 4, 5, 6, 7}));
  // Unseen words and the literal special words are <unk>.
  EXPECT_EQ(tok->encode("a never <unk> <eos> <pad>"), (std::vector<std::int64_t>{3, 1, 1, 1, 1}));
  // Round trip up to whitespace: words joined by one space, eos as newline.
  auto ids = encode_lines(*tok, {" b  a\t", "c"});
  EXPECT_EQ(tok->decode(ids), "b a\nc\n");

  // min_count 2 keeps a and b only.
  auto pruned = txl::data::build_word_tokenizer(train, 2);
  EXPECT_EQ(pruned->vocab_size(), 5);
  EXPECT_EQ(pruned->encode("a b c"), (std::vector<std::int64_t>{3, 4, 1}));

  // Build order does not matter: the same counts give the same ids.
  auto again = txl::data::build_word_tokenizer({"a", "z y <unk>", "b a c a b"}, 0);
  EXPECT_EQ(again->fingerprint(), tok->fingerprint());

  TempDir dir;
  tok->save(dir.path());
  auto loaded = txl::data::load_tokenizer(dir.path());
  EXPECT_EQ(loaded->kind(), "word");
  EXPECT_EQ(loaded->fingerprint(), tok->fingerprint());
  EXPECT_EQ(loaded->encode("z y a b c q"), tok->encode("z y a b c q"));
}

// A vocabulary of another program (Hugging Face's Transformer-XL: <eos> first, <unk> where its
// count put it, no <pad>) keeps its ids; padding then uses <eos>, which decoding still reads as
// the end of a line.
TEST(WordTokenizer, ForeignVocabularyKeepsItsIds) {
  using txl::data::deserialize_tokenizer;
  const std::string vocab = "<eos>\t0\nthe\t9\n<unk>\t4\nb\t1\n";
  auto parsed = txl::data::detail::parse_tokenizer("word", vocab, "hf.vocab");
  auto tok = deserialize_tokenizer("word", vocab, parsed->fingerprint(), "hf.vocab");
  EXPECT_EQ(tok->vocab_size(), 4);
  EXPECT_EQ(tok->eos_id(), 0);
  EXPECT_EQ(tok->unk_id(), 2);
  EXPECT_EQ(tok->pad_id(), 0);
  EXPECT_EQ(tok->encode("the b never <unk> <eos>"), (std::vector<std::int64_t>{1, 3, 2, 2, 2}));
  EXPECT_EQ(tok->decode({1, 3, 0, 3, 2, 0}), "the b\nb <unk>\n");
  EXPECT_EQ(tok->serialize(), vocab);
  // With a <pad> of its own, padding uses it and decoding skips it.
  auto padded =
      txl::data::detail::parse_tokenizer("word", "<eos>\t0\n<unk>\t0\nx\t1\n<pad>\t0\n", "v");
  EXPECT_EQ(padded->pad_id(), 3);
  EXPECT_EQ(padded->decode({2, 3, 2, 0}), "x x\n");
  TXL_EXPECT_THROW_WITH(txl::data::detail::parse_tokenizer("word", "<eos>\t0\nthe\t9\n", "v"),
                        "v: a word vocabulary must start with <pad>, <unk>, <eos> (txl's), or hold "
                        "<unk> and <eos>");
}

TEST(WordTokenizer, KjvRoundTrip) {
  if (!txl::test::bible_available()) GTEST_SKIP() << "bible-kjv not installed";
  auto lines = txl::test::kjv_verses(300);
  auto tok = txl::data::build_word_tokenizer(lines, 0);
  // KJV verses are single-spaced, so the word round trip is exact.
  EXPECT_EQ(tok->decode(encode_lines(*tok, lines)), joined(lines));
  // Frequency order: "the" or "and" is the most frequent word of Genesis.
  EXPECT_TRUE(tok->piece(3) == "the" || tok->piece(3) == "and") << tok->piece(3);
}

TEST(WordTokenizer, DamagedVocabularyIsDetected) {
  auto tok = txl::data::build_word_tokenizer({"a b c"}, 0);
  TempDir dir;
  tok->save(dir.path());
  txl::fs::write_atomic(dir / "tokenizer.vocab",
                        "<pad>\t0\n<unk>\t0\n<eos>\t1\nb\t1\na\t1\nc\t1\n");
  TXL_EXPECT_THROW_WITH(txl::data::load_tokenizer(dir.path()), "damaged");
  txl::fs::write_atomic(dir / "tokenizer.vocab", "<pad>\t0\n<unk>\tmany\n");
  TXL_EXPECT_THROW_WITH(txl::data::load_tokenizer(dir.path()), "tokenizer.vocab:2: bad count");
}

// ------------------------------------------------------------------------ as bytes

// A few hundred lines of English-like text (no bible-kjv needed): enough for a small model.
std::vector<std::string> small_text() {
  const char* words[] = {"the", "cat",   "sat",   "on",    "a",     "mat",   "and",
                         "dog", "ran",   "after", "it",    "while", "birds", "sang",
                         "in",  "trees", "over",  "green", "hills", "slowly"};
  std::vector<std::string> lines;
  for (int i = 0; i < 300; ++i) {
    std::string line;
    for (int w = 0; w < 6 + i % 5; ++w)
      line += std::string(w ? " " : "") + words[(i * 7 + w * 3 + w * w) % 20];
    lines.push_back(line + (i % 3 ? "." : ","));
  }
  return lines;
}

// deserialize(kind, serialize(), fingerprint) is the same tokenizer: same fingerprint, same
// ids for the text, and the bytes are what save() writes.
void expect_round_trip(const Tokenizer& tok, const std::vector<std::string>& text,
                       const char* file) {
  SCOPED_TRACE(tok.kind());
  const std::string bytes = tok.serialize();
  auto back = txl::data::deserialize_tokenizer(tok.kind(), bytes, tok.fingerprint(), "test");
  EXPECT_EQ(back->kind(), tok.kind());
  EXPECT_EQ(back->fingerprint(), tok.fingerprint());
  EXPECT_EQ(back->vocab_size(), tok.vocab_size());
  const auto ids = encode_lines(tok, text);
  EXPECT_EQ(encode_lines(*back, text), ids);
  EXPECT_EQ(back->decode(ids), tok.decode(ids));
  EXPECT_EQ(back->serialize(), bytes);
  TempDir dir;
  tok.save(dir.path());
  EXPECT_EQ(file ? txl::fs::read_file(dir / file) : std::string(), bytes);
}

TEST(SerializeTokenizer, RoundTripAllKinds) {
  const auto text = small_text();
  auto word = txl::data::build_word_tokenizer(text, 2);
  EXPECT_GT(word->vocab_size(), 20);
  expect_round_trip(*word, text, "tokenizer.vocab");
  auto byte = txl::data::make_byte_tokenizer();
  EXPECT_EQ(byte->serialize(), "");
  expect_round_trip(*byte, text, nullptr);
  auto sp = txl::data::train_sentencepiece(sp_config(SentencePieceModel::kUnigram, 50), text);
  EXPECT_EQ(sp->vocab_size(), 50);
  expect_round_trip(*sp, text, "tokenizer.model");
  // Text the model has not seen, with a character it lacks (<unk>).
  expect_round_trip(*sp, {"the green dog sang slowly #"}, "tokenizer.model");
}

TEST(SerializeTokenizer, DamagedBytesAndWrongFingerprintNameTheOrigin) {
  using txl::data::deserialize_tokenizer;
  const std::string origin = "checkpoint runs/x/checkpoint_best.pt";
  auto word = txl::data::build_word_tokenizer({"b a c a"}, 0);  // <pad> <unk> <eos> a b c
  const std::string fp = word->fingerprint();
  // Two words swapped: well-formed, but another mapping.
  TXL_EXPECT_THROW_WITH(
      deserialize_tokenizer("word", "<pad>\t0\n<unk>\t0\n<eos>\t1\nb\t1\na\t2\nc\t1\n", fp, origin),
      origin +
          ": the word tokenizer is damaged or not the expected one: its "
          "fingerprint ");
  TXL_EXPECT_THROW_WITH(
      deserialize_tokenizer("word", word->serialize(), "0123456789abcdef", origin),
      "differs from the recorded 0123456789abcdef");
  TXL_EXPECT_THROW_WITH(deserialize_tokenizer("word", "garbage", fp, origin),
                        origin + ":1: expected \"word<TAB>count\"");
  TXL_EXPECT_THROW_WITH(deserialize_tokenizer("word", "<pad>\t0\n<unk>\t-3\n", fp, origin),
                        origin + ":2: bad count '-3'");
  TXL_EXPECT_THROW_WITH(
      deserialize_tokenizer("word", "<pad>\t0\n<unk>\t0\n<eos>\t1\nt wo\t1\n", fp, origin),
      origin + ":4: a word holds whitespace");
  TXL_EXPECT_THROW_WITH(deserialize_tokenizer("word", "a\t1\n", fp, origin),
                        origin + ": a word vocabulary must start with <pad>, <unk>, <eos>");
  TXL_EXPECT_THROW_WITH(
      deserialize_tokenizer("word", "<pad>\t0\n<unk>\t0\n<eos>\t1\na\t1\na\t1\n", fp, origin),
      origin + ": the word vocabulary lists 'a' twice");

  auto sp =
      txl::data::train_sentencepiece(sp_config(SentencePieceModel::kUnigram, 50), small_text());
  const std::string model = sp->serialize();
  TXL_EXPECT_THROW_WITH(deserialize_tokenizer("sentencepiece", model.substr(0, model.size() / 2),
                                              sp->fingerprint(), origin),
                        origin);
  TXL_EXPECT_THROW_WITH(
      deserialize_tokenizer("sentencepiece", "not a model proto", sp->fingerprint(), origin),
      "cannot load sentencepiece model " + origin);
  TXL_EXPECT_THROW_WITH(deserialize_tokenizer("sentencepiece", model, fp, origin),
                        origin + ": the sentencepiece tokenizer is damaged or not the expected");
  TXL_EXPECT_THROW_WITH(deserialize_tokenizer("byte", "x", "", origin),
                        origin + ": a byte tokenizer has no data, got 1 bytes");
  TXL_EXPECT_THROW_WITH(deserialize_tokenizer("bpe", "", "", origin),
                        origin + ": unknown tokenizer kind 'bpe'");
}

// Resident memory of this process, in bytes.
std::int64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::int64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * ::sysconf(_SC_PAGESIZE);
}

// Found by fuzz_tokenizer (LeakSanitizer): a model that parses but lacks a special piece was
// refused after sentencepiece had loaded it, and the loaded processor was never freed.
TEST(SerializeTokenizer, RefusedModelIsFreed) {
  auto sp =
      txl::data::train_sentencepiece(sp_config(SentencePieceModel::kUnigram, 50), small_text());
  std::string model = sp->serialize();
  const size_t at = model.find("</s>");
  ASSERT_NE(at, std::string::npos);
  model.replace(at, 4, "<_s>");  // same length: the proto stays well-formed, eos is gone
  TXL_EXPECT_THROW_WITH(txl::data::deserialize_tokenizer("sentencepiece", model, "", "m.model"),
                        "sentencepiece model m.model has ids pad 0, unk 1, eos -1");
  auto refuse = [&](int times) {
    for (int i = 0; i < times; ++i) {
      try {
        txl::data::deserialize_tokenizer("sentencepiece", model, "", "m.model");
      } catch (const txl::Error&) {
      }
    }
  };
  refuse(300);  // allocator warm-up
  const std::int64_t before = resident_bytes();
  refuse(3000);
  // Each leaked processor held ~8 KB (24 MB for 3000); freed ones leave the memory flat.
  EXPECT_LT(resident_bytes() - before, 6 << 20) << "refused models are not freed";
}

// ---------------------------------------------------------------------- make_tokenizer

TEST(MakeTokenizer, CachedByOptionsAndTrainingText) {
  TempDir dir;
  std::vector<std::string> lines = {"one two two three three three"};
  TokenizerConfig cfg;
  cfg.type = TokenizerType::kWord;
  int builds = 0;
  const txl::data::TrainText source = [&](const txl::data::LineVisitor& visit) {
    ++builds;
    for (const auto& line : lines) visit(line);
  };
  bool reused = true;
  auto first = txl::data::make_tokenizer(cfg, source, 42, dir.path(), &reused);
  EXPECT_FALSE(reused);
  EXPECT_EQ(builds, 1);
  auto second = txl::data::make_tokenizer(cfg, source, 42, dir.path(), &reused);
  EXPECT_TRUE(reused);
  EXPECT_EQ(builds, 1) << "a cached tokenizer must not read the training text";
  EXPECT_EQ(second->fingerprint(), first->fingerprint());
  // Other training text (fingerprint) -> rebuilt.
  lines = {"four four four four"};
  auto third = txl::data::make_tokenizer(cfg, source, 43, dir.path(), &reused);
  EXPECT_FALSE(reused);
  EXPECT_EQ(builds, 2);
  EXPECT_EQ(third->piece(3), "four");
  // Other options -> rebuilt.
  cfg.min_count = 5;
  txl::data::make_tokenizer(cfg, source, 43, dir.path(), &reused);
  EXPECT_FALSE(reused);
  EXPECT_EQ(builds, 3);
  // The byte tokenizer needs no text at all.
  cfg.type = TokenizerType::kByte;
  auto byte = txl::data::make_tokenizer(cfg, source, 43, dir.path(), &reused);
  EXPECT_EQ(byte->kind(), "byte");
  EXPECT_EQ(builds, 3);
}

TEST(MakeTokenizer, OptionErrors) {
  TokenizerConfig cfg;
  cfg.type = static_cast<TokenizerType>(7);  // outside the table: only a cast makes one
  TXL_EXPECT_THROW_WITH(txl::data::tokenizer_options_key(cfg), "unknown data.tokenizer.type '7'");
  cfg.type = TokenizerType::kSentencePiece;
  cfg.model_path = "/nonexistent/sp.model";
  TXL_EXPECT_THROW_WITH(txl::data::tokenizer_options_key(cfg), "/nonexistent/sp.model");
  // Only the options that matter for the type are part of the key.
  TokenizerConfig a, b;
  a.type = b.type = TokenizerType::kByte;
  b.vocab_size = 123;
  EXPECT_EQ(txl::data::tokenizer_options_key(a), txl::data::tokenizer_options_key(b));
  a.type = b.type = TokenizerType::kSentencePiece;
  EXPECT_NE(txl::data::tokenizer_options_key(a), txl::data::tokenizer_options_key(b));
}

}  // namespace
