#pragma once
// The safetensors file layout (Hugging Face): a data-only container of named tensors that any
// language can read without running code from the file.
//
//   8 bytes      N, the header length, unsigned little-endian
//   N bytes      JSON object: {"<name>": {"dtype": "F32", "shape": [2, 3],
//                                         "data_offsets": [begin, end]}, ...,
//                              "__metadata__": {"<key>": "<value>", ...}}  (strings only)
//   the rest     the data section: each tensor's bytes, row-major, little-endian, at
//                [begin, end) relative to the start of the data section
//
// serialize() pads the header with spaces so that the data section starts at a multiple of 8
// bytes. parse() accepts any N and checks everything the header claims before it copies a
// byte: the data section must be covered exactly, with no holes and no overlaps.

#include <torch/torch.h>

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace txl::safetensors {

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;
using Metadata = std::map<std::string, std::string>;

// The largest header parse() accepts (the reference implementation's limit, 100 MB).
inline constexpr std::size_t kMaxHeaderBytes = 100'000'000;

// The bytes of a safetensors file holding `tensors` (any device; copied to CPU, contiguous; data
// in the given order) and `metadata`. Throws txl::Error for an undefined or sparse tensor, an
// empty, reserved ("__metadata__"), duplicate or non-UTF-8 name, a non-UTF-8 metadata entry, or
// an unsupported dtype. Supported: F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL.
std::string serialize(const NamedTensors& tensors, const Metadata& metadata = {});

struct File {
  Metadata metadata;
  NamedTensors tensors;  // CPU tensors owning their memory, in data order
};

// Parses the bytes of a file; throws txl::Error naming `origin` (a path, or a description) for
// anything malformed and never reads out of bounds: short file, header length beyond the file
// (or over kMaxHeaderBytes), invalid JSON, a duplicate key at any level, a non-object entry,
// missing or unknown fields, unknown dtype, a negative, fractional or overflowing shape, byte
// size != numel x element size, offsets out of range / overlapping / leaving holes, an empty
// name, metadata that is not an object of strings.
File parse(std::string_view bytes, const std::string& origin);

// The safetensors name of a dtype ("F32", ...); throws txl::Error for an unsupported one.
std::string dtype_name(torch::ScalarType dtype);

}  // namespace txl::safetensors
