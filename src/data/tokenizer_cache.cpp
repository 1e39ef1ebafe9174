// The cache of trained tokenizers: the key of a tokenizer's options, the fingerprint of its
// training text, and finding (or training and storing) the tokenizer an experiment asks for.
#include <filesystem>

#include "tokenizer_meta.h"
#include "txl/data/tokenizer.h"
#include "txl/util/error.h"
#include "txl/util/fs.h"
#include "txl/util/log.h"

namespace txl::data {

namespace stdfs = std::filesystem;
using detail::format_meta;
using detail::hex_of;
using detail::kSourceFile;
using detail::Meta;
using detail::parse_meta;

std::string tokenizer_options_key(const config::TokenizerConfig& cfg) {
  using config::TokenizerType;
  if (cfg.type == TokenizerType::kByte) return "byte";
  if (cfg.type == TokenizerType::kWord) return "word:min_count=" + std::to_string(cfg.min_count);
  // Only a value cast from a number fails these checks: the loader takes names from the tables.
  TXL_CHECK(cfg.type == TokenizerType::kSentencePiece, "unknown data.tokenizer.type '",
            config::to_string(cfg.type), "': expected sentencepiece, byte or word");
  if (!cfg.model_path.empty()) {
    std::error_code ec;
    TXL_CHECK(stdfs::is_regular_file(cfg.model_path, ec), "data.tokenizer.model_path: file not ",
              "found: ", cfg.model_path);
    return "sentencepiece:model=" + hex_of(fs::fingerprint_file(cfg.model_path));
  }
  const std::string mt = config::to_string(cfg.model_type);
  TXL_CHECK(config::is_named(cfg.model_type), "unknown data.tokenizer.model_type '", mt,
            "': expected unigram, bpe, char or word");
  std::string key = "sentencepiece:model_type=" + mt +
                    ",vocab_size=" + std::to_string(cfg.vocab_size) +
                    ",character_coverage=" + std::to_string(cfg.character_coverage) +
                    ",max_sentences=" + std::to_string(cfg.max_sentences) + ",user_symbols=";
  for (const auto& s : cfg.user_symbols) key += s + "\x1f";
  return key;
}

std::uint64_t fingerprint_lines(const std::vector<std::string>& lines) {
  std::uint64_t h = fs::fnv1a("lines");
  for (const auto& line : lines) {
    h = fs::fnv1a(line, h);
    h = fs::fnv1a("\n", h);
  }
  return h;
}

namespace {

// What a cached tokenizer's tokenizer.source must say: the options, and the fingerprint of the
// training text ("-" when the tokenizer does not depend on it: byte, or a given .model file).
Meta tokenizer_source(const config::TokenizerConfig& cfg, std::uint64_t train_fingerprint) {
  const bool text_free =
      cfg.type == config::TokenizerType::kByte ||
      (cfg.type == config::TokenizerType::kSentencePiece && !cfg.model_path.empty());
  return {{"options", tokenizer_options_key(cfg)},
          {"trained_on", text_free ? "-" : hex_of(train_fingerprint)}};
}

}  // namespace

std::shared_ptr<Tokenizer> find_cached_tokenizer(const config::TokenizerConfig& cfg,
                                                 std::uint64_t train_fingerprint,
                                                 const stdfs::path& dir, std::string* why) {
  std::string reason;
  Meta expected = tokenizer_source(cfg, train_fingerprint);
  std::error_code ec;
  if (!dir.empty() && stdfs::is_regular_file(dir / kSourceFile, ec)) {
    Meta source = parse_meta(fs::read_file(dir / kSourceFile));
    if (source["options"] != expected["options"] ||
        source["trained_on"] != expected["trained_on"]) {
      reason = "tokenizer in " + dir.string() + " is stale (" +
               (source["options"] != expected["options"] ? "options" : "training text") +
               " changed)";
    } else {
      try {
        return load_tokenizer(dir);
      } catch (const std::exception& e) {
        reason = std::string("tokenizer cache unusable: ") + e.what();
      }
    }
  }
  if (why) *why = reason;
  return nullptr;
}

std::shared_ptr<Tokenizer> make_tokenizer(const config::TokenizerConfig& cfg,
                                          const TrainText& train_text,
                                          std::uint64_t train_fingerprint, const stdfs::path& dir,
                                          bool* reused) {
  const Meta source = tokenizer_source(cfg, train_fingerprint);
  if (reused) *reused = false;
  std::string why;
  if (auto tok = find_cached_tokenizer(cfg, train_fingerprint, dir, &why)) {
    if (reused) *reused = true;
    log::info("data", "tokenizer: reusing {} ({}, vocab {})", dir.string(), tok->kind(),
              tok->vocab_size());
    return tok;
  }
  if (!why.empty()) log::info("data", "{}; rebuilding", why);
  std::shared_ptr<Tokenizer> tok;
  if (cfg.type == config::TokenizerType::kByte) {
    tok = make_byte_tokenizer();
  } else if (cfg.type == config::TokenizerType::kWord) {
    tok = build_word_tokenizer(train_text, cfg.min_count);
  } else if (!cfg.model_path.empty()) {
    tok = load_sentencepiece(cfg.model_path);
  } else {
    tok = train_sentencepiece(cfg, train_text);
  }
  if (!dir.empty()) {
    tok->save(dir);
    // Written last: a crash before this line leaves no claim that the files are complete.
    fs::write_atomic(dir / kSourceFile, format_meta({{"options", source.at("options")},
                                                     {"trained_on", source.at("trained_on")}}));
  }
  return tok;
}

std::shared_ptr<Tokenizer> make_tokenizer(const config::TokenizerConfig& cfg,
                                          const std::vector<std::string>& train_lines,
                                          const stdfs::path& dir) {
  return make_tokenizer(cfg, lines_text(train_lines), fingerprint_lines(train_lines), dir);
}

}  // namespace txl::data
