#include "txl/data/corpus.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <limits>
#include <utility>

#include "txl/data/synthetic.h"
#include "txl/util/error.h"
#include "txl/util/fs.h"
#include "txl/util/log.h"
#include "txl/util/process.h"
#include "txl/util/text.h"

namespace txl::data {

namespace stdfs = std::filesystem;

const CorpusSplit& CorpusText::split(std::string_view split_name) const {
  if (split_name == "train") return train;
  if (split_name == "valid") return valid;
  if (split_name == "test") return test;
  TXL_FAIL("unknown split '", split_name, "': expected train, valid or test");
}

// ---------------------------------------------------------------------------- helpers

std::vector<std::string> split_lines(std::string_view text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    lines.emplace_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

std::int64_t count_utf8_chars(std::string_view text) {
  std::int64_t n = 0;
  for (unsigned char c : text) n += (c & 0xC0) != 0x80;
  return n;
}

std::int64_t count_words(std::string_view text) {
  std::int64_t n = 0;
  bool in_word = false;
  for (unsigned char c : text) {
    const bool space = c == ' ' || (c >= '\t' && c <= '\r');
    n += !space && !in_word;
    in_word = !space;
  }
  return n;
}

std::optional<VerseLine> parse_verse_line(std::string_view line) {
  // Book: an optional leading digit ("1Sm"), then letters; then chapter ':' verse ' '.
  size_t i = 0;
  if (i < line.size() && line[i] >= '1' && line[i] <= '3') ++i;
  size_t letters = i;
  while (i < line.size() && std::isalpha(static_cast<unsigned char>(line[i]))) ++i;
  if (i == letters) return std::nullopt;
  VerseLine v;
  v.book = line.substr(0, i);
  auto read_number = [&](int* out) {
    size_t begin = i;
    int value = 0;
    while (i < line.size() && std::isdigit(static_cast<unsigned char>(line[i])) && i - begin < 4) {
      value = value * 10 + (line[i] - '0');
      ++i;
    }
    *out = value;
    return i > begin;
  };
  if (!read_number(&v.chapter) || i >= line.size() || line[i] != ':') return std::nullopt;
  ++i;
  if (!read_number(&v.verse) || i >= line.size() || line[i] != ' ') return std::nullopt;
  if (v.chapter < 1 || v.verse < 1) return std::nullopt;
  v.text = line.substr(i + 1);
  return v;
}

ByteSplit byte_corpus_split(std::int64_t size) {
  constexpr std::int64_t kStandard = 100000000, kHeldOut = 5000000;
  if (size >= kStandard) return {size - 2 * kHeldOut, size - kHeldOut, size, true};
  std::int64_t train_end = size * 90 / 100;
  std::int64_t valid_end = train_end + size * 5 / 100;
  return {train_end, valid_end, size, false};
}

namespace {

constexpr const char* kReadme = "data/README.md";
constexpr const char* kBooksFolder = "data/corpora/books";

// Fills n_bytes / n_chars of a split from the text its lines stand for (lines + newlines).
void count_text(CorpusSplit* split) {
  split->n_bytes = 0;
  split->n_chars = 0;
  for (const auto& line : split->lines) {
    split->n_bytes += static_cast<std::int64_t>(line.size()) + 1;
    split->n_chars += count_utf8_chars(line) + 1;
  }
}

// Reads a corpus file, with errors that name the corpus, the path and the README.
std::string read_corpus_file(const std::string& corpus, const stdfs::path& path) {
  std::error_code ec;
  TXL_CHECK(stdfs::exists(path, ec), "corpus '", corpus, "': file not found: ", path.string(),
            " (see ", kReadme, " for how to obtain it and the layout txl expects)");
  TXL_CHECK(!stdfs::is_directory(path, ec), "corpus '", corpus, "': expected a file, found a ",
            "directory: ", path.string(), " (see ", kReadme, ")");
  std::string bytes;
  try {
    bytes = fs::read_file(path);
  } catch (const Error& e) {
    TXL_FAIL("corpus '", corpus, "': ", e.what(), " (see ", kReadme, ")");
  }
  TXL_CHECK(!bytes.empty(), "corpus '", corpus, "': ", path.string(),
            " is empty (a partial download? see ", kReadme, ")");
  return bytes;
}

std::string resolved(const std::string& path) {
  std::error_code ec;
  auto p = stdfs::weakly_canonical(stdfs::path(path), ec);
  return ec ? path : p.string();
}

// Fingerprint of several files, each hashed in full, combined in order.
std::uint64_t fingerprint_files(const std::string& corpus, const std::vector<stdfs::path>& files) {
  std::uint64_t h = fs::fnv1a(corpus);
  for (const auto& file : files) {
    std::error_code ec;
    TXL_CHECK(stdfs::is_regular_file(file, ec), "corpus '", corpus,
              "': file not found: ", file.string(), " (see ", kReadme, " for how to obtain it)");
    std::uint64_t f = fs::fingerprint_file(file);
    h = fs::fnv1a(std::string_view(reinterpret_cast<const char*>(&f), sizeof f), h);
  }
  return h;
}

// ------------------------------------------------------------------------------ kjv

// The text of `bible -f Gen1:1-Rev22:21` (bible-kjv), run without a shell (process.h).
std::string read_bible() {
  const auto r = process::run_program({"bible", "-f", "Gen1:1-Rev22:21"});
  TXL_CHECK(r.started, "corpus 'kjv' needs the `bible` program: install the bible-kjv package ",
            "(sudo apt-get install bible-kjv), or set data.path to a file of `bible -f` output, ",
            "or choose another data.corpus (see ", kReadme, "; ", r.error, ")");
  TXL_CHECK(r.ok(), "corpus 'kjv': `bible -f Gen1:1-Rev22:21` failed: it ", r.status(),
            r.stderr_tail.empty() ? "" : ": ", r.stderr_tail, " (reinstall bible-kjv, see ",
            kReadme, ")");
  return r.out;
}

// The King James Bible from the bible-kjv package (or a file in the same `bible -f` format).
class KjvReader : public CorpusReader {
 public:
  explicit KjvReader(std::string path) : path_(std::move(path)) {}
  std::string name() const override { return "kjv"; }
  std::string source_key() const override {
    return path_.empty() ? "kjv:bible-kjv" : "kjv:" + resolved(path_);
  }
  std::uint64_t fingerprint() const override { return fs::fnv1a(raw()); }

  CorpusText read() const override {
    const std::string& text = raw();
    std::vector<std::string> verses;
    std::vector<bool> chapter_start;
    size_t line_no = 0;
    for (const auto& line : split_lines(text)) {
      ++line_no;
      if (line.empty()) continue;
      auto verse = parse_verse_line(line);
      TXL_CHECK(verse.has_value(), "corpus 'kjv': line ", line_no, " of ", origin(),
                " has no verse reference like \"Ge1:1 \": \"", line.substr(0, 60),
                "\" (is it `bible -f` output?)");
      verses.emplace_back(verse->text);
      chapter_start.push_back(verse->verse == 1);
    }
    TXL_CHECK(!verses.empty(), "corpus 'kjv': no verses in ", origin(), " (see ", kReadme, ")");
    // Canonical order, first 90% / next 5% / last 5% of verses.
    const std::int64_t n = static_cast<std::int64_t>(verses.size());
    const std::int64_t train_end = n * 90 / 100, valid_end = train_end + n * 5 / 100;
    CorpusText corpus;
    corpus.name = "kjv";
    auto fill = [&](CorpusSplit* split, std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) {
        // A chapter starts a document; so does the first verse of a split.
        if (i == begin || chapter_start[i])
          split->doc_starts.push_back(static_cast<std::int64_t>(split->lines.size()));
        split->lines.push_back(std::move(verses[i]));
      }
      count_text(split);
    };
    fill(&corpus.train, 0, train_end);
    fill(&corpus.valid, train_end, valid_end);
    fill(&corpus.test, valid_end, n);
    return corpus;
  }

 private:
  std::string origin() const { return path_.empty() ? "`bible -f Gen1:1-Rev22:21`" : path_; }

  const std::string& raw() const {
    if (!raw_loaded_) {
      if (path_.empty()) {
        raw_ = read_bible();
        TXL_CHECK(!raw_.empty(), "corpus 'kjv': `bible -f Gen1:1-Rev22:21` printed nothing; ",
                  "reinstall bible-kjv (see ", kReadme, ")");
      } else {
        raw_ = read_corpus_file("kjv", path_);
      }
      raw_loaded_ = true;
    }
    return raw_;
  }

  std::string path_;
  mutable std::string raw_;
  mutable bool raw_loaded_ = false;
};

// ------------------------------------------------------------- three-file corpora

// Corpora stored as one file per split. `doc_rule` decides documents within a split.
class SplitFilesReader : public CorpusReader {
 public:
  enum class Docs { kOnePerSplit, kWikiArticles, kBlankLines };

  SplitFilesReader(std::string name, std::string path, std::vector<std::string> files, Docs docs)
      : name_(std::move(name)), path_(std::move(path)), files_(std::move(files)), docs_(docs) {
    TXL_CHECK(!path_.empty(), "corpus '", name_, "' needs data.path: the folder holding ",
              files_[0], ", ", files_[1], " and ", files_[2], " (see ", kReadme, ")");
  }

  std::string name() const override { return name_; }
  std::string source_key() const override { return name_ + ":" + resolved(path_); }
  std::uint64_t fingerprint() const override { return fingerprint_files(name_, paths()); }

  CorpusText read() const override {
    CorpusText corpus;
    corpus.name = name_;
    auto files = paths();
    CorpusSplit* splits[3] = {&corpus.train, &corpus.valid, &corpus.test};
    for (int s = 0; s < 3; ++s) {
      std::string bytes = read_corpus_file(name_, files[s]);
      CorpusSplit& split = *splits[s];
      split.n_bytes = static_cast<std::int64_t>(bytes.size());
      split.n_chars = count_utf8_chars(bytes);
      split.line_end_is_word = docs_ != Docs::kBlankLines;  // WikiText and PTB count <eos>
      auto lines = split_lines(bytes);
      bytes.clear();
      bytes.shrink_to_fit();
      if (docs_ == Docs::kBlankLines) {
        // Blank lines separate documents and are not part of the text.
        bool new_doc = true;
        for (auto& line : lines) {
          if (line.find_first_not_of(" \t\r") == std::string::npos) {
            new_doc = true;
            continue;
          }
          if (new_doc) split.doc_starts.push_back(static_cast<std::int64_t>(split.lines.size()));
          new_doc = false;
          split.lines.push_back(std::move(line));
        }
        TXL_CHECK(!split.lines.empty(), "corpus '", name_, "': ", files[s].string(),
                  " holds only blank lines");
      } else {
        split.lines = std::move(lines);
        split.doc_starts.push_back(0);
        if (docs_ == Docs::kWikiArticles) add_article_starts(&split);
      }
    }
    return corpus;
  }

 private:
  std::vector<stdfs::path> paths() const {
    std::vector<stdfs::path> out;
    for (const auto& f : files_) out.push_back(stdfs::path(path_) / f);
    return out;
  }

  static bool blank(const std::string& line) {
    return line.find_first_not_of(" \t\r") == std::string::npos;
  }

  // WikiText: an article starts at its title line " = Title = " (one '=' each side; sections
  // are " = = Section = = "), together with the blank line(s) just before it.
  static void add_article_starts(CorpusSplit* split) {
    const auto& lines = split->lines;
    for (size_t i = 0; i < lines.size(); ++i) {
      const std::string& l = lines[i];
      bool title = l.size() >= 6 && l.compare(0, 3, " = ") == 0 && l[3] != '=' &&
                   l.compare(l.size() - 3, 3, " = ") == 0 && l[l.size() - 4] != '=';
      if (!title) continue;
      size_t start = i;
      while (start > 0 && blank(lines[start - 1])) --start;
      if (static_cast<std::int64_t>(start) > split->doc_starts.back())
        split->doc_starts.push_back(static_cast<std::int64_t>(start));
    }
  }

  std::string name_, path_;
  std::vector<std::string> files_;
  Docs docs_;
};

// -------------------------------------------------------------- raw byte corpora

// enwik8 / text8: one raw file split by byte offsets (byte_corpus_split).
class ByteFileReader : public CorpusReader {
 public:
  ByteFileReader(config::Corpus corpus, std::string path)
      : name_(config::to_string(corpus)), pages_(corpus == config::Corpus::kEnwik8) {
    TXL_CHECK(!path.empty(), "corpus '", name_, "' needs data.path: the file ", name_,
              " or the folder holding it (see ", kReadme, ")");
    std::error_code ec;
    file_ = stdfs::is_directory(path, ec) ? stdfs::path(path) / name_ : stdfs::path(path);
  }

  std::string name() const override { return name_; }
  std::string source_key() const override { return name_ + ":" + resolved(file_.string()); }
  std::uint64_t fingerprint() const override { return fingerprint_files(name_, {file_}); }

  CorpusText read() const override {
    std::string bytes = read_corpus_file(name_, file_);
    ByteSplit cut = byte_corpus_split(static_cast<std::int64_t>(bytes.size()));
    if (!cut.standard)
      log::info("data",
                "{}: {} has {} bytes, under the standard 100,000,000; splitting 90/5/5 "
                "by fraction",
                name_, file_.string(), cut.size);
    CorpusText corpus;
    corpus.name = name_;
    std::int64_t bounds[4] = {0, cut.train_end, cut.valid_end, cut.size};
    CorpusSplit* splits[3] = {&corpus.train, &corpus.valid, &corpus.test};
    for (int s = 0; s < 3; ++s) {
      std::string_view part(bytes.data() + bounds[s],
                            static_cast<size_t>(bounds[s + 1] - bounds[s]));
      CorpusSplit& split = *splits[s];
      split.n_bytes = static_cast<std::int64_t>(part.size());
      split.n_chars = count_utf8_chars(part);
      split.lines = split_lines(part);
      split.doc_starts.push_back(0);
      // enwik8 is a Wikipedia XML dump: an article starts at its "<page>" line.
      if (pages_) {
        for (size_t i = 1; i < split.lines.size(); ++i) {
          const std::string& l = split.lines[i];
          size_t first = l.find_first_not_of(' ');
          if (first != std::string::npos && l.compare(first, 6, "<page>") == 0)
            split.doc_starts.push_back(static_cast<std::int64_t>(i));
        }
      }
      TXL_CHECK(!split.lines.empty(), "corpus '", name_, "': ", file_.string(),
                " is too small to split into train/valid/test");
    }
    return corpus;
  }

 private:
  std::string name_;
  bool pages_;  // enwik8: an article starts at a "<page>" line
  stdfs::path file_;
};

// ------------------------------------------------------------------------------ pg19

// PG-19 as DeepMind lays it out: <path>/{train,validation,test}/<id>.txt, one book a file, each
// book a document, in the order of their ids (numerically where the ids are numbers); the
// metadata.csv beside them is not needed. Every book must be non-blank, well-formed UTF-8.
// The books corpus (tools/books.py) is written in the same layout, by default into
// data/corpora/books.
class BookFolderReader : public CorpusReader {
 public:
  BookFolderReader(std::string name, std::string path, std::string missing_hint)
      : name_(std::move(name)), path_(std::move(path)), hint_(std::move(missing_hint)) {
    TXL_CHECK(!path_.empty(), "corpus '", name_,
              "' needs data.path: the folder holding train/, validation/ and test/ of <id>.txt "
              "(see ",
              kReadme, ")");
  }

  std::string name() const override { return name_; }
  std::string source_key() const override { return name_ + ":" + resolved(path_); }
  std::uint64_t fingerprint() const override {
    std::uint64_t h = fs::fnv1a(name_);
    for (const char* split : kSplits) {
      for (const auto& book : books(split)) {
        h = fs::fnv1a(std::string(split) + "/" + book.filename().string(), h);
        const std::uint64_t f = fs::fingerprint_file(book);
        h = fs::fnv1a(std::string_view(reinterpret_cast<const char*>(&f), sizeof f), h);
      }
    }
    return h;
  }

  CorpusText read() const override {
    CorpusText corpus;
    corpus.name = name_;
    CorpusSplit* splits[3] = {&corpus.train, &corpus.valid, &corpus.test};
    for (int s = 0; s < 3; ++s) {
      for (const auto& book : books(kSplits[s])) add_book(book, splits[s]);
    }
    return corpus;
  }

 private:
  static constexpr const char* kSplits[3] = {"train", "validation", "test"};

  // The books of one split, in the order of their ids. Throws txl::Error naming a missing
  // folder or one without books.
  std::vector<stdfs::path> books(const char* split) const {
    const stdfs::path folder = stdfs::path(path_) / split;
    std::error_code ec;
    TXL_CHECK(stdfs::is_directory(folder, ec), "corpus '", name_, "': ", folder.string(),
              " is missing: PG-19's layout has train/, validation/ and test/ folders of "
              "<id>.txt (",
              hint_, "see ", kReadme, ")");
    std::vector<stdfs::path> out;
    for (const auto& entry : stdfs::directory_iterator(folder, ec)) {
      if (entry.path().extension() == ".txt") out.push_back(entry.path());
    }
    TXL_CHECK(!ec, "corpus '", name_, "': cannot list ", folder.string(), ": ", ec.message());
    TXL_CHECK(!out.empty(), "corpus '", name_, "': ", folder.string(),
              " holds no <id>.txt book (see ", kReadme, ")");
    auto key = [](const stdfs::path& p) {
      const std::string id = p.stem().string();
      const bool number =
          !id.empty() && id.size() < 19 && id.find_first_not_of("0123456789") == std::string::npos;
      return std::pair(number ? std::stoll(id) : std::numeric_limits<long long>::max(), id);
    };
    std::sort(out.begin(), out.end(),
              [&](const auto& a, const auto& b) { return key(a) < key(b); });
    return out;
  }

  // Appends one book to `split` as a document of its own.
  void add_book(const stdfs::path& book, CorpusSplit* split) const {
    std::string bytes = read_corpus_file(name_, book);
    if (const auto bad = util::find_invalid_utf8(bytes)) {
      TXL_FAIL("corpus '", name_, "': ", book.string(), " is not UTF-8 (an invalid byte at offset ",
               *bad, ")");
    }
    TXL_CHECK(bytes.find_first_not_of(" \t\r\n") != std::string::npos, "corpus '", name_,
              "': ", book.string(), " holds only blank lines (an empty book)");
    split->n_bytes += static_cast<std::int64_t>(bytes.size());
    split->n_chars += count_utf8_chars(bytes);
    split->doc_starts.push_back(static_cast<std::int64_t>(split->lines.size()));
    for (auto& line : split_lines(bytes)) split->lines.push_back(std::move(line));
  }

  std::string name_, path_, hint_;
};

// -------------------------------------------------------------------- synthetic

class SyntheticReader : public CorpusReader {
 public:
  explicit SyntheticReader(const config::SyntheticConfig& cfg) : cfg_(cfg) {}
  std::string name() const override { return "synthetic"; }
  std::string source_key() const override {
    return "synthetic:seed=" + std::to_string(cfg_.seed) +
           ",documents=" + std::to_string(cfg_.documents) + ",keys=" + std::to_string(cfg_.keys) +
           ",gap=" + std::to_string(cfg_.gap) + ",alphabet=" + std::to_string(cfg_.alphabet);
  }
  std::uint64_t fingerprint() const override {
    // Generating is the only way to know the bytes; it is fast (no I/O).
    CorpusText text = read();
    std::uint64_t h = fs::fnv1a("synthetic");
    for (const CorpusSplit* s : {&text.train, &text.valid, &text.test})
      for (const auto& line : s->lines) h = fs::fnv1a(line + '\n', h);
    return h;
  }
  CorpusText read() const override { return generate_synthetic_corpus(cfg_); }

 private:
  config::SyntheticConfig cfg_;
};

}  // namespace

std::unique_ptr<CorpusReader> make_corpus_reader(const config::DataConfig& cfg) {
  using config::Corpus;
  using Docs = SplitFilesReader::Docs;
  const std::string name = config::to_string(cfg.corpus);
  switch (cfg.corpus) {
    case Corpus::kKjv:
      return std::make_unique<KjvReader>(cfg.path);
    case Corpus::kWikitext: {
      // The tokenized files are the standard ones; the raw variant is accepted as a fallback.
      std::string ext = ".tokens";
      std::error_code ec;
      if (!cfg.path.empty() && !stdfs::exists(stdfs::path(cfg.path) / "wiki.train.tokens", ec) &&
          stdfs::exists(stdfs::path(cfg.path) / "wiki.train.raw", ec))
        ext = ".raw";
      return std::make_unique<SplitFilesReader>(
          name, cfg.path,
          std::vector<std::string>{"wiki.train" + ext, "wiki.valid" + ext, "wiki.test" + ext},
          Docs::kWikiArticles);
    }
    case Corpus::kPtb:
      return std::make_unique<SplitFilesReader>(
          name, cfg.path,
          std::vector<std::string>{"ptb.train.txt", "ptb.valid.txt", "ptb.test.txt"},
          Docs::kOnePerSplit);
    case Corpus::kText:
      return std::make_unique<SplitFilesReader>(
          name, cfg.path, std::vector<std::string>{"train.txt", "valid.txt", "test.txt"},
          Docs::kBlankLines);
    case Corpus::kEnwik8:
    case Corpus::kText8:
      return std::make_unique<ByteFileReader>(cfg.corpus, cfg.path);
    case Corpus::kPg19:
      return std::make_unique<BookFolderReader>(name, cfg.path, "");
    case Corpus::kBooks:
      return std::make_unique<BookFolderReader>(
          name, cfg.path.empty() ? std::string(kBooksFolder) : cfg.path,
          std::string(kBooksFolder) + " is built by tools/setup.sh: python3 tools/books.py --out " +
              kBooksFolder + "; ");
    case Corpus::kSynthetic:
      return std::make_unique<SyntheticReader>(cfg.synthetic);
  }
  // Only a value cast from a number reaches here: the loader takes names from the table alone.
  std::string known;
  for (const auto& n : config::enum_names<Corpus>()) known += (known.empty() ? "" : ", ") + n;
  TXL_FAIL("unknown data.corpus '", name, "': expected one of ", known);
}

}  // namespace txl::data
