#include "txl/data/tokenizer.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <deque>
#include <sstream>
#include <thread>
#include <unordered_map>

#include "spm_library.h"
#include "tokenizer_meta.h"
#include "txl/data/corpus.h"
#include "txl/util/error.h"
#include "txl/util/fs.h"
#include "txl/util/log.h"
#include "txl/util/text.h"

namespace txl::data {

namespace stdfs = std::filesystem;

namespace {

using spm::append_bytes;

constexpr int kMetaFormat = 1;

using detail::format_meta;
using detail::kMetaFile;
using detail::Meta;
using detail::parse_meta;

void save_meta(const stdfs::path& dir, const std::string& kind, const std::string& fingerprint) {
  fs::write_atomic(dir / kMetaFile, format_meta({{"kind", kind},
                                                 {"format", std::to_string(kMetaFormat)},
                                                 {"fingerprint", fingerprint}}));
}

// Decodes ids as lines: eos ends a line, pad is skipped, each run between eos is decoded by
// `decode_run`.
template <typename DecodeRun>
std::string decode_lines(const std::vector<std::int64_t>& ids, std::int64_t eos, std::int64_t pad,
                         DecodeRun decode_run) {
  std::string out;
  std::vector<std::int64_t> run;
  for (std::int64_t id : ids) {
    if (id == pad && pad != eos) continue;  // a vocabulary without <pad> pads with <eos>
    if (id == eos) {
      out += decode_run(run);
      out += '\n';
      run.clear();
    } else {
      run.push_back(id);
    }
  }
  out += decode_run(run);
  return out;
}

class SentencePieceTokenizer : public Tokenizer {
 public:
  // Takes a serialized ModelProto (the bytes of a .model file).
  SentencePieceTokenizer(std::string serialized, const std::string& origin)
      : serialized_(std::move(serialized)) {
    std::string error;
    const spm::Library& lib = spm::library();
    TXL_CHECK(
        lib.load(serialized_.data(), serialized_.size(), &handle_.ptr, append_bytes, &error) == 0,
        "cannot load sentencepiece model ", origin, ": ", error);
    const int pad = lib.special_id(handle_, 0), unk = lib.special_id(handle_, 1),
              eos = lib.special_id(handle_, 2);
    TXL_CHECK(pad == 0 && unk == 1 && eos == 2, "sentencepiece model ", origin, " has ids pad ",
              pad, ", unk ", unk, ", eos ", eos, "; txl needs pad 0, unk 1, eos 2 (train it with ",
              "--pad_id=0 --unk_id=1 --eos_id=2 --bos_id=-1, or leave data.tokenizer.model_path ",
              "empty to let txl train one)");
    vocab_size_ = lib.piece_size(handle_);
    fingerprint_ = fs::hex64(fs::fnv1a(serialized_));
  }
  SentencePieceTokenizer(const SentencePieceTokenizer&) = delete;
  SentencePieceTokenizer& operator=(const SentencePieceTokenizer&) = delete;

  std::string kind() const override { return "sentencepiece"; }

  std::vector<std::int64_t> encode(std::string_view text) const override {
    auto bad = util::find_invalid_utf8(text);
    TXL_CHECK(!bad.has_value(), "invalid UTF-8 at byte ", bad.value_or(0) + 1,
              " of the text to encode; sentencepiece needs UTF-8 (use tokenizer type byte for ",
              "arbitrary bytes)");
    std::vector<std::int64_t> ids;
    std::string error;
    auto sink = [](void* ctx, const int* data, std::size_t n) {
      static_cast<std::vector<std::int64_t>*>(ctx)->assign(data, data + n);
    };
    TXL_CHECK(spm::library().encode(handle_, text.data(), text.size(), sink, &ids, append_bytes,
                                    &error) == 0,
              "sentencepiece encode failed: ", error);
    return ids;
  }

