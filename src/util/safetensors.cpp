#include "txl/util/safetensors.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <set>
#include <unordered_set>

#include "txl/util/error.h"
#include "txl/util/json.h"

// The data section is the tensors' memory as it is: the format is little-endian.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors I/O assumes a little-endian host");

namespace txl::safetensors {
namespace {

using Json = nlohmann::json;

constexpr const char* kMetadataKey = "__metadata__";

struct Dtype {
  const char* name;
  torch::ScalarType type;
  std::size_t size;  // bytes per element
};

constexpr Dtype kDtypes[] = {
    {"F64", torch::kDouble, 8},    {"F32", torch::kFloat, 4}, {"F16", torch::kHalf, 2},
    {"BF16", torch::kBFloat16, 2}, {"I64", torch::kLong, 8},  {"I32", torch::kInt, 4},
    {"I16", torch::kShort, 2},     {"I8", torch::kChar, 1},   {"U8", torch::kByte, 1},
    {"BOOL", torch::kBool, 1},
};

std::string supported_names() {
  std::string names;
  for (const Dtype& d : kDtypes) names += (names.empty() ? "" : " ") + std::string(d.name);
  return names;
}

const Dtype* find_dtype(torch::ScalarType type) {
  for (const Dtype& d : kDtypes)
    if (d.type == type) return &d;
  return nullptr;
}

const Dtype& dtype_of(torch::ScalarType type) {
  const Dtype* dtype = find_dtype(type);
  TXL_CHECK(dtype != nullptr, "safetensors: unsupported dtype ", c10::toString(type),
            " (supported: ", supported_names(), ")");
  return *dtype;
}

const Dtype* dtype_named(const std::string& name) {
  for (const Dtype& d : kDtypes)
    if (name == d.name) return &d;
  return nullptr;
}

// ---- serialize ---------------------------------------------------------------------------------

// Each tensor on the CPU, contiguous (no copy when it already is), checked and named.
std::vector<torch::Tensor> cpu_tensors(const NamedTensors& tensors) {
  std::vector<torch::Tensor> cpu;
  cpu.reserve(tensors.size());
  std::unordered_set<std::string> seen;
  for (const auto& [name, tensor] : tensors) {
    TXL_CHECK(!name.empty(), "safetensors: tensor ", cpu.size(), " has an empty name");
    TXL_CHECK(name != kMetadataKey, "safetensors: the tensor name \"", name,
              "\" is reserved for the metadata");
    TXL_CHECK(seen.insert(name).second, "safetensors: duplicate tensor name \"", name, "\"");
    TXL_CHECK(tensor.defined(), "safetensors: tensor \"", name, "\" is undefined");
    TXL_CHECK(tensor.layout() == torch::kStrided, "safetensors: tensor \"", name,
              "\" is not dense (layout ", tensor.layout(), ")");
    TXL_CHECK(find_dtype(tensor.scalar_type()) != nullptr, "safetensors: tensor \"", name,
              "\" has the unsupported dtype ", c10::toString(tensor.scalar_type()),
              " (supported: ", supported_names(), ")");
    cpu.push_back(tensor.detach().to(torch::kCPU).contiguous());
  }
  return cpu;
}

// The JSON header, padded with spaces so that 8 + its length is a multiple of 8. Its keys come out
// sorted (nlohmann::ordered_json would keep the given order, at a linear search per insertion);
// the data keeps the given order.
std::string header_text(const NamedTensors& tensors, const std::vector<torch::Tensor>& cpu,
                        const Metadata& metadata, std::uint64_t& data_size) {
  Json header = Json::object();
  if (!metadata.empty()) header[kMetadataKey] = metadata;
  data_size = 0;
  for (std::size_t i = 0; i < cpu.size(); ++i) {
    const std::uint64_t bytes = cpu[i].nbytes();
    header[tensors[i].first] = {{"dtype", dtype_of(cpu[i].scalar_type()).name},
                                {"shape", cpu[i].sizes().vec()},
                                {"data_offsets", {data_size, data_size + bytes}}};
    data_size += bytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {
    TXL_FAIL("safetensors: a tensor name or metadata entry is not valid UTF-8 (", e.what(), ")");
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

}  // namespace

std::string dtype_name(torch::ScalarType dtype) { return dtype_of(dtype).name; }

std::string serialize(const NamedTensors& tensors, const Metadata& metadata) {
  const std::vector<torch::Tensor> cpu = cpu_tensors(tensors);
  std::uint64_t data_size = 0;
  const std::string header = header_text(tensors, cpu, metadata, data_size);
  std::string out;
  out.reserve(8 + header.size() + data_size);  // the only allocation of the output
  const std::uint64_t header_size = header.size();
  out.append(reinterpret_cast<const char*>(&header_size), 8);
  out.append(header);
  for (const torch::Tensor& t : cpu)
    if (t.nbytes() > 0) out.append(static_cast<const char*>(t.data_ptr()), t.nbytes());
  return out;
}

// ---- parse -------------------------------------------------------------------------------------

namespace {

// One tensor's header entry, checked against itself (not yet against the others).
struct Entry {
  std::string name;
  const Dtype* dtype;
  std::vector<std::int64_t> shape;
  std::uint64_t begin;
  std::uint64_t end;
};

std::string json_text(const Json& value) {
  std::string text = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  return text.size() > 60 ? text.substr(0, 57) + "..." : text;
}

// The header as JSON. nlohmann keeps the last of duplicate keys silently, so a parse callback
// tracks the keys of every open object and reports the first repeated one.
Json parse_json(std::string_view text, const std::string& origin) {
  TXL_CHECK(!json::nested_deeper_than(text), origin,
            ": the safetensors header nests arrays or "
            "objects deeper than ",
            json::kMaxDepth, " levels (a safetensors header has 3)");
  std::vector<std::set<std::string>> open_objects;
  std::string duplicate;
  Json::parser_callback_t track = [&](int, Json::parse_event_t event, Json& parsed) {
    if (event == Json::parse_event_t::object_start) open_objects.emplace_back();
    if (event == Json::parse_event_t::object_end) open_objects.pop_back();
    if (event == Json::parse_event_t::key && !open_objects.empty() && duplicate.empty() &&
        !open_objects.back().insert(parsed.get<std::string>()).second)
      duplicate = parsed.get<std::string>();
    return true;
  };
  Json header;
  try {
    header = Json::parse(text.begin(), text.end(), track);
  } catch (const nlohmann::json::exception& e) {
    TXL_FAIL(origin, ": the safetensors header is not valid JSON (", e.what(), ")");
  }
  TXL_CHECK(duplicate.empty(), origin, ": the safetensors header has the key \"", duplicate,
            "\" twice");
  TXL_CHECK(header.is_object(), origin, ": the safetensors header is ", header.type_name(),
            ", not a JSON object");
  return header;
}

Metadata parse_metadata(const Json& value, const std::string& origin) {
  TXL_CHECK(value.is_object(), origin, ": \"", kMetadataKey, "\" is ", json_text(value),
            ", not an object of strings");
  Metadata metadata;
  for (const auto& [key, text] : value.items()) {
    TXL_CHECK(text.is_string(), origin, ": metadata \"", key, "\" is ", json_text(text),
              ", not a string");
    metadata.emplace(key, text.get<std::string>());
  }
  return metadata;
}

// A non-negative integer that fits in int64 (shapes and offsets).
std::uint64_t count_value(const Json& value, const std::string& where) {
  TXL_CHECK(
      value.is_number_unsigned() &&
          value.get<std::uint64_t>() <= std::uint64_t(std::numeric_limits<std::int64_t>::max()),
      where, " holds ", json_text(value), ", not a non-negative integer below 2^63");
  return value.get<std::uint64_t>();
}

// The shape, and its byte size for `dtype`, refusing any product that overflows.
std::uint64_t parse_shape(const Json& value, const Dtype& dtype, const std::string& where,
                          std::vector<std::int64_t>& shape) {
  TXL_CHECK(value.is_array(), where, ": \"shape\" is ", json_text(value), ", not an array");
  std::uint64_t bytes = dtype.size;
  for (const Json& dim : value) {
    shape.push_back(static_cast<std::int64_t>(count_value(dim, where + ": \"shape\"")));
    const bool overflow = __builtin_mul_overflow(bytes, std::uint64_t(shape.back()), &bytes);
    TXL_CHECK(!overflow && bytes <= std::uint64_t(std::numeric_limits<std::int64_t>::max()), where,
              ": shape ", json_text(value), " of ", dtype.name, " overflows 2^63 bytes");
  }
  return bytes;
}

Entry parse_entry(const std::string& name, const Json& value, const std::string& origin) {
  const std::string where = origin + ": tensor \"" + name + "\"";
  TXL_CHECK(!name.empty(), origin, ": a tensor has an empty name");
  TXL_CHECK(value.is_object(), where, " is ", json_text(value), ", not an object");
  for (const auto& [key, field] : value.items())
    TXL_CHECK(key == "dtype" || key == "shape" || key == "data_offsets", where,
              " has the unknown field \"", key, "\" (allowed: dtype, shape, data_offsets)");
  for (const char* key : {"dtype", "shape", "data_offsets"})
    TXL_CHECK(value.contains(key), where, " has no \"", key, "\"");
  const Json& dtype = value.at("dtype");
  const Dtype* type = dtype.is_string() ? dtype_named(dtype.get<std::string>()) : nullptr;
  TXL_CHECK(type != nullptr, where, ": unknown dtype ", json_text(dtype),
            " (supported: ", supported_names(), ")");
  Entry entry{name, type, {}, 0, 0};
  const std::uint64_t bytes = parse_shape(value.at("shape"), *type, where, entry.shape);
  const Json& offsets = value.at("data_offsets");
  TXL_CHECK(offsets.is_array() && offsets.size() == 2, where, ": \"data_offsets\" is ",
            json_text(offsets), ", not [begin, end]");
  entry.begin = count_value(offsets[0], where + ": \"data_offsets\"");
  entry.end = count_value(offsets[1], where + ": \"data_offsets\"");
  TXL_CHECK(entry.begin <= entry.end && entry.end - entry.begin == bytes, where, ": data_offsets ",
            json_text(offsets), " do not hold the ", bytes, " bytes of shape ",
            json_text(value.at("shape")), " ", type->name);
  return entry;
}

// Sorts the entries into data order and checks that they tile [0, data_size) exactly.
void check_layout(std::vector<Entry>& entries, std::uint64_t data_size, const std::string& origin) {
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  std::uint64_t covered = 0;  // [0, covered) is accounted for
  const Entry* previous = nullptr;
  for (const Entry& e : entries) {
    TXL_CHECK(e.end <= data_size, origin, ": tensor \"", e.name, "\" ends at byte ", e.end,
              " but the data section has ", data_size, " bytes");
    TXL_CHECK(e.begin >= covered, origin, ": tensor \"", e.name, "\" at [", e.begin, ", ", e.end,
              ") overlaps tensor \"", previous ? previous->name : "", "\" which ends at ", covered);
    TXL_CHECK(e.begin == covered, origin, ": the data section has a hole at bytes [", covered, ", ",
              e.begin, ") before tensor \"", e.name, "\"");
    covered = e.end;
    previous = &e;
  }
  TXL_CHECK(covered == data_size, origin, ": the data section has ", data_size - covered,
            " bytes after the last tensor that no tensor holds");
}

// A CPU tensor with its own copy of the entry's bytes.
torch::Tensor make_tensor(const Entry& entry, const char* data, const std::string& origin) {
  torch::Tensor tensor = torch::empty(entry.shape, torch::TensorOptions().dtype(entry.dtype->type));
  const std::size_t bytes = entry.end - entry.begin;
  if (entry.dtype->type == torch::kBool) {
    const char* bad =
        std::find_if(data + entry.begin, data + entry.end, [](char c) { return c != 0 && c != 1; });
    TXL_CHECK(bad == data + entry.end, origin, ": BOOL tensor \"", entry.name, "\" holds the byte ",
              int(static_cast<unsigned char>(*bad)), " at element ", bad - (data + entry.begin),
              " (must be 0 or 1)");
  }
  if (bytes > 0) std::memcpy(tensor.data_ptr(), data + entry.begin, bytes);
  return tensor;
}

}  // namespace

File parse(std::string_view bytes, const std::string& origin) {
  TXL_CHECK(bytes.size() >= 8, origin, ": not a safetensors file: ", bytes.size(),
            " bytes, shorter than the 8-byte header length");
  std::uint64_t header_size = 0;
  std::memcpy(&header_size, bytes.data(), 8);
  TXL_CHECK(header_size <= kMaxHeaderBytes, origin, ": safetensors header length ", header_size,
            " is over the limit of ", kMaxHeaderBytes, " bytes (not a safetensors file?)");
  TXL_CHECK(header_size <= bytes.size() - 8, origin, ": safetensors header length ", header_size,
            " runs past the end of the file (", bytes.size() - 8, " bytes after the length)");
  const Json header = parse_json(bytes.substr(8, header_size), origin);
  File file;
  std::vector<Entry> entries;
  for (const auto& [key, value] : header.items()) {
    if (key == kMetadataKey)
      file.metadata = parse_metadata(value, origin);
    else
      entries.push_back(parse_entry(key, value, origin));
  }
  const std::string_view data = bytes.substr(8 + header_size);
  check_layout(entries, data.size(), origin);
  file.tensors.reserve(entries.size());
  for (const Entry& entry : entries)
    file.tensors.emplace_back(entry.name, make_tensor(entry, data.data(), origin));
  return file;
}

}  // namespace txl::safetensors
