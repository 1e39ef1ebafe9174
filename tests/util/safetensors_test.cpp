#include "txl/util/safetensors.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>

#include "support/test_support.h"
#include "txl/util/error.h"
#include "txl/util/fs.h"
#include "txl/util/sha256.h"

extern char** environ;

namespace {

namespace st = txl::safetensors;
using Json = nlohmann::json;

std::string tensor_bytes(const torch::Tensor& t) {
  const torch::Tensor c = t.contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), c.nbytes());
}

// Same dtype, same shape, the same bits (NaN payloads and -0.0 included).
::testing::AssertionResult bits_equal(const torch::Tensor& actual, const torch::Tensor& expected) {
  if (actual.scalar_type() != expected.scalar_type())
    return ::testing::AssertionFailure()
           << "dtype " << actual.scalar_type() << " != " << expected.scalar_type();
  if (actual.sizes() != expected.sizes())
    return ::testing::AssertionFailure()
           << "shape " << actual.sizes() << " != " << expected.sizes();
  if (tensor_bytes(actual) != tensor_bytes(expected))
    return ::testing::AssertionFailure() << "bytes differ";
  return ::testing::AssertionSuccess();
}

// One tensor per supported dtype, with awkward shapes and values: a 0-d scalar, zero-size
// tensors, non-contiguous views (a transpose, a strided slice with an offset), special floats.
st::NamedTensors every_dtype() {
  torch::manual_seed(11);
  const double inf = std::numeric_limits<double>::infinity();
  st::NamedTensors t;
  t.emplace_back("f64",
                 torch::tensor({1.0 / 3, -0.0, inf, -inf, std::nan(""), 4.9e-324}, torch::kDouble));
  t.emplace_back("f32.transposed", torch::randn({4, 5}).t());      // [5, 4], not contiguous
  t.emplace_back("f16.scalar", torch::tensor(1.5, torch::kHalf));  // 0-d
  t.emplace_back("bf16", (torch::randn({2, 3, 2}) * 100).to(torch::kBFloat16));
  t.emplace_back("bf16.empty", torch::zeros({0, 3}, torch::kBFloat16));
  t.emplace_back("i64", torch::tensor({std::numeric_limits<std::int64_t>::min(), std::int64_t{-1},
                                       std::int64_t{1} << 62},
                                      torch::kLong));
  t.emplace_back("i32.slice",
                 torch::arange(20, torch::kInt).slice(0, 1, 20, 3));  // offset 1, stride 3
  t.emplace_back("i16", torch::tensor({-32768, 0, 32767}, torch::kShort));
  t.emplace_back("i8", torch::arange(-128, 128, torch::kLong).to(torch::kChar).reshape({16, 16}));
  t.emplace_back("u8", torch::arange(0, 256, torch::kLong).to(torch::kByte));
  t.emplace_back("bool", torch::tensor({true, false, false, true}));
  t.emplace_back("u8.empty.3d", torch::zeros({2, 0, 5}, torch::kByte));
  return t;
}

TEST(Safetensors, EveryDtypeRoundTripsBitIdentical) {
  const st::NamedTensors input = every_dtype();
  ASSERT_FALSE(input[1].second.is_contiguous());
  ASSERT_FALSE(input[6].second.is_contiguous());
  std::string bytes = st::serialize(input);
  const st::File file = st::parse(bytes, "memory");
  bytes.assign(bytes.size(), '\x55');  // the parsed tensors own their memory
  ASSERT_EQ(file.tensors.size(), input.size());
  EXPECT_TRUE(file.metadata.empty());
  for (std::size_t i = 0; i < input.size(); ++i) {
    SCOPED_TRACE(input[i].first);
    EXPECT_EQ(file.tensors[i].first, input[i].first);  // data order = the given order
    EXPECT_TRUE(bits_equal(file.tensors[i].second, input[i].second));
    EXPECT_TRUE(file.tensors[i].second.device().is_cpu());
    EXPECT_TRUE(file.tensors[i].second.is_contiguous());
  }
  EXPECT_EQ(file.tensors[2].second.dim(), 0);
}

