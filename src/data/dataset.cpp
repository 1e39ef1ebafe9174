#include "txl/data/dataset.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <fstream>
#include <thread>

#include "txl/util/error.h"
#include "txl/util/fs.h"
#include "txl/util/log.h"

namespace txl::data {

namespace stdfs = std::filesystem;

namespace {

constexpr char kMagic[8] = {'T', 'X', 'L', 'T', 'O', 'K', 'S', '\0'};
constexpr std::uint32_t kDtypeUint16 = 1, kDtypeInt32 = 2;
constexpr std::size_t kHeaderSize = 56;

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

template <typename T>
void put(std::string* out, T value) {
  out->append(reinterpret_cast<const char*>(&value), sizeof value);
}

template <typename T>
T get(const char* data) {
  T value;
  std::memcpy(&value, data, sizeof value);
  return value;
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
  if (name == "train") return train;
  if (name == "valid") return valid;
  if (name == "test") return test;
  TXL_FAIL("unknown split '", name, "': expected train, valid or test");
}

// --------------------------------------------------------------------------- encoding

EncodedSplit encode_split(const CorpusSplit& split, const Tokenizer& tokenizer, bool add_eos) {
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
      }
    } catch (const std::exception& e) {
      error_context[c] = "line " + std::to_string(i + 1) + " of the split: " + e.what();
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
    std::int64_t offset = line_offset[static_cast<size_t>(line)];
    // An empty document (no tokens) does not start anywhere new.
    if (offset < chunk_start[n_chunks] && (starts.empty() || offset > starts.back()))
      starts.push_back(offset);
  }
  if (starts.empty() || starts.front() != 0) starts.insert(starts.begin(), 0);
  encoded.doc_starts = torch::tensor(starts, torch::kLong);  // [n_docs]
  encoded.n_bytes = split.n_bytes;
  encoded.n_chars = split.n_chars;
  return encoded;
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

// ------------------------------------------------------------------------ cache files

void write_encoded_split(const stdfs::path& path, const EncodedSplit& split,
                         std::int64_t vocab_size, std::uint64_t fingerprint) {
  TXL_CHECK(split.ids.dtype() == torch::kLong && split.ids.dim() == 1,
            "encoded ids must be int64 [N]");
  const std::uint32_t dtype = vocab_size <= 65536 ? kDtypeUint16 : kDtypeInt32;
  const size_t elem = dtype == kDtypeUint16 ? 2 : 4;
  auto ids = split.ids.contiguous();
  auto starts = split.doc_starts.to(torch::kLong).contiguous();
  const auto n = static_cast<std::uint64_t>(ids.numel());
  const auto n_docs = static_cast<std::uint64_t>(starts.numel());
  std::string out;
  out.reserve(kHeaderSize + n_docs * 8 + n * elem);
  out.append(kMagic, sizeof kMagic);
  put<std::uint32_t>(&out, kCacheVersion);
  put<std::uint32_t>(&out, dtype);
  put<std::uint64_t>(&out, n);
  put<std::uint64_t>(&out, n_docs);
  put<std::int64_t>(&out, split.n_bytes);
  put<std::int64_t>(&out, split.n_chars);
  put<std::uint64_t>(&out, fingerprint);
  out.append(reinterpret_cast<const char*>(starts.data_ptr<std::int64_t>()), n_docs * 8);
  const auto* src = ids.data_ptr<std::int64_t>();
  const size_t body = out.size();
  out.resize(body + n * elem);
  char* dst = out.data() + body;
  for (std::uint64_t i = 0; i < n; ++i) {
    TXL_CHECK(src[i] >= 0 && src[i] < vocab_size, "token id ", src[i], " at ", i,
              " outside the vocabulary [0, ", vocab_size, ")");
    if (dtype == kDtypeUint16) {
      auto v = static_cast<std::uint16_t>(src[i]);
      std::memcpy(dst + i * 2, &v, 2);
    } else {
      auto v = static_cast<std::int32_t>(src[i]);
      std::memcpy(dst + i * 4, &v, 4);
    }
  }
  fs::write_atomic(path, out);
}

std::optional<EncodedSplit> read_encoded_split(const stdfs::path& path,
                                               std::uint64_t expected_fingerprint,
                                               std::string* why) {
  auto fail = [&](std::string reason) -> std::optional<EncodedSplit> {
    if (why) *why = std::move(reason);
    return std::nullopt;
  };
  std::error_code ec;
  if (!stdfs::is_regular_file(path, ec)) return fail("not cached yet");
  const auto file_size = stdfs::file_size(path, ec);
  if (ec) return fail("cannot stat: " + ec.message());
  std::ifstream in(path, std::ios::binary);
  if (!in) return fail("cannot open");
  char header[kHeaderSize];
  if (file_size < kHeaderSize || !in.read(header, kHeaderSize))
    return fail("truncated (" + std::to_string(file_size) + " bytes, shorter than the header)");
  if (std::memcmp(header, kMagic, sizeof kMagic) != 0) return fail("foreign file (bad magic)");
  const auto version = get<std::uint32_t>(header + 8);
  if (version != kCacheVersion)
    return fail("format version " + std::to_string(version) + ", expected " +
                std::to_string(kCacheVersion));
  const auto dtype = get<std::uint32_t>(header + 12);
  if (dtype != kDtypeUint16 && dtype != kDtypeInt32)
    return fail("foreign file (unknown dtype " + std::to_string(dtype) + ")");
  const auto n = get<std::uint64_t>(header + 16);
  const auto n_docs = get<std::uint64_t>(header + 24);
  const size_t elem = dtype == kDtypeUint16 ? 2 : 4;
  // Guard the multiplication against a garbage header before trusting the sizes.
  if (n > (std::uint64_t{1} << 40) || n_docs > (std::uint64_t{1} << 40) ||
      file_size != kHeaderSize + n_docs * 8 + n * elem)
    return fail("truncated or damaged (" + std::to_string(file_size) + " bytes, header says " +
                std::to_string(kHeaderSize + n_docs * 8 + n * elem) + ")");
  if (get<std::uint64_t>(header + 48) != expected_fingerprint)
    return fail("stale (corpus, tokenizer or options changed)");

  EncodedSplit split;
  split.n_bytes = get<std::int64_t>(header + 32);
  split.n_chars = get<std::int64_t>(header + 40);
  split.doc_starts = torch::empty({static_cast<std::int64_t>(n_docs)}, torch::kLong);
  in.read(reinterpret_cast<char*>(split.doc_starts.data_ptr<std::int64_t>()),
          static_cast<std::streamsize>(n_docs * 8));
  split.ids = torch::empty({static_cast<std::int64_t>(n)}, torch::kLong);  // [N]
  auto* dst = split.ids.data_ptr<std::int64_t>();
  if (dtype == kDtypeInt32) {
    std::vector<std::int32_t> buffer(n);
    in.read(reinterpret_cast<char*>(buffer.data()), static_cast<std::streamsize>(n * 4));
    std::copy(buffer.begin(), buffer.end(), dst);
  } else {
    std::vector<std::uint16_t> buffer(n);
    in.read(reinterpret_cast<char*>(buffer.data()), static_cast<std::streamsize>(n * 2));
    std::copy(buffer.begin(), buffer.end(), dst);
  }
  if (!in) return fail("read error");
  // Document starts: 0 first, strictly increasing, inside the ids.
  const auto* starts = split.doc_starts.data_ptr<std::int64_t>();
  bool starts_ok = n_docs > 0 && starts[0] == 0;
  for (std::uint64_t d = 1; starts_ok && d < n_docs; ++d)
    starts_ok = starts[d] > starts[d - 1] && starts[d] < static_cast<std::int64_t>(n);
  if (!starts_ok) return fail("damaged (document starts out of order or range)");
  return split;
}

// ---------------------------------------------------------------------------- dataset

Dataset load_dataset(const config::DataConfig& cfg) {
  auto reader = make_corpus_reader(cfg);
  const std::string options = tokenizer_options_key(cfg.tokenizer);
  const std::uint64_t corpus_fp = reader->fingerprint();
  const stdfs::path dir =
      stdfs::path(cfg.cache_dir) /
      (reader->name() + "-" + fs::hex64(fs::fnv1a(reader->source_key() + "\n" + options)));

  Dataset ds;
  ds.corpus = reader->name();
  ds.stats.cache_path = dir;
  // The corpus text is read only when something must be built.
  std::optional<CorpusText> text;
  auto corpus_text = [&]() -> const CorpusText& {
    if (!text) {
      auto start = Clock::now();
      text = reader->read();
      std::int64_t lines = 0;
      for (const CorpusSplit* s : {&text->train, &text->valid, &text->test})
        lines += static_cast<std::int64_t>(s->lines.size());
      log::info("data", "read corpus {} in {:.1f} s: {} lines", ds.corpus, seconds_since(start),
                grouped(lines));
    }
    return *text;
  };

  auto tok_start = Clock::now();
  ds.tokenizer = make_tokenizer(
      cfg.tokenizer, [&]() -> const std::vector<std::string>& { return corpus_text().train.lines; },
      corpus_fp, dir, &ds.stats.tokenizer_reused);
  if (!ds.stats.tokenizer_reused) ds.stats.tokenizer_seconds = seconds_since(tok_start);

  const std::pair<const char*, EncodedSplit*> parts[] = {
      {"train", &ds.train}, {"valid", &ds.valid}, {"test", &ds.test}};
  for (const auto& [name, target] : parts) {
    const std::uint64_t fp = split_fingerprint(corpus_fp, name, *ds.tokenizer, cfg.add_eos);
    const stdfs::path file = dir / (std::string(name) + ".bin");
    std::string why;
    if (auto cached = read_encoded_split(file, fp, &why)) {
      *target = std::move(*cached);
      ++ds.stats.splits_reused;
      continue;
    }
    if (why != "not cached yet") log::info("data", "cache {}: {}; rebuilding", file.string(), why);
    const CorpusSplit& split = corpus_text().split(name);
    auto start = Clock::now();
    try {
      *target = encode_split(split, *ds.tokenizer, cfg.add_eos);
    } catch (const Error& e) {  // e.g. invalid UTF-8 for sentencepiece: say which split
      TXL_FAIL("corpus '", ds.corpus, "', ", name, " split: ", e.what());
    }
    ds.stats.encode_seconds += seconds_since(start);
    ds.stats.encoded_tokens += target->ids.numel();
    write_encoded_split(file, *target, ds.tokenizer->vocab_size(), fp);
  }

  for (const auto& [name, target] : parts) {
    const EncodedSplit& s = *target;
    log::info("data", "{} {}: {} tokens, {} bytes ({:.3f} tokens/byte), {} documents", ds.corpus,
              name, grouped(s.ids.numel()), grouped(s.n_bytes),
              s.n_bytes ? static_cast<double>(s.ids.numel()) / static_cast<double>(s.n_bytes) : 0.0,
              grouped(s.doc_starts.numel()));
  }
  if (ds.stats.encoded_tokens > 0) {
    log::info("data", "encoded {} tokens in {:.2f} s ({} tokens/s); vocab {}; cache {}",
              grouped(ds.stats.encoded_tokens), ds.stats.encode_seconds,
              grouped(static_cast<std::int64_t>(ds.stats.tokens_per_second())),
              ds.tokenizer->vocab_size(), dir.string());
  } else {
    log::info("data", "all splits from cache {}; vocab {}", dir.string(),
              ds.tokenizer->vocab_size());
  }
  return ds;
}

}  // namespace txl::data
