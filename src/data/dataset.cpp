#include "txl/data/dataset.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <exception>
#include <fstream>
#include <thread>

#include <fmt/core.h>

#include "document_starts.h"
#include "txl/util/error.h"
#include "txl/util/fs.h"
#include "txl/util/log.h"

namespace txl::data {

namespace stdfs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// "12,345,678": large counts are read at a glance.
std::string grouped(std::int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

std::uint64_t split_fingerprint(std::uint64_t corpus_fp, const std::string& split,
                                const Tokenizer& tokenizer, bool add_eos) {
  std::string key = "txl-encoded-split;version=" + std::to_string(kCacheVersion) +
                    ";corpus=" + fs::hex64(corpus_fp) + ";split=" + split +
                    ";tokenizer=" + tokenizer.kind() + ":" + tokenizer.fingerprint() +
                    ";add_eos=" + (add_eos ? "1" : "0");
  return fs::fnv1a(key);
}

}  // namespace

const EncodedSplit& Dataset::split(std::string_view name) const {
  const EncodedSplit* parts[] = {&train, &valid, &test};
  return *parts[split_index(name)];
}

// --------------------------------------------------------------------------- encoding

namespace {

// encode_split without the choice of document starts: doc_starts holds the token offset of each
// document start line, in order, duplicates and offsets at the very end included (the caller
// keeps what it needs: EncodedSplitWriter::append, or encode_split).
// `first_line` (the chunk's first line within its split) numbers the lines in error messages.
EncodedSplit encode_chunk(const CorpusSplit& split, const Tokenizer& tokenizer, bool add_eos,
                          std::int64_t first_line = 0) {
  const auto& lines = split.lines;
  const size_t n_lines = lines.size();
  // Contiguous chunks of about equal bytes, one per core; each thread writes only its own
  // chunk, and chunks are joined in order, so the result does not depend on the thread count.
  const size_t n_threads =
      std::max<size_t>(1, std::min<size_t>(std::thread::hardware_concurrency(), n_lines));
  std::int64_t total_bytes = 0;
  for (const auto& l : lines) total_bytes += static_cast<std::int64_t>(l.size()) + 1;
  std::vector<size_t> bounds = {0};
  {
    std::int64_t acc = 0;
    for (size_t i = 0; i < n_lines && bounds.size() < n_threads; ++i) {
      acc += static_cast<std::int64_t>(lines[i].size()) + 1;
      if (acc * static_cast<std::int64_t>(n_threads) >=
          total_bytes * static_cast<std::int64_t>(bounds.size()))
        bounds.push_back(i + 1);
    }
    if (bounds.back() != n_lines) bounds.push_back(n_lines);
  }
  const size_t n_chunks = bounds.size() - 1;
  std::vector<std::vector<std::int64_t>> chunk_ids(n_chunks);
  std::vector<std::int64_t> chunk_words(n_chunks, 0);
  std::vector<std::int64_t> line_offset(n_lines + 1, 0);  // token offset of each line, per chunk
  std::vector<std::exception_ptr> errors(n_chunks);
  std::vector<std::string> error_context(n_chunks);
  const std::int64_t eos = tokenizer.eos_id();
  auto work = [&](size_t c) {
    size_t i = bounds[c];
    try {
      auto& out = chunk_ids[c];
      for (; i < bounds[c + 1]; ++i) {
        line_offset[i] = static_cast<std::int64_t>(out.size());
        auto ids = tokenizer.encode(lines[i]);
        out.insert(out.end(), ids.begin(), ids.end());
        if (add_eos) out.push_back(eos);
        chunk_words[c] += count_words(lines[i]);
      }
    } catch (const std::exception& e) {
      error_context[c] = "line " + std::to_string(first_line + static_cast<std::int64_t>(i) + 1) +
                         " of the split: " + e.what();
      errors[c] = std::current_exception();
    }
  };
  std::vector<std::thread> threads;
  for (size_t c = 1; c < n_chunks; ++c) threads.emplace_back(work, c);
  if (n_chunks > 0) work(0);
  for (auto& t : threads) t.join();
  for (size_t c = 0; c < n_chunks; ++c)
    if (errors[c]) TXL_FAIL("cannot encode ", error_context[c]);

  std::vector<std::int64_t> chunk_start(n_chunks + 1, 0);
  for (size_t c = 0; c < n_chunks; ++c)
    chunk_start[c + 1] = chunk_start[c] + static_cast<std::int64_t>(chunk_ids[c].size());
  EncodedSplit encoded;
  encoded.ids = torch::empty({chunk_start[n_chunks]}, torch::kLong);  // [N]
  auto* dst = encoded.ids.data_ptr<std::int64_t>();
  for (size_t c = 0; c < n_chunks; ++c) {
    std::copy(chunk_ids[c].begin(), chunk_ids[c].end(), dst + chunk_start[c]);
    for (size_t i = bounds[c]; i < bounds[c + 1]; ++i) line_offset[i] += chunk_start[c];
    std::vector<std::int64_t>().swap(chunk_ids[c]);
  }
  line_offset[n_lines] = chunk_start[n_chunks];

  std::vector<std::int64_t> starts;
  for (std::int64_t line : split.doc_starts) {
    TXL_CHECK(line >= 0 && line <= static_cast<std::int64_t>(n_lines), "document start line ", line,
              " outside the split's ", n_lines, " lines");
    starts.push_back(line_offset[static_cast<size_t>(line)]);
  }
  encoded.doc_starts = torch::tensor(starts, torch::kLong);  // [d]
  encoded.n_bytes = split.n_bytes;
  encoded.n_chars = split.n_chars;
  for (std::int64_t w : chunk_words) encoded.n_words += w;
  if (add_eos && split.line_end_is_word) encoded.n_words += static_cast<std::int64_t>(n_lines);
  return encoded;
}

}  // namespace

EncodedSplit encode_split(const CorpusSplit& split, const Tokenizer& tokenizer, bool add_eos) {
  EncodedSplit encoded = encode_chunk(split, tokenizer, add_eos);
  std::vector<std::int64_t> starts;
  DocumentStarts kept;
  const auto keep = [&](std::int64_t start) { starts.push_back(start); };
  kept.add(encoded.doc_starts, 0, encoded.ids.numel(), keep);
  kept.finish(keep);
  encoded.doc_starts = torch::tensor(starts, torch::kLong);  // [n_docs]
  return encoded;
}

EncodedSplit encode_to_file(const CorpusReader& reader, std::string_view split,
                            const Tokenizer& tokenizer, bool add_eos, const stdfs::path& path,
                            std::uint64_t fingerprint, std::int64_t chunk_bytes) {
  EncodedSplitWriter writer(path, tokenizer.vocab_size(), fingerprint);
  std::int64_t lines = 0;
  reader.read_split(split, chunk_bytes, [&](CorpusSplit&& chunk) {
    try {
      writer.append(encode_chunk(chunk, tokenizer, add_eos, lines));
    } catch (const Error& e) {  // e.g. invalid UTF-8 for sentencepiece: say which split
      TXL_FAIL("corpus '", reader.name(), "', ", split, " split: ", e.what());
    }
    lines += static_cast<std::int64_t>(chunk.lines.size());
  });
  writer.commit();
  CacheMiss miss;
  auto written = read_encoded_split(path, fingerprint, tokenizer.vocab_size(), &miss);
  TXL_CHECK(written.has_value(), "cannot read back ", path.string(),
            " just written: ", miss.reason);
  return std::move(*written);
}

EncodedSplit encode_text_file(const stdfs::path& path, const Tokenizer& tokenizer, bool add_eos) {
  std::string bytes = fs::read_file(path);
  TXL_CHECK(!bytes.empty(), "cannot encode ", path.string(), ": the file is empty");
  CorpusSplit split;
  split.n_bytes = static_cast<std::int64_t>(bytes.size());
  split.n_chars = count_utf8_chars(bytes);
  split.lines = split_lines(bytes);
  split.doc_starts = {0};
  try {
    return encode_split(split, tokenizer, add_eos);
  } catch (const Error& e) {
    TXL_FAIL(path.string(), ": ", e.what());
  }
}

// ---------------------------------------------------------------------------- dataset

namespace {

// <cache_dir>/<corpus><infix><16 hex digits of hash(corpus source, key)>
stdfs::path cache_folder(const config::DataConfig& cfg, const CorpusReader& reader,
                         const std::string& infix, const std::string& key) {
  return stdfs::path(cfg.cache_dir) /
         (reader.name() + infix + fs::hex64(fs::fnv1a(reader.source_key() + "\n" + key)));
}

Dataset empty_dataset(const CorpusReader& reader, std::uint64_t corpus_fp, const stdfs::path& dir) {
  Dataset ds;
  ds.corpus = reader.name();
  ds.corpus_fingerprint = fs::hex64(corpus_fp);
  ds.stats.cache_path = dir;
  return ds;
}

void report_miss(const stdfs::path& file, const CacheMiss& miss) {
  if (miss.kind == CacheMiss::Kind::kMissing) return;
  if (miss.kind == CacheMiss::Kind::kDamaged)
    log::warn("data", "cache {} is damaged: {}; rebuilding it", file.string(), miss.reason);
  else if (miss.kind == CacheMiss::Kind::kOutdated)
    log::warn("data", "cache {} was written by another version of txl ({}); rebuilding it",
              file.string(), miss.reason);
  else
    log::info("data", "cache {}: {}; rebuilding", file.string(), miss.reason);
}

// Each split of *ds from its file in `dir` when that is sound and current, else encoded with
// ds->tokenizer and written there.
void load_splits(const stdfs::path& dir, std::uint64_t corpus_fp, bool add_eos,
                 const CorpusReader& reader, Dataset* ds) {
  const Tokenizer& tokenizer = *ds->tokenizer;
  const std::pair<const char*, EncodedSplit*> parts[] = {
      {"train", &ds->train}, {"valid", &ds->valid}, {"test", &ds->test}};
  for (const auto& [name, target] : parts) {
    const std::uint64_t fp = split_fingerprint(corpus_fp, name, tokenizer, add_eos);
    const stdfs::path file = dir / (std::string(name) + ".bin");
    CacheMiss miss;
    if (auto cached = read_encoded_split(file, fp, tokenizer.vocab_size(), &miss)) {
      *target = std::move(*cached);
      ++ds->stats.splits_reused;
      continue;
    }
    report_miss(file, miss);
    auto start = Clock::now();
    *target = encode_to_file(reader, name, tokenizer, add_eos, file, fp, kEncodeChunkBytes);
    ds->stats.encode_seconds += seconds_since(start);
    ds->stats.encoded_tokens += target->ids.numel();
  }
}

void log_summary(const Dataset& ds) {
  for (const char* name : {"train", "valid", "test"}) {
    const EncodedSplit& s = ds.split(name);
    log::info("data", "{} {}: {} tokens, {} bytes ({:.3f} tokens/byte), {} documents", ds.corpus,
              name, grouped(s.ids.numel()), grouped(s.n_bytes),
              s.n_bytes ? static_cast<double>(s.ids.numel()) / static_cast<double>(s.n_bytes) : 0.0,
              grouped(s.doc_starts.numel()));
  }
  const std::string where = ds.stats.cache_path.string();
  if (ds.stats.encoded_tokens > 0) {
    log::info("data",
              "read, encoded and cached {} tokens in {:.2f} s ({} tokens/s); vocab {}; cache {}",
              grouped(ds.stats.encoded_tokens), ds.stats.encode_seconds,
              grouped(static_cast<std::int64_t>(ds.stats.tokens_per_second())),
              ds.tokenizer->vocab_size(), where);
  } else {
    log::info("data", "all splits from cache {}; vocab {}", where, ds.tokenizer->vocab_size());
  }
}

// The usual cache folder of cfg when the tokenizer it holds for this corpus (the one
// load_dataset(cfg) would use) is `fixed`; otherwise empty, with `own` saying what the corpus's
// own tokenizer is. Writes nothing.
stdfs::path own_folder_if_same(const config::DataConfig& cfg, const CorpusReader& reader,
                               std::uint64_t corpus_fp, const Tokenizer& fixed, std::string* own) {
  std::string options;
  try {
    options = tokenizer_options_key(cfg.tokenizer);
  } catch (const Error& e) {
    *own = std::string("unavailable: ") + e.what();
    return {};
  }
  const stdfs::path dir = cache_folder(cfg, reader, "-", options);
  std::string why;
  auto cached = find_cached_tokenizer(cfg.tokenizer, corpus_fp, dir, &why);
  if (!cached) {
    *own = why.empty() ? "not built yet in " + dir.string() : why;
    return {};
  }
  if (cached->kind() == fixed.kind() && cached->fingerprint() == fixed.fingerprint()) return dir;
  *own = cached->kind() + " " + cached->fingerprint() + " in " + dir.string();
  return {};
}

}  // namespace

std::string describe(const Dataset& dataset) {
  const DatasetStats& st = dataset.stats;
  const Tokenizer& tokenizer = *dataset.tokenizer;
  std::string out = fmt::format("corpus      {}\n", dataset.corpus);
  out += fmt::format(
      "tokenizer   {} (vocab {}, fingerprint {}) {}\n", tokenizer.kind(), tokenizer.vocab_size(),
      tokenizer.fingerprint(),
      st.tokenizer_reused ? "from cache" : fmt::format("built in {:.1f} s", st.tokenizer_seconds));
  for (const char* name : {"train", "valid", "test"}) {
    const EncodedSplit& s = dataset.split(name);
    out += fmt::format("{:<11} {} tokens, {} bytes, {} chars, {} words, {} documents\n", name,
                       s.ids.numel(), s.n_bytes, s.n_chars, s.n_words, s.doc_starts.numel());
  }
  if (st.encoded_tokens > 0) {
    out += fmt::format(
        "encoding    {} tokens in {:.2f} s ({:.0f} tokens/s, reading the text and writing the "
        "cache included)\n",
        st.encoded_tokens, st.encode_seconds, st.tokens_per_second());
  }
  out += fmt::format(
      "cache       {} ({})\n", st.cache_path.string(),
      st.splits_reused == 3 ? "hit" : fmt::format("rebuilt {} of 3 splits", 3 - st.splits_reused));
  return out;
}

Dataset load_dataset(const config::DataConfig& cfg) {
  auto reader = make_corpus_reader(cfg);
  const std::string options = tokenizer_options_key(cfg.tokenizer);
  const std::uint64_t corpus_fp = reader->fingerprint();
  const stdfs::path dir = cache_folder(cfg, *reader, "-", options);
  Dataset ds = empty_dataset(*reader, corpus_fp, dir);

  auto tok_start = Clock::now();
  const TrainText train_text = [&](const LineVisitor& visit) {
    reader->read_split("train", kEncodeChunkBytes, [&](CorpusSplit&& chunk) {
      for (const auto& line : chunk.lines) visit(line);
    });
  };
  ds.tokenizer =
      make_tokenizer(cfg.tokenizer, train_text, corpus_fp, dir, &ds.stats.tokenizer_reused);
  if (!ds.stats.tokenizer_reused) ds.stats.tokenizer_seconds = seconds_since(tok_start);

  load_splits(dir, corpus_fp, cfg.add_eos, *reader, &ds);
  log_summary(ds);
  return ds;
}

Dataset load_dataset(const config::DataConfig& cfg, std::shared_ptr<const Tokenizer> fixed) {
  TXL_CHECK(fixed != nullptr, "load_dataset: the given tokenizer is null");
  auto reader = make_corpus_reader(cfg);
  const std::uint64_t corpus_fp = reader->fingerprint();
  std::string own;
  stdfs::path dir = own_folder_if_same(cfg, *reader, corpus_fp, *fixed, &own);
  if (dir.empty()) {
    dir = cache_folder(cfg, *reader, "-given-",
                       "given-tokenizer=" + fixed->kind() + ":" + fixed->fingerprint());
    log::warn("data",
              "the tokenizer of corpus {} (data.tokenizer: {}) differs from the given {} "
              "tokenizer {}; encoding with the given one, cached in {}",
              reader->name(), own, fixed->kind(), fixed->fingerprint(), dir.string());
    std::error_code ec;
    if (!stdfs::is_regular_file(dir / "tokenizer.meta", ec)) fixed->save(dir);
  }
  Dataset ds = empty_dataset(*reader, corpus_fp, dir);
  ds.tokenizer = std::move(fixed);
  ds.stats.tokenizer_given = true;
  load_splits(dir, corpus_fp, cfg.add_eos, *reader, &ds);
  log_summary(ds);
  return ds;
}

}  // namespace txl::data