TEST(Safetensors, MetadataRoundTrips) {
  const st::Metadata metadata = {{"format", "txl-checkpoint"},
                                 {"empty", ""},
                                 {"escapes", "quote \" backslash \\ newline \n tab \t"},
                                 {"unicode \xc3\xbc",
                                  "Gr\xc3\xbc\xc3\x9f"
                                  "e \xe2\x9c\x93"},
                                 {"config", std::string(1000, 'y')}};
  const st::File file = st::parse(st::serialize({{"w", torch::ones({2})}}, metadata), "memory");
  EXPECT_EQ(file.metadata, metadata);
  // No tensors at all is a valid file too.
  const st::File only_metadata = st::parse(st::serialize({}, {{"k", "v"}}), "memory");
  EXPECT_TRUE(only_metadata.tensors.empty());
  EXPECT_EQ(only_metadata.metadata, (st::Metadata{{"k", "v"}}));
}

// Reads the layout with nlohmann json and plain offsets, independently of st::parse.
TEST(Safetensors, HeaderIsAlignedJsonAndDataSitsAtTheOffsets) {
  const st::NamedTensors input = every_dtype();
  const std::string bytes = st::serialize(input, {{"step", "42"}});
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  ASSERT_LE(8 + n, bytes.size());
  EXPECT_EQ((8 + n) % 8, 0u);
  const std::string header = bytes.substr(8, n);
  const Json json = Json::parse(header);  // throws if it is not JSON
  ASSERT_TRUE(json.is_object());
  EXPECT_EQ(json["__metadata__"], Json({{"step", "42"}}));
  EXPECT_EQ(header.find_last_not_of(' '), header.find_last_of('}'));  // padded with spaces only
  std::uint64_t at = 0;
  for (const auto& [name, tensor] : input) {
    SCOPED_TRACE(name);
    const Json& entry = json.at(name);
    EXPECT_EQ(entry.size(), 3u);
    EXPECT_EQ(entry["dtype"], st::dtype_name(tensor.scalar_type()));
    EXPECT_EQ(entry["shape"].get<std::vector<std::int64_t>>(), tensor.sizes().vec());
    const auto offsets = entry["data_offsets"].get<std::vector<std::uint64_t>>();
    ASSERT_EQ(offsets.size(), 2u);
    EXPECT_EQ(offsets[0], at);
    EXPECT_EQ(offsets[1] - offsets[0], std::uint64_t(tensor.nbytes()));
    EXPECT_EQ(bytes.substr(8 + n + offsets[0], offsets[1] - offsets[0]), tensor_bytes(tensor));
    at = offsets[1];
  }
  EXPECT_EQ(8 + n + at, bytes.size());
}

TEST(Safetensors, SerializeRefusesBadNamesAndDtypes) {
  const auto w = torch::ones({2});
  TXL_EXPECT_THROW_WITH(st::serialize({{"", w}}), "empty name");
  TXL_EXPECT_THROW_WITH(st::serialize({{"a", w}, {"b", w}, {"a", w}}),
                        "duplicate tensor name \"a\"");
  TXL_EXPECT_THROW_WITH(st::serialize({{"__metadata__", w}}), "reserved");
  TXL_EXPECT_THROW_WITH(st::serialize({{"c", torch::ones({2}, torch::kComplexFloat)}}),
                        "tensor \"c\" has the unsupported dtype ComplexFloat");
  TXL_EXPECT_THROW_WITH(st::serialize({{"u", torch::Tensor()}}), "\"u\" is undefined");
  TXL_EXPECT_THROW_WITH(st::serialize({{"bad\xff", w}}), "not valid UTF-8");
}

// ---- hand-made files ---------------------------------------------------------------------------

// A file with `header` as it is (no padding) and `data` after it.
std::string file_with(const std::string& header, const std::string& data = "") {
  const std::uint64_t n = header.size();
  return std::string(reinterpret_cast<const char*>(&n), 8) + header + data;
}

// Parses from a heap buffer of exactly the file's size, so a read past the end is a real one.
st::File parse_exact(const std::string& bytes) {
  std::unique_ptr<char[]> buffer(new char[bytes.size() + 1]);  // + 1: new char[0] is fine too
  std::memcpy(buffer.get(), bytes.data(), bytes.size());
  return st::parse(std::string_view(buffer.get(), bytes.size()), "hand.safetensors");
}

