// libFuzzer target: the tokenizer loader, data::deserialize_tokenizer, on any bytes. The first
// byte picks the kind (even: word, odd: sentencepiece), the rest are the serialized tokenizer.
// Allowed outcomes: a tokenizer or a txl::Error. Whatever loads must work: encode text (ids in
// the vocabulary), decode, name its pieces, and come back the same from its own serialize().
// Built without torch, with sentencepiece linked in (tests/fuzz/CMakeLists.txt says why).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "txl/data/corpus.h"
#include "txl/data/tokenizer.h"
#include "txl/util/error.h"
#include "txl/util/log.h"
#include "txl/util/text.h"

namespace {

void check(bool ok) {
  if (!ok) __builtin_trap();
}

// Encodes, decodes and names the pieces of `text`; returns the ids.
std::vector<std::int64_t> exercise(const txl::data::Tokenizer& tok, std::string_view text) {
  const auto ids = tok.encode(text);
  for (auto id : ids) {
    check(id >= 0 && id < tok.vocab_size());
    (void)tok.piece(id);
  }
  (void)tok.decode(ids);
  return ids;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const txl::log::ScopedLevel quiet(txl::log::Level::kQuiet);  // the whole fuzzing run
  if (size == 0) return 0;
  const std::string kind = data[0] % 2 ? "sentencepiece" : "word";
  const std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::shared_ptr<txl::data::Tokenizer> tok;
  try {
    tok = txl::data::detail::parse_tokenizer(kind, bytes, "fuzz input");
  } catch (const txl::Error&) {
    return 0;
  }
  check(tok->kind() == kind && tok->vocab_size() >= 3);
  std::vector<std::string> texts = {"In the beginning God created the heaven and the earth.", "",
                                    "  two  spaces ", "\xC3\xA9t\xC3\xA9 \xE2\x98\x83 <unk>"};
  // Text from the input itself, when it is UTF-8 (sentencepiece refuses anything else).
  const std::string_view tail = bytes.substr(bytes.size() > 64 ? bytes.size() - 64 : 0);
  if (!txl::util::find_invalid_utf8(tail)) texts.emplace_back(tail);
  std::vector<std::vector<std::int64_t>> ids;
  for (const auto& text : texts) ids.push_back(exercise(*tok, text));
  for (std::int64_t id = 0; id < std::min<std::int64_t>(tok->vocab_size(), 64); ++id)
    (void)tok->decode({id});

  auto back = txl::data::deserialize_tokenizer(kind, tok->serialize(), tok->fingerprint(), "again");
  check(back->fingerprint() == tok->fingerprint());
  for (size_t i = 0; i < texts.size(); ++i) check(back->encode(texts[i]) == ids[i]);
  try {
    txl::data::deserialize_tokenizer(kind, bytes, "not-a-fingerprint", "fuzz input");
    check(false);
  } catch (const txl::Error&) {
  }
  return 0;
}
