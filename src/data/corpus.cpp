#include "txl/data/corpus.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
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

// Collects lines into chunks of about chunk_bytes and hands each to the sink. A chunk is handed
// over only at cut(), where the reader allows one (after a line that a document cannot reach
// back across), and at finish().
class ChunkBuilder {
 public:
  ChunkBuilder(std::int64_t chunk_bytes, bool line_end_is_word, const ChunkSink& sink)
      : chunk_bytes_(chunk_bytes), line_end_is_word_(line_end_is_word), sink_(sink) {
    chunk_.line_end_is_word = line_end_is_word;
  }
  // A line of the text (`newline`: it ended with '\n'), starting a document or not; a document
  // may take in the `take_back` lines just before it (all in this chunk).
  void line(std::string_view text, bool newline, bool starts_document, std::int64_t take_back = 0) {
    const auto start = static_cast<std::int64_t>(chunk_.lines.size()) - take_back;
    if (starts_document && (chunk_.doc_starts.empty() || start > chunk_.doc_starts.back()))
      chunk_.doc_starts.push_back(start);
    chunk_.lines.emplace_back(text);
    skip(text, newline);
  }
  // Text that is counted (bytes and characters) but is not a line of the split.
  void skip(std::string_view text, bool newline) {
    chunk_.n_bytes += static_cast<std::int64_t>(text.size()) + newline;
    chunk_.n_chars += count_utf8_chars(text) + newline;
  }
  void cut() {
    if (chunk_.n_bytes >= chunk_bytes_) finish();
  }
  void finish() {
    if (chunk_.lines.empty() && chunk_.n_bytes == 0) return;
    sink_(std::move(chunk_));
    chunk_ = CorpusSplit();
    chunk_.line_end_is_word = line_end_is_word_;
  }

 private:
  std::int64_t chunk_bytes_;
  bool line_end_is_word_;
  const ChunkSink& sink_;
  CorpusSplit chunk_;
};

// Calls on_line(line, newline) for each line of bytes [begin, end) of `path`, read in blocks: as
// split_lines, a final line without a newline counts, and there is no empty line after a final
// newline. Throws txl::Error naming the corpus and the file when it cannot be read.
void for_each_file_line(const std::string& corpus, const stdfs::path& path, std::int64_t begin,
                        std::int64_t end,
                        const std::function<void(std::string_view, bool)>& on_line) {
  std::ifstream in(path, std::ios::binary);
  TXL_CHECK(in.good(), "corpus '", corpus, "': cannot open ", path.string(), ": ",
            std::strerror(errno));
  in.seekg(begin);
  constexpr std::int64_t kBlock = 4 << 20;
  std::string carry, block;
  for (std::int64_t at = begin; at < end;) {
    block.resize(static_cast<size_t>(std::min(kBlock, end - at)));
    in.read(block.data(), static_cast<std::streamsize>(block.size()));
    TXL_CHECK(in.gcount() == static_cast<std::streamsize>(block.size()), "corpus '", corpus,
              "': cannot read ", path.string(), " (did it shrink while being read?)");
    at += static_cast<std::int64_t>(block.size());
    std::string_view rest(block);
    for (size_t nl; (nl = rest.find('\n')) != std::string_view::npos; rest.remove_prefix(nl + 1)) {
      if (carry.empty()) {
        on_line(rest.substr(0, nl), true);
      } else {
        carry.append(rest.substr(0, nl));
        on_line(carry, true);
        carry.clear();
      }
    }
    carry.append(rest);
  }
  if (!carry.empty()) on_line(carry, false);
}

std::int64_t file_size_of(const std::string& corpus, const stdfs::path& path) {
  std::error_code ec;
  TXL_CHECK(stdfs::exists(path, ec), "corpus '", corpus, "': file not found: ", path.string(),
            " (see ", kReadme, " for how to obtain it and the layout txl expects)");
  TXL_CHECK(!stdfs::is_directory(path, ec), "corpus '", corpus, "': expected a file, found a ",
            "directory: ", path.string(), " (see ", kReadme, ")");
  const auto size = stdfs::file_size(path, ec);
  TXL_CHECK(!ec, "corpus '", corpus, "': cannot read ", path.string(), ": ", ec.message());
  TXL_CHECK(size > 0, "corpus '", corpus, "': ", path.string(),
            " is empty (a partial download? see ", kReadme, ")");
  return static_cast<std::int64_t>(size);
}