#define EXPECT_REFUSED(bytes, reason)                              \
  do {                                                             \
    TXL_EXPECT_THROW_WITH(parse_exact(bytes), "hand.safetensors"); \
    TXL_EXPECT_THROW_WITH(parse_exact(bytes), reason);             \
    EXPECT_THROW(parse_exact(bytes), txl::Error);                  \
  } while (0)

// Entries in the header out of data order, an unaligned header: still a valid file.
TEST(Safetensors, HandMadeValidFileParsesInDataOrder) {
  const std::string data = std::string("\x01\x00\x02\x00", 4) + std::string("\x07\x00\x00\x00", 4);
  const std::string header =
      R"({"b":{"dtype":"I32","shape":[1],"data_offsets":[4,8]},)"
      R"("a":{"dtype":"I16","shape":[2],"data_offsets":[0,4]},"z":{"dtype":"F32","shape":[0],)"
      R"("data_offsets":[8,8]},"__metadata__":{"k":"v"}})";
  const st::File file = parse_exact(file_with(header, data));
  ASSERT_EQ(file.tensors.size(), 3u);
  EXPECT_EQ(file.tensors[0].first, "a");
  EXPECT_TRUE(bits_equal(file.tensors[0].second, torch::tensor({1, 2}, torch::kShort)));
  EXPECT_EQ(file.tensors[1].first, "b");
  EXPECT_TRUE(bits_equal(file.tensors[1].second, torch::tensor({7}, torch::kInt)));
  EXPECT_EQ(file.tensors[2].first, "z");
  EXPECT_EQ(file.tensors[2].second.numel(), 0);
  EXPECT_EQ(file.metadata, (st::Metadata{{"k", "v"}}));
}

TEST(Safetensors, EveryTruncationIsRefused) {
  const std::string bytes = st::serialize(
      {{"w", torch::arange(6, torch::kFloat).reshape({2, 3})}, {"b", torch::ones({2})}},
      {{"k", "v"}});
  ASSERT_NO_THROW(parse_exact(bytes));
  for (std::size_t size = 0; size < bytes.size(); ++size) {
    SCOPED_TRACE("truncated to " + std::to_string(size) + " of " + std::to_string(bytes.size()));
    TXL_EXPECT_THROW_WITH(parse_exact(bytes.substr(0, size)), "hand.safetensors");
  }
}

