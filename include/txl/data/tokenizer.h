#pragma once
// Tokenizers: text <-> token ids. Three kinds behind one interface:
//
//   sentencepiece  unigram | bpe | char | word model trained on the train split (or loaded from
//                  a .model file); ids pad 0, unk 1, eos 2, no bos
//   byte           the enwik8 convention: id = byte value (0..255), pad 256, eos 257; decoding is
//                  exact for any byte string, no unknown token
//   word           whitespace-separated words of the train split: pad 0, <unk> 1, <eos> 2, then
//                  words by descending frequency (ties: byte-wise ascending), which is the order
//                  adaptive softmax cutoffs assume
//
// encode() works on one line (no newline, no eos added); the caller appends eos_id() per line.
// decode() writes eos as '\n' and skips pad. Encoding is thread-safe (const).

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "txl/config/config.h"

namespace txl::data {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::string kind() const = 0;  // "sentencepiece" | "byte" | "word"
  virtual std::vector<std::int64_t> encode(std::string_view text) const = 0;
  virtual std::string decode(const std::vector<std::int64_t>& ids) const = 0;
  virtual std::int64_t vocab_size() const = 0;
  virtual std::int64_t pad_id() const = 0;
  virtual std::int64_t eos_id() const = 0;
  virtual std::int64_t unk_id() const = 0;  // -1 when every input is representable (byte)
  // The text of one id (a sentencepiece piece, a word, "<0x41>" for a byte), for inspection.
  virtual std::string piece(std::int64_t id) const = 0;
  // Identifies the exact mapping (16 hex digits of a hash of the model/vocabulary): equal
  // fingerprints encode identically. Encoded caches record it.
  virtual std::string fingerprint() const = 0;
  // Writes the tokenizer into `dir` (tokenizer.meta plus tokenizer.model or tokenizer.vocab),
  // atomically file by file.
  virtual void save(const std::filesystem::path& dir) const = 0;
  // The tokenizer as self-contained bytes, e.g. for a checkpoint: the sentencepiece model proto
  // (the .model file), the word vocabulary text ("word<TAB>count" lines, tokenizer.vocab), empty
  // for byte. deserialize_tokenizer(kind(), serialize(), fingerprint(), ...) rebuilds it.
  virtual std::string serialize() const = 0;
};

// The tokenizer of kind `kind` ("sentencepiece" | "byte" | "word") from Tokenizer::serialize
// bytes, checked against `expected_fingerprint`. Throws txl::Error naming `origin` (a file or
// "checkpoint runs/x/checkpoint_best.safetensors") for an unknown kind, malformed bytes or a
// fingerprint mismatch; never crashes on arbitrary bytes (fuzzed: tests/fuzz/fuzz_tokenizer.cpp).
std::shared_ptr<Tokenizer> deserialize_tokenizer(const std::string& kind, std::string_view bytes,
                                                 const std::string& expected_fingerprint,
                                                 const std::string& origin);

// Loads a tokenizer saved by Tokenizer::save (through deserialize_tokenizer). Throws txl::Error
// naming the directory when it holds none, or the file of a damaged one.
std::shared_ptr<Tokenizer> load_tokenizer(const std::filesystem::path& dir);

namespace detail {
// deserialize_tokenizer without the fingerprint comparison: the fuzz target uses it to reach
// encode() on whatever parses. Everything else goes through deserialize_tokenizer.
std::shared_ptr<Tokenizer> parse_tokenizer(const std::string& kind, std::string_view bytes,
                                           const std::string& origin);
}  // namespace detail

// ----------------------------------------------------------------------------- building
// The training text, line by line: train_text(visit) calls visit on every line of the train
// split in order, reading the text anew each time it is called, so that a tokenizer is built
// from a corpus of any size holding only what it keeps (word counts, a bounded sample).
using LineVisitor = std::function<void(std::string_view line)>;
using TrainText = std::function<void(const LineVisitor& visit)>;

// Trains a sentencepiece model on a sample of the training text with cfg's options (vocab_size,
// model_type, character_coverage, user_symbols, max_sentences: of more non-blank lines, that many
// are taken at an even stride, in two passes over the text, so that memory holds the sample
// alone). Training output is kept off the terminal; progress is logged under [data]. Throws
// txl::Error for invalid UTF-8 (naming the line), a vocab_size the text cannot support, bad
// options.
std::shared_ptr<Tokenizer> train_sentencepiece(const config::TokenizerConfig& cfg,
                                               const TrainText& train_text);
std::shared_ptr<Tokenizer> train_sentencepiece(const config::TokenizerConfig& cfg,
                                               const std::vector<std::string>& train_lines);

// Loads a sentencepiece .model file (cfg.model_path). The model must use pad 0, unk 1, eos 2
// like the ones txl trains; another id layout is a txl::Error saying so.
std::shared_ptr<Tokenizer> load_sentencepiece(const std::filesystem::path& model_path);

// The byte tokenizer (nothing to learn).
std::shared_ptr<Tokenizer> make_byte_tokenizer();

// Builds a word vocabulary from `train_lines` (split at ASCII whitespace); words seen fewer
// than min_count times map to <unk>. A literal "<unk>" in the text (PTB, WikiText) is <unk>.
// One pass over the text; memory holds the vocabulary's counts.
std::shared_ptr<Tokenizer> build_word_tokenizer(const TrainText& train_text, int min_count);
std::shared_ptr<Tokenizer> build_word_tokenizer(const std::vector<std::string>& train_lines,
                                                int min_count);

// The lines of a vector as a TrainText.
TrainText lines_text(const std::vector<std::string>& lines);

// A string of the options that change what cfg builds (only those relevant to cfg.type), for
// cache keys. Throws txl::Error for an unknown type or sentencepiece model_type.
std::string tokenizer_options_key(const config::TokenizerConfig& cfg);

// The tokenizer cfg describes, cached in `dir`: when `dir` holds one saved from the same
// options and the same training text (`train_fingerprint`), it is loaded; otherwise it is built
// from train_text (read only then) and saved there. `reused` (optional) tells which.
std::shared_ptr<Tokenizer> make_tokenizer(const config::TokenizerConfig& cfg,
                                          const TrainText& train_text,
                                          std::uint64_t train_fingerprint,
                                          const std::filesystem::path& dir, bool* reused = nullptr);

// The tokenizer make_tokenizer would reuse from `dir` (saved there from the same options and
// training text), or nullptr with `why` saying why not: empty when `dir` holds none, else e.g.
// "tokenizer in DIR is stale (options changed)". Writes nothing.
std::shared_ptr<Tokenizer> find_cached_tokenizer(const config::TokenizerConfig& cfg,
                                                 std::uint64_t train_fingerprint,
                                                 const std::filesystem::path& dir,
                                                 std::string* why = nullptr);

// Convenience: the same with the training text at hand (its fingerprint is computed).
std::shared_ptr<Tokenizer> make_tokenizer(const config::TokenizerConfig& cfg,
                                          const std::vector<std::string>& train_lines,
                                          const std::filesystem::path& dir);

// Fingerprint of lines as they would be written to a file (each followed by '\n').
std::uint64_t fingerprint_lines(const std::vector<std::string>& lines);

}  // namespace txl::data