  std::string decode(const std::vector<std::int64_t>& ids) const override {
    return decode_lines(ids, eos_id(), pad_id(), [this](const std::vector<std::int64_t>& run) {
      std::vector<int> ints;
      ints.reserve(run.size());
      for (auto id : run) {
        TXL_CHECK(id >= 0 && id < vocab_size_, "token id ", id, " outside the vocabulary [0, ",
                  vocab_size_, ")");
        ints.push_back(static_cast<int>(id));
      }
      std::string text, error;
      TXL_CHECK(spm::library().decode(handle_, ints.data(), ints.size(), append_bytes, &text,
                                      append_bytes, &error) == 0,
                "sentencepiece decode failed: ", error);
      return text;
    });
  }

  std::int64_t vocab_size() const override { return vocab_size_; }
  std::int64_t pad_id() const override { return 0; }
  std::int64_t unk_id() const override { return 1; }
  std::int64_t eos_id() const override { return 2; }
  std::string piece(std::int64_t id) const override {
    TXL_CHECK(id >= 0 && id < vocab_size_, "token id ", id, " outside the vocabulary");
    std::string out;
    spm::library().id_to_piece(handle_, static_cast<int>(id), append_bytes, &out);
    return out;
  }
  std::string fingerprint() const override { return fingerprint_; }
  void save(const stdfs::path& dir) const override {
    fs::ensure_dir(dir);
    fs::write_atomic(dir / "tokenizer.model", serialized_);
    save_meta(dir, kind(), fingerprint_);
  }
  std::string serialize() const override { return serialized_; }

 private:
  // Frees the processor in the shim's namespace, also when the constructor throws after loading
  // it (a model without the special pieces txl needs; found by fuzz_tokenizer).
  struct Handle {
    void* ptr = nullptr;
    Handle() = default;
    Handle(const Handle&) = delete;
    Handle& operator=(const Handle&) = delete;
    ~Handle() {
      if (ptr) spm::library().free(ptr);
    }
    operator void*() const { return ptr; }
  };

  std::string serialized_;
  Handle handle_;
  std::int64_t vocab_size_ = 0;
  std::string fingerprint_;
};

// -------------------------------------------------------------------------- byte

class ByteTokenizer : public Tokenizer {
 public:
  static constexpr std::int64_t kPad = 256, kEos = 257;
  std::string kind() const override { return "byte"; }
  std::vector<std::int64_t> encode(std::string_view text) const override {
    std::vector<std::int64_t> ids(text.size());
    for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
    return ids;
  }
  std::string decode(const std::vector<std::int64_t>& ids) const override {
    return decode_lines(ids, kEos, kPad, [](const std::vector<std::int64_t>& run) {
      std::string text(run.size(), '\0');
      for (size_t i = 0; i < run.size(); ++i) {
        TXL_CHECK(run[i] >= 0 && run[i] < 256, "token id ", run[i], " is not a byte id");
        text[i] = static_cast<char>(run[i]);
      }
      return text;
    });
  }
  std::int64_t vocab_size() const override { return 258; }
  std::int64_t pad_id() const override { return kPad; }
  std::int64_t eos_id() const override { return kEos; }
  std::int64_t unk_id() const override { return -1; }
  std::string piece(std::int64_t id) const override {
    if (id == kPad) return "<pad>";
    if (id == kEos) return "<eos>";
    TXL_CHECK(id >= 0 && id < 256, "token id ", id, " outside the vocabulary");
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", static_cast<unsigned>(id));
    return buf;
  }
  std::string fingerprint() const override { return fs::hex64(fs::fnv1a("txl-byte-tokenizer-v1")); }
  void save(const stdfs::path& dir) const override {
    fs::ensure_dir(dir);
    save_meta(dir, kind(), fingerprint());
  }
  std::string serialize() const override { return {}; }
};

// -------------------------------------------------------------------------- word

constexpr const char* kPadWord = "<pad>";
constexpr const char* kUnkWord = "<unk>";
constexpr const char* kEosWord = "<eos>";

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }

template <typename F>
void for_each_word(std::string_view text, F f) {
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && is_space(text[i])) ++i;
    size_t start = i;
    while (i < text.size() && !is_space(text[i])) ++i;
    if (i > start) f(text.substr(start, i - start));
  }
}