TEST(Safetensors, HeaderLengthBeyondTheFileIsRefused) {
  std::string bytes = file_with(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", "x");
  for (std::uint64_t n : {std::uint64_t(bytes.size() - 7), std::uint64_t(1) << 40,
                          std::numeric_limits<std::uint64_t>::max()}) {
    std::memcpy(bytes.data(), &n, 8);
    EXPECT_REFUSED(bytes, "header length");
  }
}

std::string entry(const std::string& name, const std::string& dtype, const std::string& shape,
                  const std::string& offsets) {
  return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape +
         ",\"data_offsets\":" + offsets + "}";
}

TEST(Safetensors, BadOffsetsAreRefused) {
  const std::string eight(8, '\0');
  EXPECT_REFUSED(file_with("{" + entry("a", "I32", "[1]", "[0,4]") + "," +
                               entry("b", "I32", "[1]", "[2,6]") + "}",
                           eight),
                 "overlaps");
  EXPECT_REFUSED(file_with("{" + entry("a", "I32", "[1]", "[0,4]") + "," +
                               entry("b", "I16", "[1]", "[6,8]") + "}",
                           eight),
                 "hole at bytes [4, 6)");
  EXPECT_REFUSED(file_with("{" + entry("a", "I32", "[1]", "[0,4]") + "}", eight),
                 "4 bytes after the last tensor");
  EXPECT_REFUSED(file_with("{" + entry("a", "I32", "[3]", "[0,12]") + "}", eight),
                 "data section has 8 bytes");
  EXPECT_REFUSED(file_with("{" + entry("a", "I32", "[1]", "[0,8]") + "}", eight),
                 "do not hold the 4 bytes");
  EXPECT_REFUSED(file_with("{" + entry("a", "I32", "[2]", "[8,0]") + "}", eight),
                 "do not hold the 8 bytes");
  EXPECT_REFUSED(file_with("{" + entry("a", "I32", "[2]", "[0]") + "}", eight), "[begin, end]");
  EXPECT_REFUSED(file_with("{" + entry("a", "I32", "[2]", "[-8,0]") + "}", eight),
                 "not a non-negative integer");
  // Two tensors on the same bytes (each with the right size) is an overlap too.
  EXPECT_REFUSED(file_with("{" + entry("a", "I32", "[2]", "[0,8]") + "," +
                               entry("b", "F32", "[2]", "[0,8]") + "}",
                           eight),
                 "overlaps");
}

TEST(Safetensors, BadShapesAndDtypesAreRefused) {
  const std::string eight(8, '\0');
  EXPECT_REFUSED(file_with("{" + entry("a", "F8", "[8]", "[0,8]") + "}", eight), "unknown dtype");
  EXPECT_REFUSED(file_with("{" + entry("a", "U8", "[-8]", "[0,8]") + "}", eight),
                 "not a non-negative integer");
  EXPECT_REFUSED(file_with("{" + entry("a", "U8", "[8.0]", "[0,8]") + "}", eight),
                 "not a non-negative integer");
  EXPECT_REFUSED(file_with("{" + entry("a", "U8", "8", "[0,8]") + "}", eight), "not an array");
  // 2^32 x 2^32 elements: the product overflows 64 bits; with 2^31 x 2^31 x 4 bytes, the bytes do.
  EXPECT_REFUSED(
      file_with("{" + entry("a", "U8", "[4294967296,4294967296,0]", "[0,8]") + "}", eight),
      "overflows");
  EXPECT_REFUSED(
      file_with("{" + entry("a", "F32", "[2147483648,2147483648]", "[0,8]") + "}", eight),
      "overflows");
  EXPECT_REFUSED(file_with("{" + entry("a", "U8", "[18446744073709551617]", "[0,8]") + "}", eight),
                 "not a non-negative integer");
  // A byte size that matches the shape of another dtype.
  EXPECT_REFUSED(file_with("{" + entry("a", "F64", "[2]", "[0,8]") + "}", eight), "16 bytes");
  EXPECT_REFUSED(file_with(R"({"a":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}})",
                           std::string("\x01\x02", 2)),
                 "must be 0 or 1");
}

TEST(Safetensors, BadJsonStructureIsRefused) {
  const std::string eight(8, '\0');
  const std::string a = entry("a", "U8", "[8]", "[0,8]");
  EXPECT_REFUSED(file_with("{" + a + "," + a + "}", eight), "the key \"a\" twice");
  EXPECT_REFUSED(
      file_with(R"({"a":{"dtype":"U8","dtype":"U8","shape":[8],"data_offsets":[0,8]}})", eight),
      "the key \"dtype\" twice");
  EXPECT_REFUSED(file_with("{" + a + ",\"__metadata__\":{\"k\":1}}", eight),
                 "metadata \"k\" is 1, not a string");
  EXPECT_REFUSED(file_with("{" + a + ",\"__metadata__\":[\"k\"]}", eight), "not an object");
  EXPECT_REFUSED(file_with("{" + a + ",\"b\":[0,0]}"), "\"b\" is [0,0], not an object");
  EXPECT_REFUSED(file_with("{" + a, eight), "not valid JSON");
  EXPECT_REFUSED(file_with("{" + a + "}garbage", eight), "not valid JSON");
  EXPECT_REFUSED(file_with("[1,2]", eight), "not a JSON object");
  EXPECT_REFUSED(file_with(R"({"a":{"dtype":"U8","shape":[8]}})", eight), "no \"data_offsets\"");
  EXPECT_REFUSED(file_with(R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8],"x":1}})", eight),
                 "unknown field \"x\"");
  EXPECT_REFUSED(file_with("{" + entry("", "U8", "[8]", "[0,8]") + "}", eight), "empty name");
  EXPECT_REFUSED(file_with("", eight), "not valid JSON");
  EXPECT_REFUSED(std::string("\x02\x00\x00", 3), "shorter than the 8-byte header length");
}

// The peak resident memory of this process so far, in bytes.
std::int64_t peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<std::int64_t>(usage.ru_maxrss) * 1024;  // Linux: KiB
}

