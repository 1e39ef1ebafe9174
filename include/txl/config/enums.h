#pragma once
// The settings that take one of a fixed set of names (model.attn_type, run.device,
// run.precision, train.optimizer, train.schedule, eval.mode), as enums. Each enum has one name
// table, EnumNames<E>::kNames; the loader parses with it, and the dump, error messages, logs and
// JSON records print with it, so a name is spelled once. After loading nothing compares names.

#include <array>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace txl::config {

// model.attn_type: how attention knows positions.
enum class AttnType {
  kXl,              // relative: sinusoid distances with global u, v biases (Dai et al.)
  kShaw,            // relative: learned distance embeddings, clipped (Shaw et al.)
  kVanilla,         // absolute: sinusoid positions added to the input (Vaswani et al.)
  kVanillaLearned,  // absolute: a learned table of model.max_positions positions (Al-Rfou et al.)
  kRope,            // relative: queries and keys turned by their positions (Su et al., RoPE)
  kAlibi,           // relative: a slope per head times the distance (Press et al., ALiBi)
};

// run.device: where the model runs. The GPU index is the process's LOCAL_RANK, not a setting.
enum class Device {
  kCpu,   // the CPU
  kCuda,  // GPU LOCAL_RANK; an error when none is visible
  kAuto,  // GPU LOCAL_RANK when one is visible, else the CPU
};

// run.precision: the arithmetic of forward passes (weights stay fp32).
enum class Precision {
  kFp32,  // float32 throughout
  kBf16,  // bf16 autocast, fp32 master weights
};

// train.optimizer.
enum class Optimizer { kAdam, kAdamW, kSgd };

// train.schedule: the learning rate after warm-up.
enum class Schedule {
  kCosine,    // cosine from train.lr to train.lr_min over train.max_steps
  kInvSqrt,   // train.lr / sqrt(step / warmup_steps)
  kConstant,  // train.lr
  kPlateau,   // train.lr times decay_rate after each plateau of validation loss
};

// eval.mode: how an evaluation gives the model its context.
enum class EvalMode {
  kMemory,    // Transformer-XL: segments of Q in order, each with memory M
  kSegments,  // each segment of Q on its own, no memory
  kSliding,   // each window of L tokens on its own, the last s targets scored
};

// The one name table of an enum: every value with its name, in the order messages list them.
template <typename E>
struct EnumNames;

template <>
struct EnumNames<AttnType> {
  static constexpr std::array<std::pair<AttnType, const char*>, 6> kNames = {{
      {AttnType::kXl, "xl"},
      {AttnType::kShaw, "shaw"},
      {AttnType::kVanilla, "vanilla"},
      {AttnType::kVanillaLearned, "vanilla_learned"},
      {AttnType::kRope, "rope"},
      {AttnType::kAlibi, "alibi"},
  }};
};

template <>
struct EnumNames<Device> {
  static constexpr std::array<std::pair<Device, const char*>, 3> kNames = {{
      {Device::kCpu, "cpu"},
      {Device::kCuda, "cuda"},
      {Device::kAuto, "auto"},
  }};
};

template <>
struct EnumNames<Precision> {
  static constexpr std::array<std::pair<Precision, const char*>, 2> kNames = {{
      {Precision::kFp32, "fp32"},
      {Precision::kBf16, "bf16"},
  }};
};

template <>
struct EnumNames<Optimizer> {
  static constexpr std::array<std::pair<Optimizer, const char*>, 3> kNames = {{
      {Optimizer::kAdam, "adam"},
      {Optimizer::kAdamW, "adamw"},
      {Optimizer::kSgd, "sgd"},
  }};
};

template <>
struct EnumNames<Schedule> {
  static constexpr std::array<std::pair<Schedule, const char*>, 4> kNames = {{
      {Schedule::kCosine, "cosine"},
      {Schedule::kInvSqrt, "inv_sqrt"},
      {Schedule::kConstant, "constant"},
      {Schedule::kPlateau, "plateau"},
  }};
};

template <>
struct EnumNames<EvalMode> {
  static constexpr std::array<std::pair<EvalMode, const char*>, 3> kNames = {{
      {EvalMode::kMemory, "memory"},
      {EvalMode::kSegments, "segments"},
      {EvalMode::kSliding, "sliding"},
  }};
};

// Enables a function for the enums that have a name table.
template <typename E>
using IfNamed = decltype(EnumNames<E>::kNames, void());

// The name of `value`, e.g. "vanilla_learned". A value outside the table (only a cast makes one)
// is its number, e.g. "7", which no table holds.
template <typename E, typename = IfNamed<E>>
std::string to_string(E value) {
  for (const auto& [member, name] : EnumNames<E>::kNames) {
    if (member == value) return name;
  }
  return std::to_string(static_cast<std::underlying_type_t<E>>(value));
}

// The value called `name`, or nothing when the table has no such name.
template <typename E, typename = IfNamed<E>>
std::optional<E> parse_enum(std::string_view name) {
  for (const auto& [member, text] : EnumNames<E>::kNames) {
    if (name == text) return member;
  }
  return std::nullopt;
}

// Sets `*out` to the value called `name` and says whether the table has it (`*out` unchanged
// when not). E is deduced, so code written for any enum (util/record.h) finds it by
// argument-dependent lookup, as it finds to_string and choices_of.
template <typename E, typename = IfNamed<E>>
bool parse_name(std::string_view name, E* out) {
  const std::optional<E> value = parse_enum<E>(name);
  if (value) *out = *value;
  return value.has_value();
}

// Every name, in table order.
template <typename E, typename = IfNamed<E>>
std::vector<std::string> enum_names() {
  std::vector<std::string> names;
  for (const auto& entry : EnumNames<E>::kNames) names.emplace_back(entry.second);
  return names;
}

// Every name joined for messages and help texts: "memory | segments | sliding".
template <typename E, typename = IfNamed<E>>
std::string enum_choices() {
  std::string text;
  for (const auto& entry : EnumNames<E>::kNames) {
    text += (text.empty() ? "" : " | ") + std::string(entry.second);
  }
  return text;
}

// enum_choices of a value's enum, E deduced: "memory | segments | sliding".
template <typename E, typename = IfNamed<E>>
std::string choices_of(E /*value*/) {
  return enum_choices<E>();
}

template <typename E, typename = IfNamed<E>>
std::ostream& operator<<(std::ostream& out, E value) {
  return out << to_string(value);
}

// Absolute positions (vanilla, vanilla_learned): added to the input and restarting at 0 in every
// segment, so states carried from the previous segment would repeat positions (paper 3.3).
constexpr bool uses_absolute_positions(AttnType type) {
  return type == AttnType::kVanilla || type == AttnType::kVanillaLearned;
}

// Relative positions (xl, shaw, rope, alibi): attention sees distances, so a memory of earlier
// segments keeps its meaning; the attention types that carry memory.
constexpr bool uses_relative_positions(AttnType type) { return !uses_absolute_positions(type); }

}  // namespace txl::config
