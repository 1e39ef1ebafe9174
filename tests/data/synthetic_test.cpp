#include "txl/data/synthetic.h"

#include <map>
#include <set>
#include <sstream>

#include "support/test_support.h"
#include "txl/data/tokenizer.h"

namespace {

using txl::config::SyntheticConfig;
using txl::data::generate_synthetic_corpus;
using txl::data::generate_synthetic_documents;

std::vector<std::string> words_of(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

SyntheticConfig small_config() {
  SyntheticConfig cfg;
  cfg.seed = 11;
  cfg.documents = 50;
  cfg.keys = 5;
  cfg.gap = 70;
  cfg.alphabet = 9;
  return cfg;
}

TEST(Synthetic, SameSeedSameBytesOtherSeedOtherBytes) {
  auto a = generate_synthetic_corpus(small_config());
  auto b = generate_synthetic_corpus(small_config());
  EXPECT_EQ(a.train.lines, b.train.lines);
  EXPECT_EQ(a.valid.lines, b.valid.lines);
  EXPECT_EQ(a.test.lines, b.test.lines);
  auto cfg = small_config();
  cfg.seed = 12;
  auto c = generate_synthetic_corpus(cfg);
  EXPECT_NE(a.train.lines, c.train.lines);
  // The splits are different text, not copies of each other.
  EXPECT_NE(std::vector<std::string>(a.train.lines.begin(), a.train.lines.begin() + 5),
            std::vector<std::string>(a.valid.lines.begin(), a.valid.lines.begin() + 5));
  // Pinned bytes: the generator is the same on every platform and in every future build (a
  // change here invalidates every cached synthetic corpus and published result).
  EXPECT_EQ(a.train.lines[0], "k0 = v63 ; k3 = v20 ; k2 = v50 ; k1 = v26 ; k4 = v40 ;");
}

TEST(Synthetic, QueriesRecallTheStatedValues) {
  const auto cfg = small_config();
  for (const char* split : {"train", "valid", "test"}) {
    auto docs = generate_synthetic_documents(cfg, split);
    EXPECT_EQ(static_cast<std::int64_t>(docs.size()), split[0] == 't' && split[1] == 'r' ? 50 : 5);
    for (const auto& doc : docs) {
      // Parse the statement line back from the text alone.
      auto statement = words_of(doc.lines.front());
      ASSERT_EQ(statement.size(), static_cast<size_t>(4 * cfg.keys));
      std::map<std::string, std::string> stated;
      for (size_t i = 0; i < statement.size(); i += 4) {
        EXPECT_EQ(statement[i + 1], "=");
        EXPECT_EQ(statement[i + 3], ";");
        EXPECT_TRUE(stated.emplace(statement[i], statement[i + 2]).second) << "key stated twice";
      }
      EXPECT_EQ(stated.size(), static_cast<size_t>(cfg.keys));
      // Noise: exactly `gap` words from the alphabet.
      int noise = 0;
      for (size_t l = 1; l + 1 < doc.lines.size(); ++l) {
        auto words = words_of(doc.lines[l]);
        EXPECT_LE(words.size(), static_cast<size_t>(txl::data::kNoiseWordsPerLine));
        for (const auto& w : words) {
          ASSERT_EQ(w[0], 'n');
          EXPECT_LT(std::stoi(w.substr(1)), cfg.alphabet);
        }
        noise += static_cast<int>(words.size());
      }
      EXPECT_EQ(noise, cfg.gap);
      // Queries: every key once, each followed by exactly the stated value.
      auto queries = words_of(doc.lines.back());
      ASSERT_EQ(queries.size(), static_cast<size_t>(3 * cfg.keys));
      std::set<std::string> asked;
      for (size_t i = 0; i < queries.size(); i += 3) {
        EXPECT_EQ(queries[i], "?");
        EXPECT_EQ(queries[i + 2], stated.at(queries[i + 1])) << "recalled value differs";
        asked.insert(queries[i + 1]);
      }
      EXPECT_EQ(asked.size(), static_cast<size_t>(cfg.keys));
      // The ground truth agrees with the text.
      for (int k = 0; k < cfg.keys; ++k)
        EXPECT_EQ(stated.at("k" + std::to_string(k)), "v" + std::to_string(doc.values[k]));
    }
  }
}

TEST(Synthetic, OneWordOneTokenAndDocumentsMarked) {
  auto cfg = small_config();
  auto corpus = generate_synthetic_corpus(cfg);
  auto tok = txl::data::build_word_tokenizer(corpus.train.lines, 0);
  // <pad> <unk> <eos>, "=", ";", "?", keys, at most 64 values, noise words.
  EXPECT_LE(tok->vocab_size(), 3 + 3 + cfg.keys + txl::data::kSyntheticValues + cfg.alphabet);
  for (const auto& line : corpus.valid.lines) {
    auto ids = tok->encode(line);
    EXPECT_EQ(ids.size(), words_of(line).size()) << line;
    for (auto id : ids) EXPECT_NE(id, tok->unk_id()) << line;
  }
  // A document is statement + ceil(gap / 32) noise lines + queries.
  const size_t per_doc =
      2 + (cfg.gap + txl::data::kNoiseWordsPerLine - 1) / txl::data::kNoiseWordsPerLine;
  ASSERT_EQ(corpus.train.doc_starts.size(), 50u);
  for (size_t d = 0; d < 50; ++d)
    EXPECT_EQ(corpus.train.doc_starts[d], static_cast<std::int64_t>(d * per_doc));
  EXPECT_EQ(corpus.train.lines.size(), 50 * per_doc);
  std::int64_t bytes = 0;
  for (const auto& l : corpus.train.lines) bytes += static_cast<std::int64_t>(l.size()) + 1;
  EXPECT_EQ(corpus.train.n_bytes, bytes);
}

TEST(Synthetic, RecallMaskMarksExactlyTheValueTokens) {
  auto cfg = small_config();
  auto docs = generate_synthetic_documents(cfg, "valid");
  auto corpus = generate_synthetic_corpus(cfg);
  auto tok = txl::data::build_word_tokenizer(corpus.train.lines, 0);
  std::vector<std::int64_t> ids;
  for (const auto& line : corpus.valid.lines) {
    auto part = tok->encode(line);
    ids.insert(ids.end(), part.begin(), part.end());
    ids.push_back(tok->eos_id());
  }
  auto ids_t = torch::tensor(ids, torch::kLong);
  auto mask = txl::data::synthetic_recall_mask(ids_t, *tok);
  ASSERT_EQ(mask.sum().item<std::int64_t>(), static_cast<std::int64_t>(docs.size()) * cfg.keys);
  // The marked tokens, in order, are the values of the queries, in query order.
  auto marked = ids_t.masked_select(mask);
  std::int64_t i = 0;
  for (const auto& doc : docs)
    for (int k : doc.query_order)
      EXPECT_EQ(tok->piece(marked[i++].item<std::int64_t>()), "v" + std::to_string(doc.values[k]));
  TXL_EXPECT_THROW_WITH(txl::data::synthetic_recall_mask(ids_t, *txl::data::make_byte_tokenizer()),
                        "word");
}

TEST(Synthetic, BadConfigNamesTheKey) {
  auto cfg = small_config();
  cfg.keys = 0;
  TXL_EXPECT_THROW_WITH(generate_synthetic_corpus(cfg), "data.synthetic.keys");
  cfg = small_config();
  cfg.gap = -1;
  TXL_EXPECT_THROW_WITH(generate_synthetic_corpus(cfg), "data.synthetic.gap");
  cfg = small_config();
  cfg.alphabet = 0;
  TXL_EXPECT_THROW_WITH(generate_synthetic_corpus(cfg), "data.synthetic.alphabet");
}

}  // namespace
