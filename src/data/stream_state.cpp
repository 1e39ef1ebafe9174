// A stream's saved position (StreamState): its text form in checkpoints' training state, its
// tensor form, and the stream kinds' names.
#include <sstream>

#include "stream_parts.h"
#include "txl/util/error.h"
#include "txl/util/fs.h"

namespace txl::data {

namespace {

constexpr std::int64_t kStateVersion = 1;
constexpr const char* kStateMagic = "txl-stream-v1";

}  // namespace

namespace detail {

const char* kind_name(StreamKind kind) {
  switch (kind) {
    case StreamKind::kTrain:
      return "train";
    case StreamKind::kEval:
      return "eval";
    case StreamKind::kSliding:
      return "sliding";
  }
  return "?";
}

StreamKind kind_from_int(std::int64_t value) {
  TXL_CHECK(value >= 1 && value <= 3, "stream state: unknown stream kind ", value,
            " (1 train, 2 eval, 3 sliding); the state is corrupt or from another program");
  return static_cast<StreamKind>(value);
}

}  // namespace detail

using detail::kind_from_int;
using detail::kind_name;

// ------------------------------------------------------------------------------ StreamState

std::string StreamState::to_string() const {
  std::ostringstream out;
  out << kStateMagic << " kind=" << kind_name(kind) << " fingerprint=" << fs::hex64(fingerprint)
      << " seed=" << seed << " epoch=" << epoch << " index=" << index;
  return out.str();
}

StreamState StreamState::from_string(const std::string& text) {
  std::istringstream in(text);
  std::string magic;
  in >> magic;
  TXL_CHECK(magic == kStateMagic, "stream state \"", text, "\": expected it to start with ",
            kStateMagic, "; it is corrupt or was written by another version");
  StreamState state;
  bool seen[5] = {false, false, false, false, false};
  std::string field;
  while (in >> field) {
    const auto eq = field.find('=');
    TXL_CHECK(eq != std::string::npos, "stream state \"", text, "\": field \"", field,
              "\" is not key=value");
    const std::string key = field.substr(0, eq), value = field.substr(eq + 1);
    try {
      size_t used = 0;
      if (key == "kind") {
        if (value == "train")
          state.kind = StreamKind::kTrain;
        else if (value == "eval")
          state.kind = StreamKind::kEval;
        else if (value == "sliding")
          state.kind = StreamKind::kSliding;
        else
          TXL_FAIL("stream state: kind = ", value, " (allowed: train, eval, sliding)");
        used = value.size();
        seen[0] = true;
      } else if (key == "fingerprint") {
        state.fingerprint = std::stoull(value, &used, 16);
        seen[1] = true;
      } else if (key == "seed") {
        state.seed = std::stoull(value, &used, 10);
        seen[2] = true;
      } else if (key == "epoch") {
        state.epoch = std::stoll(value, &used, 10);
        seen[3] = true;
      } else if (key == "index") {
        state.index = std::stoll(value, &used, 10);
        seen[4] = true;
      } else {
        TXL_FAIL("stream state \"", text, "\": unknown field \"", key, "\"");
      }
      TXL_CHECK(used == value.size(), "stream state \"", text, "\": bad value in \"", field, "\"");
    } catch (const std::logic_error&) {  // stoull / stoll: not a number or out of range
      TXL_FAIL("stream state \"", text, "\": bad value in \"", field, "\"");
    }
  }
  const char* names[5] = {"kind", "fingerprint", "seed", "epoch", "index"};
  for (int k = 0; k < 5; ++k) {
    TXL_CHECK(seen[k], "stream state \"", text, "\": field \"", names[k], "\" is missing");
  }
  return state;
}

torch::Tensor StreamState::to_tensor() const {
  return torch::tensor(
      {kStateVersion, static_cast<std::int64_t>(kind), static_cast<std::int64_t>(fingerprint),
       static_cast<std::int64_t>(seed), epoch, index},
      torch::kInt64);
}

StreamState StreamState::from_tensor(const torch::Tensor& flat) {
  TXL_CHECK(
      flat.defined() && flat.dim() == 1 && flat.size(0) == 6 && flat.scalar_type() == torch::kInt64,
      "stream state tensor must be int64 [6], got ",
      flat.defined() ? c10::toString(flat.scalar_type()) : "undefined", " of shape ",
      flat.defined() ? flat.sizes() : at::IntArrayRef{});
  auto v = flat.to(torch::kCPU).contiguous();
  const auto* p = v.data_ptr<std::int64_t>();
  TXL_CHECK(p[0] == kStateVersion, "stream state tensor has version ", p[0], ", this build reads ",
            kStateVersion);
  StreamState state;
  state.kind = kind_from_int(p[1]);
  state.fingerprint = static_cast<std::uint64_t>(p[2]);
  state.seed = static_cast<std::uint64_t>(p[3]);
  state.epoch = p[4];
  state.index = p[5];
  return state;
}

bool StreamState::operator==(const StreamState& other) const {
  return kind == other.kind && fingerprint == other.fingerprint && seed == other.seed &&
         epoch == other.epoch && index == other.index;
}

}  // namespace txl::data
