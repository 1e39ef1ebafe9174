// libFuzzer target: the encoded-cache parser, data::parse_encoded_split, on any bytes. It must
// never throw or crash, and what it accepts must keep its promises (ids in the vocabulary,
// document starts from 0, increasing, inside the ids).
//
// A random file almost never carries the right checksum, so each input is parsed twice: as it
// is (the header and checksum checks), and resealed with the checksum of its own bytes (the
// checks behind the checksum: document starts, id widths, the vocabulary).

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "txl/data/dataset.h"

namespace {

// Small enough that uint16 ids can fall outside it, large enough for the seeds' ids.
constexpr std::int64_t kVocab = 300;

void parse_and_check(std::string_view bytes) {
  std::uint64_t fingerprint = 0;  // the file's own, so staleness does not stop the parse
  if (bytes.size() >= 56) std::memcpy(&fingerprint, bytes.data() + 48, 8);
  auto split = txl::data::parse_encoded_split(bytes, fingerprint, kVocab);
  if (!split) return;
  const auto n = split->ids.numel();
  const auto wide = split->ids.to(torch::kLong);  // [N]
  const auto* ids = wide.data_ptr<std::int64_t>();
  for (std::int64_t i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= kVocab) __builtin_trap();
  const auto n_docs = split->doc_starts.numel();
  const auto* starts = split->doc_starts.data_ptr<std::int64_t>();
  if (n_docs < 1 || starts[0] != 0) __builtin_trap();
  for (std::int64_t d = 1; d < n_docs; ++d)
    if (starts[d] <= starts[d - 1] || starts[d] >= n) __builtin_trap();
  if (split->n_bytes < 0 || split->n_chars < 0) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  parse_and_check(bytes);
  if (size >= 64) {
    std::string sealed(bytes);
    const std::uint64_t checksum = txl::data::encoded_split_checksum(sealed);
    std::memcpy(sealed.data() + 56, &checksum, 8);
    parse_and_check(sealed);
  }
  return 0;
}