// Reads a corpus file, with errors that name the corpus, the path and the README.
std::string read_corpus_file(const std::string& corpus, const stdfs::path& path) {
  (void)file_size_of(corpus, path);  // exists, a file, not empty
  try {
    return fs::read_file(path);
  } catch (const Error& e) {
    TXL_FAIL("corpus '", corpus, "': ", e.what(), " (see ", kReadme, ")");
  }
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

  // The Bible is small (4 MB): it is parsed once, on the first read, and each split comes as
  // one chunk.
  void read_split(std::string_view split, std::int64_t, const ChunkSink& sink) const override {
    if (!parsed_) parsed_ = parse();
    sink(CorpusSplit(parsed_->split(split)));
  }

 private:
  CorpusText parse() const {
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
  mutable std::optional<CorpusText> parsed_;
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

  void read_split(std::string_view split, std::int64_t chunk_bytes,
                  const ChunkSink& sink) const override {
    const stdfs::path file = paths()[static_cast<size_t>(split_index(split))];
    const std::int64_t size = file_size_of(name_, file);
    // WikiText and PTB count each line's <eos> as a word.
    ChunkBuilder chunks(chunk_bytes, docs_ != Docs::kBlankLines, sink);
    bool first = true, new_doc = true;
    std::int64_t lines = 0, blank_run = 0;
    for_each_file_line(name_, file, 0, size, [&](std::string_view line, bool newline) {
      if (docs_ == Docs::kBlankLines) {
        // Blank lines separate documents and are not part of the text.
        if (blank(line)) {
          new_doc = true;
          chunks.skip(line, newline);
          return;
        }
        chunks.line(line, newline, new_doc);
        new_doc = false;
        ++lines;
        chunks.cut();
        return;
      }
      // WikiText: an article starts at its title line " = Title = " (one '=' each side;
      // sections are " = = Section = = "), together with the blank line(s) just before it.
      // Chunks are cut only after a line that is not blank, so those blank lines and the title
      // share a chunk.
      const bool article = docs_ == Docs::kWikiArticles && title(line);
      chunks.line(line, newline, first || article, article ? blank_run : 0);
      first = false;
      ++lines;
      blank_run = blank(line) ? blank_run + 1 : 0;
      if (blank_run == 0) chunks.cut();
    });
    chunks.finish();
    TXL_CHECK(lines > 0, "corpus '", name_, "': ", file.string(), " holds only blank lines");
  }

 private:
  std::vector<stdfs::path> paths() const {
    std::vector<stdfs::path> out;
    for (const auto& f : files_) out.push_back(stdfs::path(path_) / f);
    return out;
  }

  static bool blank(std::string_view line) {
    return line.find_first_not_of(" \t\r") == std::string_view::npos;
  }

  static bool title(std::string_view l) {
    return l.size() >= 6 && l.substr(0, 3) == " = " && l[3] != '=' &&
           l.substr(l.size() - 3) == " = " && l[l.size() - 4] != '=';
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

  void read_split(std::string_view split, std::int64_t chunk_bytes,
                  const ChunkSink& sink) const override {
    const int index = split_index(split);
    const ByteSplit cut = byte_corpus_split(file_size_of(name_, file_));
    if (!cut.standard && !said_split_) {
      said_split_ = true;
      log::info("data",
                "{}: {} has {} bytes, under the standard 100,000,000; splitting 90/5/5 "
                "by fraction",
                name_, file_.string(), cut.size);
    }
    const std::int64_t bounds[4] = {0, cut.train_end, cut.valid_end, cut.size};
    ChunkBuilder chunks(chunk_bytes, false, sink);
    bool first = true;
    for_each_file_line(
        name_, file_, bounds[index], bounds[index + 1], [&](std::string_view line, bool newline) {
          // enwik8 is a Wikipedia XML dump: an article starts at its "<page>" line.
          const size_t text = line.find_first_not_of(' ');
          const bool page =
              pages_ && text != std::string_view::npos && line.substr(text, 6) == "<page>";
          chunks.line(line, newline, first || page);
          first = false;
          chunks.cut();
        });
    chunks.finish();
    TXL_CHECK(!first, "corpus '", name_, "': ", file_.string(),
              " is too small to split into train/valid/test");
  }

 private:
  std::string name_;
  bool pages_;  // enwik8: an article starts at a "<page>" line
  stdfs::path file_;
  mutable bool said_split_ = false;  // the 90/5/5 split is logged once
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

  void read_split(std::string_view split, std::int64_t chunk_bytes,
                  const ChunkSink& sink) const override {
    ChunkBuilder chunks(chunk_bytes, false, sink);
    for (const auto& book : books(kSplits[split_index(split)])) add_book(book, &chunks);
    chunks.finish();
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

  // One book, read line by line, as a document of its own.
  void add_book(const stdfs::path& book, ChunkBuilder* chunks) const {
    const std::int64_t size = file_size_of(name_, book);
    std::int64_t offset = 0;
    bool first = true, text = false;
    for_each_file_line(name_, book, 0, size, [&](std::string_view line, bool newline) {
      if (const auto bad = util::find_invalid_utf8(line)) {
        TXL_FAIL("corpus '", name_, "': ", book.string(),
                 " is not UTF-8 (an invalid byte at offset ",
                 offset + static_cast<std::int64_t>(*bad), ")");
      }
      text = text || line.find_first_not_of(" \t\r") != std::string_view::npos;
      chunks->line(line, newline, first);
      first = false;
      offset += static_cast<std::int64_t>(line.size()) + newline;
      chunks->cut();
    });
    TXL_CHECK(text, "corpus '", name_, "': ", book.string(),
              " holds only blank lines (an empty book)");
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
    CorpusText text = generate_synthetic_corpus(cfg_);
    std::uint64_t h = fs::fnv1a("synthetic");
    for (const CorpusSplit* s : {&text.train, &text.valid, &text.test})
      for (const auto& line : s->lines) h = fs::fnv1a(line + '\n', h);
    return h;
  }
  // Generated in memory, small by design: each split comes as one chunk.
  void read_split(std::string_view split, std::int64_t, const ChunkSink& sink) const override {
    sink(generate_synthetic_split(cfg_, std::string(split)));
  }

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
