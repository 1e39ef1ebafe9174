#pragma once
// Corpus readers: raw text in, three splits of lines out. One interface, one reader per corpus,
// picked by config::DataConfig::corpus. Readers know file layouts and split rules
// (data/README.md); they know nothing about tokens.
//
//   kjv        `bible -f Gen1:1-Rev22:21` (bible-kjv), one verse a line, chapters as documents,
//              first 90% / next 5% / last 5% of verses (in canonical order) = train/valid/test
//   wikitext   <path>/wiki.{train,valid,test}.tokens (WikiText-2 and -103), articles as documents
//   ptb        <path>/ptb.{train,valid,test}.txt, one document per split
//   enwik8     <path>/enwik8 raw bytes: last 5M bytes test, the 5M before valid, the rest train
//   text8      <path>/text8: same split as enwik8
//   text       <path>/{train,valid,test}.txt, blank lines separate documents
//   pg19       <path>/{train,validation,test}/<id>.txt (DeepMind's PG-19 layout), one book a
//              document, books in the order of their ids
//   synthetic  generated long-range recall corpus (synthetic.h)

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "txl/config/config.h"

namespace txl::data {

// One split of a corpus: its text as lines and where its documents start.
struct CorpusSplit {
  std::vector<std::string> lines;        // the text, one line each, without the newline
  std::vector<std::int64_t> doc_starts;  // line indices where documents start; sorted, first 0
  std::int64_t n_bytes = 0;  // UTF-8 bytes of the original text of this split (bits per byte)
  std::int64_t n_chars = 0;  // characters (UTF-8 code points) of the same text (bits per char)
  // Whether each line's end counts as a word for word-level perplexity (WikiText and PTB, whose
  // published word-level figures score the <eos> of every line as a word; see count_words).
  bool line_end_is_word = false;
};

// 0, 1 and 2 for the splits "train", "valid" and "test"; throws txl::Error naming any other.
int split_index(std::string_view split);

// The three splits of a corpus.
struct CorpusText {
  std::string name;  // corpus name, e.g. "kjv"
  CorpusSplit train, valid, test;
  const CorpusSplit& split(std::string_view split_name) const;  // "train" | "valid" | "test"
  CorpusSplit& split(std::string_view split_name);
};

// Receives a split piece by piece (CorpusReader::read_split): each chunk holds whole lines in
// text order; its doc_starts are the line indices within the chunk where a document starts (a
// chunk that goes on with the previous chunk's document has none at 0); its n_bytes and n_chars
// count the text its lines stand for, so that the chunks' counts add up to the split's.
using ChunkSink = std::function<void(CorpusSplit&& chunk)>;

class CorpusReader {
 public:
  virtual ~CorpusReader() = default;
  // The corpus name ("kjv", "wikitext", ...).
  virtual std::string name() const = 0;
  // What the corpus is, for naming its cache directory: name, resolved path, generator options.
  virtual std::string source_key() const = 0;
  // Fingerprint of the source bytes. Cheaper than read(): no splitting into lines, so a run
  // whose caches are valid never pays for read().
  virtual std::uint64_t fingerprint() const = 0;
  // Reads one split ("train" | "valid" | "test") and hands it to `sink` in chunks of whole lines
  // of about chunk_bytes each, so that memory holds one chunk at a time, however large the
  // corpus. Corpora that are small by nature (kjv, synthetic) come as one chunk. Throws txl::Error
  // naming the missing, empty, malformed or unreadable file and pointing at data/README.md.
  virtual void read_split(std::string_view split, std::int64_t chunk_bytes,
                          const ChunkSink& sink) const = 0;
  // The whole corpus in memory: each split's chunks joined.
  CorpusText read() const;
};

// The reader of cfg.corpus, reading cfg.path (cfg.synthetic for synthetic). Throws txl::Error
// listing the known corpora for a value outside config::Corpus's table.
std::unique_ptr<CorpusReader> make_corpus_reader(const config::DataConfig& cfg);

// ---------------------------------------------------------------------------- helpers
// One line of `bible -f` output, e.g. "1Sm3:10 And the LORD came, ...".
struct VerseLine {
  std::string_view book;  // "1Sm"
  int chapter = 0;        // 3
  int verse = 0;          // 10
  std::string_view text;  // "And the LORD came, ..."
};

// Parses the reference prefix ("Ge1:1 ") off a bible-kjv line; nullopt when the line has none.
std::optional<VerseLine> parse_verse_line(std::string_view line);

// Splits text into lines at '\n' (a final line without newline counts; no empty line after
// a final newline).
std::vector<std::string> split_lines(std::string_view text);

// Number of UTF-8 code points (bytes that are not continuation bytes).
std::int64_t count_utf8_chars(std::string_view text);

// Words of a text for word-level perplexity, counted as PG-19's and WikiText's figures count
// them: maximal runs of bytes that are not ASCII whitespace (space, \t, \n, \v, \f, \r), so
// "don't," is one word and punctuation set apart by spaces (WikiText's " , ") is a word of its
// own. A split's word count adds one word per line where CorpusSplit::line_end_is_word and eos
// tokens are added (WikiText's and PTB's <eos>); data/README.md writes the rule down.
std::int64_t count_words(std::string_view text);

// Byte ranges [begin, end) of train/valid/test for a raw byte corpus of `size` bytes, as in the
// Transformer-XL preprocessing of enwik8/text8: the last 5,000,000 bytes are test, the 5,000,000
// before are valid, the rest is train. Corpora under 100,000,000 bytes split 90%/5%/5% instead.
struct ByteSplit {
  std::int64_t train_end, valid_end, size;
  bool standard;  // true when the 5M/5M rule applied
};
ByteSplit byte_corpus_split(std::int64_t size);

}  // namespace txl::data