class WordTokenizer : public Tokenizer {
 public:
  // txl's own vocabularies start with <pad>, <unk>, <eos> (ids 0, 1, 2). A vocabulary of
  // another program (Hugging Face's Transformer-XL: <eos> first, <unk> where its count put it,
  // no <pad>) keeps its ids: <unk> and <eos> are found by name, and without a <pad> padding
  // uses <eos> (padding is masked, never read). Counts parallel to words (0 for specials).
  // `origin` names the vocabulary in error messages.
  WordTokenizer(std::vector<std::string> words, std::vector<std::int64_t> counts,
                const std::string& origin)
      : words_(std::move(words)), counts_(std::move(counts)) {
    index_.reserve(words_.size() * 2);
    std::uint64_t h = fs::fnv1a("txl-word-tokenizer-v1");
    for (size_t i = 0; i < words_.size(); ++i) {
      bool inserted = index_.emplace(words_[i], static_cast<std::int64_t>(i)).second;
      TXL_CHECK(inserted, origin, ": the word vocabulary lists '", words_[i], "' twice");
      h = fs::fnv1a(words_[i] + '\n', h);
    }
    fingerprint_ = fs::hex64(h);
    auto id_of = [&](const char* word) {
      auto it = index_.find(word);
      return it == index_.end() ? std::int64_t{-1} : it->second;
    };
    unk_ = id_of(kUnkWord);
    eos_ = id_of(kEosWord);
    pad_ = id_of(kPadWord) >= 0 ? id_of(kPadWord) : eos_;
    TXL_CHECK(unk_ >= 0 && eos_ >= 0, origin,
              ": a word vocabulary must start with <pad>, <unk>, <eos> (txl's), or hold <unk> "
              "and <eos> (another program's)");
  }

  std::string kind() const override { return "word"; }
  std::vector<std::int64_t> encode(std::string_view text) const override {
    std::vector<std::int64_t> ids;
    for_each_word(text, [&](std::string_view w) {
      // Unknown words, and the special words typed as text ("<unk>" in PTB and WikiText), are
      // <unk>: "<pad>" or "<eos>" in the text must not act as control tokens.
      auto it = index_.find(std::string(w));
      const bool special = it != index_.end() && (it->second == pad_ || it->second == eos_);
      ids.push_back(it == index_.end() || special ? unk_ : it->second);
    });
    return ids;
  }
  std::string decode(const std::vector<std::int64_t>& ids) const override {
    return decode_lines(ids, eos_, pad_, [this](const std::vector<std::int64_t>& run) {
      std::string text;
      for (auto id : run) {
        TXL_CHECK(id >= 0 && id < vocab_size(), "token id ", id, " outside the vocabulary [0, ",
                  vocab_size(), ")");
        if (!text.empty()) text += ' ';
        text += words_[static_cast<size_t>(id)];
      }
      return text;
    });
  }
  std::int64_t vocab_size() const override { return static_cast<std::int64_t>(words_.size()); }
  std::int64_t pad_id() const override { return pad_; }
  std::int64_t unk_id() const override { return unk_; }
  std::int64_t eos_id() const override { return eos_; }
  std::string piece(std::int64_t id) const override {
    TXL_CHECK(id >= 0 && id < vocab_size(), "token id ", id, " outside the vocabulary");
    return words_[static_cast<size_t>(id)];
  }
  std::string fingerprint() const override { return fingerprint_; }
  void save(const stdfs::path& dir) const override {
    fs::ensure_dir(dir);
    fs::write_atomic(dir / "tokenizer.vocab", serialize());
    save_meta(dir, kind(), fingerprint_);
  }
  std::string serialize() const override {
    std::string text;
    for (size_t i = 0; i < words_.size(); ++i)
      text += words_[i] + "\t" + std::to_string(counts_[i]) + "\n";
    return text;
  }

