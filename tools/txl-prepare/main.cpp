// txl-prepare: reads a corpus, trains or loads its tokenizer and encodes the splits into the
// cache (data/README.md), then prints the statistics. A later txl-train on the same data reuses
// the cache.
//
//   txl-prepare                                        # KJV, sentencepiece unigram 8000
//   txl-prepare --corpus wikitext --path data/corpora/wikitext-103 --tokenizer word
//   txl-prepare --corpus enwik8 --path data/corpora/enwik8 --tokenizer byte

#include <fmt/core.h>
#include <CLI/CLI.hpp>

#include <exception>

#include "txl/config/config.h"
#include "txl/data/dataset.h"
#include "txl/util/error.h"
#include "txl/util/process_setup.h"

int main(int argc, char** argv) {
  txl::config::DataConfig cfg;
  auto& tok = cfg.tokenizer;
  auto& syn = cfg.synthetic;
  bool no_eos = false;
  CLI::App app{"Read a corpus, build its tokenizer and cache the encoded splits."};
  app.add_option("--corpus", cfg.corpus, "kjv | wikitext | ptb | enwik8 | text8 | text | synthetic")
      ->capture_default_str();
  app.add_option("--path", cfg.path, "corpus folder or file (kjv: empty = the bible program)");
  app.add_option("--cache-dir", cfg.cache_dir, "cache directory")->capture_default_str();
  app.add_option("--tokenizer", tok.type, "sentencepiece | byte | word")->capture_default_str();
  app.add_option("--model-path", tok.model_path,
                 "load this sentencepiece .model instead of training");
  app.add_option("--vocab-size", tok.vocab_size, "sentencepiece vocabulary size")
      ->capture_default_str();
  app.add_option("--model-type", tok.model_type, "sentencepiece: unigram | bpe | char | word")
      ->capture_default_str();
  app.add_option("--character-coverage", tok.character_coverage, "sentencepiece character coverage")
      ->capture_default_str();
  app.add_option("--user-symbols", tok.user_symbols, "sentencepiece symbols kept whole");
  app.add_option("--max-sentences", tok.max_sentences, "sentencepiece: training lines sampled")
      ->capture_default_str();
  app.add_option("--min-count", tok.min_count, "word: drop words seen fewer times")
      ->capture_default_str();
  app.add_flag("--no-eos", no_eos, "do not append <eos> after every line");
  app.add_option("--seed", syn.seed, "synthetic: generator seed")->capture_default_str();
  app.add_option("--documents", syn.documents, "synthetic: train documents")->capture_default_str();
  app.add_option("--keys", syn.keys, "synthetic: key/value pairs per document")
      ->capture_default_str();
  app.add_option("--gap", syn.gap, "synthetic: noise words between statement and recall")
      ->capture_default_str();
  app.add_option("--alphabet", syn.alphabet, "synthetic: distinct noise words")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  cfg.add_eos = !no_eos;
  txl::ProcessSetup{}.apply(argv);

  try {
    txl::data::Dataset ds = txl::data::load_dataset(cfg);
    const auto& st = ds.stats;
    fmt::print("corpus      {}\n", ds.corpus);
    fmt::print("tokenizer   {} (vocab {}, fingerprint {}) {}\n", ds.tokenizer->kind(),
               ds.tokenizer->vocab_size(), ds.tokenizer->fingerprint(),
               st.tokenizer_reused ? "from cache"
                                   : fmt::format("built in {:.1f} s", st.tokenizer_seconds));
    for (const char* name : {"train", "valid", "test"}) {
      const auto& s = ds.split(name);
      fmt::print("{:<11} {} tokens, {} bytes, {} chars, {} documents\n", name, s.ids.numel(),
                 s.n_bytes, s.n_chars, s.doc_starts.numel());
    }
    if (st.encoded_tokens > 0)
      fmt::print("encoding    {} tokens in {:.2f} s ({:.0f} tokens/s)\n", st.encoded_tokens,
                 st.encode_seconds, st.tokens_per_second());
    fmt::print("cache       {} ({})\n", st.cache_path.string(),
               st.splits_reused == 3 ? "hit"
                                     : fmt::format("rebuilt {} of 3 splits", 3 - st.splits_reused));
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", txl::error_message(e));
    return 1;
  }
}
