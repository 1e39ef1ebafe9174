// libFuzzer target: the checkpoint reader, models::parse_checkpoint, on any bytes. It may only
// refuse with txl::Error; it must never crash, leak or accept a file whose layout it did not
// check.
//
// A mutated file almost never carries the right SHA-256, so each input that still parses as a
// safetensors file with a record is also resealed with the checksum of its own contents: that
// reaches the checks behind the checksum (the record's JSON, the stored experiment, the
// tokenizer tensor).

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "txl/models/checkpoint.h"
#include "txl/util/error.h"
#include "txl/util/safetensors.h"

namespace {

void parse(std::string_view bytes) {
  try {
    const auto c = txl::models::parse_checkpoint(bytes, "fuzz");
    if (c.vocab_size < 0) __builtin_trap();
    for (const auto& [name, t] : c.tensors)
      if (name.empty() || !t.defined()) __builtin_trap();
  } catch (const txl::Error&) {
  }
}

// The input with its sha256 recomputed, or "" when it is no safetensors file with a record.
std::string resealed(std::string_view bytes) {
  try {
    auto file = txl::safetensors::parse(bytes, "fuzz");
    auto record = file.metadata.find("record");
    if (record == file.metadata.end()) return "";
    file.metadata["sha256"] =
        txl::models::detail::checkpoint_checksum(record->second, file.tensors);
    return txl::safetensors::serialize(file.tensors, file.metadata);
  } catch (const txl::Error&) {
    return "";
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  parse(bytes);
  const std::string sealed = resealed(bytes);
  if (!sealed.empty()) parse(sealed);
  return 0;
}