  // Parses serialize()'s text: "word<TAB>count" lines, words without whitespace, counts >= 0.
  static std::shared_ptr<Tokenizer> parse(std::string_view text, const std::string& origin) {
    std::vector<std::string> words;
    std::vector<std::int64_t> counts;
    size_t line_no = 0;
    for (const auto& line : split_lines(text)) {
      ++line_no;
      const size_t tab = line.find('\t');
      TXL_CHECK(tab != std::string::npos && tab > 0, origin, ":", line_no,
                ": expected \"word<TAB>count\"");
      const std::string_view word = std::string_view(line).substr(0, tab);
      TXL_CHECK(std::none_of(word.begin(), word.end(), is_space), origin, ":", line_no,
                ": a word holds whitespace (it could never be encoded)");
      const std::string_view count = std::string_view(line).substr(tab + 1);
      std::int64_t value = -1;
      auto [end, ec] = std::from_chars(count.data(), count.data() + count.size(), value);
      TXL_CHECK(
          !count.empty() && ec == std::errc() && end == count.data() + count.size() && value >= 0,
          origin, ":", line_no, ": bad count '", count, "'");
      words.emplace_back(word);
      counts.push_back(value);
    }
    return std::make_shared<WordTokenizer>(std::move(words), std::move(counts), origin);
  }

 private:
  std::vector<std::string> words_;
  std::vector<std::int64_t> counts_;
  std::unordered_map<std::string, std::int64_t> index_;
  std::int64_t pad_ = 0, unk_ = 1, eos_ = 2;  // pad_ = eos_ when the vocabulary has no <pad>
  std::string fingerprint_;
};

}  // namespace