// A header of 20 MB of '[' cost nlohmann's parser about 1.5 GB before it failed (a 90 MB one,
// 6.8 GB): the nesting is refused before any parsing, at the reference reader's depth of 128.
TEST(Safetensors, DeepNestingIsRefusedBeforeParsing) {
  const std::string eight(8, '\0');
  const std::int64_t before = peak_rss_bytes();
  EXPECT_REFUSED(file_with(std::string(20'000'000, '['), eight), "deeper than 128 levels");
  EXPECT_LT(peak_rss_bytes() - before, 400'000'000) << "the refusal itself cost the memory";
  // 128 levels are allowed (then refused for what they hold); 129 are not.
  auto nested = [](int depth) {
    return "{\"__metadata__\":{\"k\":" + std::string(depth - 2, '[') + std::string(depth - 2, ']') +
           "}}";
  };
  EXPECT_REFUSED(file_with(nested(128), eight), "metadata \"k\" is");
  EXPECT_REFUSED(file_with(nested(129), eight), "deeper than 128 levels");
  // Brackets inside strings (escaped quotes too) are text, not nesting.
  const std::string name = std::string(200, '[') + "\\\"" + std::string(200, '{');
  const st::File file =
      parse_exact(file_with("{" + entry(name, "U8", "[1]", "[0,1]") +
                                ",\"__metadata__\":{\"k\":\"" + std::string(300, '[') + "\"}}",
                            "x"));
  ASSERT_EQ(file.tensors.size(), 1u);
  EXPECT_EQ(file.tensors[0].first, std::string(200, '[') + "\"" + std::string(200, '{'));
  EXPECT_EQ(file.metadata.at("k"), std::string(300, '['));
}

// ---- the safetensors package from PyPI ----------------------------------------------------------

struct ProgramRun {
  int status;       // exit status, or -1 when it did not exit normally
  std::string log;  // stdout and stderr
};

// Runs `argv` (no shell) with stdout and stderr into `log_path`.
ProgramRun run_program(const std::vector<std::string>& argv,
                       const std::filesystem::path& log_path) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  std::vector<char*> args;
  for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int error = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (error != 0) return {-1, std::string("posix_spawn: ") + std::strerror(error)};
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, txl::fs::read_file(log_path)};
}

// The tensors C++ writes for Python: bf16 and bool among them, a 0-d scalar, a zero-size tensor.
st::NamedTensors cpp_tensors() {
  st::NamedTensors t;
  t.emplace_back("cpp.f32", torch::arange(6, torch::kFloat).reshape({2, 3}) / 4 - 0.5);
  t.emplace_back("cpp.bf16", torch::tensor({-1.5, 0.0, 3.0, 1024.0}).to(torch::kBFloat16));
  t.emplace_back("cpp.bool", torch::tensor({true, false, true, true}));
  t.emplace_back("cpp.f64.scalar", torch::tensor(1.0 / 3, torch::kDouble));
  t.emplace_back("cpp.i64",
                 torch::tensor({-(std::int64_t{1} << 53) - 1, std::int64_t{7}}, torch::kLong));
  t.emplace_back("cpp.f16", torch::tensor({0.25, -2.0}).to(torch::kHalf).reshape({1, 2}));
  t.emplace_back("cpp.u8.empty", torch::zeros({0, 4}, torch::kByte));
  return t;
}

// What python_tensors() in safetensors_check.py writes.
st::NamedTensors python_expected() {
  st::NamedTensors t;
  t.emplace_back("py_f32", torch::arange(12, torch::kFloat).reshape({3, 4}) / 8);
  t.emplace_back("py_bf16", (torch::arange(-4, 4, torch::kFloat) * 0.75).to(torch::kBFloat16));
  t.emplace_back("py_f64_scalar", torch::tensor(-2.5, torch::kDouble));
  t.emplace_back("py_f16", torch::tensor({0.5, -1.0, 65504.0}).to(torch::kHalf).reshape({1, 3}));
  t.emplace_back("py_i64", torch::tensor({-(std::int64_t{1} << 40), std::int64_t{0},
                                          (std::int64_t{1} << 40) + 3},
                                         torch::kLong));
  t.emplace_back("py_i32", torch::tensor({-7, 2147483647}, torch::kInt));
  t.emplace_back("py_i16", torch::tensor({-32768, 12345}, torch::kShort));
  t.emplace_back("py_i8", torch::tensor({-128, 127, 0, -1}, torch::kChar).reshape({2, 2}));
  t.emplace_back("py_u8", torch::arange(256, torch::kLong).to(torch::kByte));
  t.emplace_back("py_bool", torch::tensor({true, false, true}));
  t.emplace_back("py_empty", torch::zeros({0, 3}, torch::kFloat));
  return t;
}