namespace detail {

std::string format_meta(const std::vector<std::pair<std::string, std::string>>& entries) {
  std::string out;
  for (const auto& [key, value] : entries) out += key + "=" + value + "\n";
  return out;
}

Meta parse_meta(const std::string& text) {
  Meta meta;
  for (const auto& line : split_lines(text)) {
    size_t eq = line.find('=');
    if (eq != std::string::npos) meta[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return meta;
}

std::string hex_of(std::uint64_t v) { return fs::hex64(v); }

}  // namespace detail

// ----------------------------------------------------------------------- building

TrainText lines_text(const std::vector<std::string>& lines) {
  return [&lines](const LineVisitor& visit) {
    for (const auto& line : lines) visit(line);
  };
}

std::shared_ptr<Tokenizer> train_sentencepiece(const config::TokenizerConfig& cfg,
                                               const std::vector<std::string>& train_lines) {
  return train_sentencepiece(cfg, lines_text(train_lines));
}

namespace {

// At most cfg.max_sentences lines with text, at an even stride over the whole split, so the sample
// is deterministic and spread over all of it: pass 1 checks that every line is UTF-8 and counts
// the lines with text, pass 2 keeps the sample. `n_lines` receives the number of lines.
std::vector<std::string> sentencepiece_sample(const config::TokenizerConfig& cfg,
                                              const TrainText& train_text, std::int64_t* n_lines) {
  auto has_text = [](std::string_view line) {
    return line.find_first_not_of(" \t") != std::string_view::npos;
  };
  std::int64_t lines = 0, n_text = 0;
  train_text([&](std::string_view line) {
    ++lines;
    auto bad = util::find_invalid_utf8(line);
    TXL_CHECK(!bad.has_value(), "invalid UTF-8 in the training text, line ", lines, " byte ",
              bad.value_or(0) + 1, ": sentencepiece needs UTF-8 text (convert the corpus, e.g. ",
              "with iconv, or use data.tokenizer.type byte)");
    n_text += has_text(line);
  });
  *n_lines = lines;
  const std::int64_t keep =
      cfg.max_sentences > 0 ? std::min<std::int64_t>(cfg.max_sentences, n_text) : n_text;
  std::vector<std::string> sample;
  sample.reserve(static_cast<size_t>(keep));
  std::int64_t index = 0;  // among the lines with text
  train_text([&](std::string_view line) {
    if (!has_text(line)) return;
    const auto k = static_cast<std::int64_t>(sample.size());
    if (k < keep && index == k * n_text / keep) sample.emplace_back(line);
    ++index;
  });
  return sample;
}

}  // namespace

std::shared_ptr<Tokenizer> train_sentencepiece(const config::TokenizerConfig& cfg,
                                               const TrainText& train_text) {
  (void)tokenizer_options_key(cfg);  // validates model_type
  TXL_CHECK(cfg.vocab_size >= 4, "data.tokenizer.vocab_size must be at least 4, got ",
            cfg.vocab_size);
  TXL_CHECK(cfg.character_coverage > 0.0 && cfg.character_coverage <= 1.0,
            "data.tokenizer.character_coverage must be in (0, 1], got ", cfg.character_coverage);
  std::int64_t n_lines = 0;
  std::vector<std::string> sample = sentencepiece_sample(cfg, train_text, &n_lines);
  TXL_CHECK(!sample.empty(), "cannot train a sentencepiece tokenizer: the train split has no text");

  std::string user_symbols;
  for (const auto& s : cfg.user_symbols) user_symbols += (user_symbols.empty() ? "" : ",") + s;
  unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  // Identity normalization and kept whitespace: decode(encode(text)) == text, and bits per
  // byte refer to the text as it is.
  std::vector<std::pair<std::string, std::string>> args = {
      {"model_type", config::to_string(cfg.model_type)},
      {"vocab_size", std::to_string(cfg.vocab_size)},
      {"character_coverage", std::to_string(cfg.character_coverage)},
      {"pad_id", "0"},
      {"unk_id", "1"},
      {"eos_id", "2"},
      {"bos_id", "-1"},
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"max_sentence_length", "65536"},
      {"input_sentence_size", "0"},
      {"num_threads", std::to_string(threads)},
      {"hard_vocab_limit", "true"}};
  if (!user_symbols.empty()) args.emplace_back("user_defined_symbols", user_symbols);
  std::vector<const char*> keys, values;
  for (const auto& [k, v] : args) keys.push_back(k.c_str()), values.push_back(v.c_str());

  log::info("data", "training a sentencepiece {} tokenizer, vocab {}, on {} of {} train lines",
            config::to_string(cfg.model_type), cfg.vocab_size, sample.size(), n_lines);
  const spm::Library& lib = spm::library();
  auto start = std::chrono::steady_clock::now();
  std::string serialized, error, chatter;
  auto line_at = [](void* ctx, std::size_t i, std::size_t* size) -> const char* {
    const std::string& line = (*static_cast<std::vector<std::string>*>(ctx))[i];
    *size = line.size();
    return line.data();
  };
  int rc;
  {
    spm::StderrCapture capture;
    rc = lib.train(keys.data(), values.data(), keys.size(), line_at, &sample, sample.size(),
                   append_bytes, &serialized, append_bytes, &error);
    chatter = capture.stop();
  }
  if (rc != 0) {
    if (error.find("Vocabulary size") != std::string::npos)
      TXL_FAIL("data.tokenizer.vocab_size ", cfg.vocab_size, " does not fit this corpus: ", error,
               "; choose a vocab_size the training text supports");
    TXL_FAIL("sentencepiece training failed: ", error, "\nlast sentencepiece output:\n", chatter);
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  auto tok = std::make_shared<SentencePieceTokenizer>(std::move(serialized), "(just trained)");
  log::info("data", "trained sentencepiece tokenizer in {:.1f} s: vocab {}", seconds,
            tok->vocab_size());
  return tok;
}

std::shared_ptr<Tokenizer> load_sentencepiece(const stdfs::path& model_path) {
  std::error_code ec;
  TXL_CHECK(stdfs::is_regular_file(model_path, ec),
            "sentencepiece model not found: ", model_path.string(),
            " (check data.tokenizer.model_path)");
  return std::make_shared<SentencePieceTokenizer>(fs::read_file(model_path), model_path.string());
}

std::shared_ptr<Tokenizer> make_byte_tokenizer() { return std::make_shared<ByteTokenizer>(); }

std::shared_ptr<Tokenizer> build_word_tokenizer(const std::vector<std::string>& train_lines,
                                                int min_count) {
  return build_word_tokenizer(lines_text(train_lines), min_count);
}

std::shared_ptr<Tokenizer> build_word_tokenizer(const TrainText& train_text, int min_count) {
  // Keys view the words kept in `spelled` (a deque never moves its strings), so counting a word
  // seen before allocates nothing.
  std::deque<std::string> spelled;
  std::unordered_map<std::string_view, std::int64_t> counts;
  std::int64_t n_lines = 0;
  train_text([&](std::string_view line) {
    ++n_lines;
    for_each_word(line, [&](std::string_view w) {
      auto it = counts.find(w);
      if (it == counts.end()) it = counts.emplace(spelled.emplace_back(w), 0).first;
      ++it->second;
    });
  });
  std::vector<std::pair<std::string, std::int64_t>> sorted;
  sorted.reserve(counts.size());
  std::int64_t unk_count = 0, dropped = 0;
  for (auto& [word, count] : counts) {
    if (word == kUnkWord || word == kPadWord || word == kEosWord) {
      unk_count += count;
    } else if (count < min_count) {
      unk_count += count;
      ++dropped;
    } else {
      sorted.emplace_back(word, count);
    }
  }
  // Descending frequency, ties in byte order: the same text always gives the same ids.
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  });
  std::vector<std::string> words = {kPadWord, kUnkWord, kEosWord};
  std::vector<std::int64_t> word_counts = {0, unk_count, n_lines};
  for (auto& [word, count] : sorted) {
    words.push_back(std::move(word));
    word_counts.push_back(count);
  }
  log::info("data", "word vocabulary: {} words{}", words.size(),
            dropped ? fmt::format(" ({} rarer than min_count {} map to <unk>)", dropped, min_count)
                    : std::string());
  return std::make_shared<WordTokenizer>(std::move(words), std::move(word_counts),
                                         "(built from the training text)");
}

namespace detail {

std::shared_ptr<Tokenizer> parse_tokenizer(const std::string& kind, std::string_view bytes,
                                           const std::string& origin) {
  if (kind == "sentencepiece")
    return std::make_shared<SentencePieceTokenizer>(std::string(bytes), origin);
  if (kind == "word") return WordTokenizer::parse(bytes, origin);
  if (kind == "byte") {
    TXL_CHECK(bytes.empty(), origin, ": a byte tokenizer has no data, got ", bytes.size(),
              " bytes");
    return make_byte_tokenizer();
  }
  TXL_FAIL(origin, ": unknown tokenizer kind '", kind, "' (expected sentencepiece, byte or word)");
}

}  // namespace detail

std::shared_ptr<Tokenizer> deserialize_tokenizer(const std::string& kind, std::string_view bytes,
                                                 const std::string& expected_fingerprint,
                                                 const std::string& origin) {
  auto tok = detail::parse_tokenizer(kind, bytes, origin);
  TXL_CHECK(tok->fingerprint() == expected_fingerprint, origin, ": the ", kind,
            " tokenizer is damaged or not the expected one: its fingerprint ", tok->fingerprint(),
            " differs from the recorded ", expected_fingerprint);
  return tok;
}

std::shared_ptr<Tokenizer> load_tokenizer(const stdfs::path& dir) {
  std::error_code ec;
  TXL_CHECK(stdfs::is_regular_file(dir / kMetaFile, ec), "no tokenizer in ", dir.string(), " (",
            kMetaFile, " missing)");
  Meta meta = parse_meta(fs::read_file(dir / kMetaFile));
  TXL_CHECK(meta["format"] == std::to_string(kMetaFormat), dir.string(), "/", kMetaFile,
            " has format '", meta["format"], "', expected ", kMetaFormat);
  const std::string& kind = meta["kind"];
  // The file holding the bytes of each kind (the byte tokenizer has none).
  const char* file = kind == "sentencepiece" ? "tokenizer.model"
                     : kind == "word"        ? "tokenizer.vocab"
                                             : nullptr;
  const stdfs::path origin = dir / (file ? file : kMetaFile);
  const std::string bytes = file ? fs::read_file(origin) : std::string();
  return deserialize_tokenizer(kind, bytes, meta["fingerprint"], origin.string());
}

}  // namespace txl::data