// Checks one tensor as the Python side described it: dtype name, shape, values, raw bytes.
void expect_described(const Json& seen, const torch::Tensor& expected) {
  EXPECT_EQ(seen.at("dtype"), st::dtype_name(expected.scalar_type()));
  EXPECT_EQ(seen.at("shape").get<std::vector<std::int64_t>>(), expected.sizes().vec());
  EXPECT_EQ(seen.at("sha256"), txl::sha256_hex(tensor_bytes(expected)));
  const torch::Tensor flat = expected.flatten();
  const Json& values = seen.at("values");
  ASSERT_EQ(values.size(), std::size_t(flat.numel()));
  for (std::int64_t i = 0; i < flat.numel(); ++i) {
    if (flat.is_floating_point())
      EXPECT_EQ(values[i].get<double>(), flat[i].item<double>()) << "element " << i;
    else if (flat.scalar_type() == torch::kBool)
      EXPECT_EQ(values[i].get<bool>(), flat[i].item<bool>()) << "element " << i;
    else
      EXPECT_EQ(values[i].get<std::int64_t>(), flat[i].item<std::int64_t>()) << "element " << i;
  }
}

// txl writes, the `safetensors` package reads (torch and numpy); the package writes, txl reads.
TEST(Safetensors, PythonPackageReadsOurFilesAndWritesOnesWeRead) {
  const char* env = std::getenv("TXL_TEST_PYTHON");
  const std::string python = env != nullptr && *env != '\0' ? env : TXL_TEST_PYTHON;
  if (!std::filesystem::exists(python))
    GTEST_SKIP() << "no Python environment at " << python
                 << "; tools/setup.sh creates it (build/venv, from tools/requirements.txt)";
  txl::test::TempDir dir;
  const st::Metadata metadata = {{"format", "txl"},
                                 {"unicode",
                                  "Gr\xc3\xbc\xc3\x9f"
                                  "e"}};
  txl::fs::write_atomic(dir / "cpp.safetensors", st::serialize(cpp_tensors(), metadata));
  const ProgramRun run =
      run_program({python, (txl::test::source_dir() / "tests/util/safetensors_check.py").string(),
                   (dir / "cpp.safetensors").string(), (dir / "py.safetensors").string(),
                   (dir / "report.json").string()},
                  dir / "log.txt");
  if (run.status == 3) GTEST_SKIP() << python << " lacks a package the check needs: " << run.log;
  ASSERT_EQ(run.status, 0) << run.log;

  const Json report = Json::parse(txl::fs::read_file(dir / "report.json"));
  std::cout << "[test] safetensors " << report.at("safetensors_version").get<std::string>() << "\n";
  EXPECT_EQ(report.at("metadata").get<st::Metadata>(), metadata);
  EXPECT_EQ(report.at("tensors").size(), cpp_tensors().size());
  for (const auto& [name, tensor] : cpp_tensors()) {
    SCOPED_TRACE("python read " + name);
    expect_described(report.at("tensors").at(name), tensor);
  }

  const st::File file = st::parse(txl::fs::read_file(dir / "py.safetensors"), "py.safetensors");
  EXPECT_EQ(file.metadata, (st::Metadata{{"written_by", "safetensors-python"},
                                         {"format", "pt"},
                                         {"unicode",
                                          "Gr\xc3\xbc\xc3\x9f"
                                          "e \xe2\x9c\x93 \"q\""}}));
  const st::NamedTensors expected = python_expected();
  ASSERT_EQ(file.tensors.size(), expected.size());
  for (const auto& [name, tensor] : expected) {
    SCOPED_TRACE("txl read " + name);
    auto found = std::find_if(file.tensors.begin(), file.tensors.end(),
                              [&](const auto& named) { return named.first == name; });
    ASSERT_NE(found, file.tensors.end());
    EXPECT_TRUE(bits_equal(found->second, tensor));
  }
}

}  // namespace
