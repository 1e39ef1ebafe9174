// Tests of the enum settings (config/enums.h): each name table covers its enum and round-trips,
// the loader takes exactly the table's names and refuses any other with the key, line:column and
// the valid names, and the default experiment dumps to the text it had when these settings were
// strings (so stored experiments and their fingerprints are unchanged).

#include <gtest/gtest.h>

#include <cctype>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "support/test_support.h"
#include "txl/config/load.h"
#include "txl/util/error.h"

namespace txl::config {
namespace {

// The names of E, which must be the enumerators 0, 1, ... in declaration order, spelled as the
// experiment files, dumps and JSON records written before the enums spell them.
template <typename E>
void expect_table(const std::vector<std::string>& spelled) {
  SCOPED_TRACE(spelled.front());
  EXPECT_EQ(enum_names<E>(), spelled);
  std::string joined;
  for (std::size_t i = 0; i < spelled.size(); ++i) {
    const E value = static_cast<E>(i);
    EXPECT_EQ(to_string(value), spelled[i]);
    EXPECT_EQ(parse_enum<E>(spelled[i]), std::optional<E>(value));  // parse(name(x)) == x
    EXPECT_EQ(parse_enum<E>(to_string(value)), std::optional<E>(value));
    std::ostringstream printed;
    printed << value;
    EXPECT_EQ(printed.str(), spelled[i]);
    joined += (i > 0 ? " | " : "") + spelled[i];
  }
  EXPECT_EQ(enum_choices<E>(), joined);
  // One past the last enumerator is no value of the table: it prints as its number, which no
  // name equals, so a table missing an enumerator cannot pass the loop above.
  const E outside = static_cast<E>(spelled.size());
  EXPECT_EQ(to_string(outside), std::to_string(spelled.size()));
  EXPECT_EQ(parse_enum<E>(to_string(outside)), std::nullopt);
  // Names are case-sensitive and whole.
  EXPECT_EQ(parse_enum<E>(""), std::nullopt);
  EXPECT_EQ(parse_enum<E>(spelled[0] + " "), std::nullopt);
  std::string upper = spelled[0];
  for (char& ch : upper) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  EXPECT_EQ(parse_enum<E>(upper), std::nullopt);
}

TEST(EnumNames, EveryNameRoundTripsAndEachTableCoversItsEnum) {
  expect_table<AttnType>({"xl", "shaw", "vanilla", "vanilla_learned", "rope", "alibi", "t5"});
  expect_table<Device>({"cpu", "cuda", "auto"});
  expect_table<Precision>({"fp32", "bf16", "auto"});
  expect_table<Optimizer>({"adam", "adamw", "sgd"});
  expect_table<Schedule>({"cosine", "inv_sqrt", "constant", "plateau"});
  expect_table<EvalMode>({"memory", "segments", "sliding"});
  expect_table<Corpus>(
      {"kjv", "wikitext", "ptb", "enwik8", "text8", "text", "pg19", "books", "synthetic"});
  expect_table<TokenizerType>({"sentencepiece", "byte", "word"});
  expect_table<SentencePieceModel>({"unigram", "bpe", "char", "word"});
  expect_table<WeightInit>({"normal", "uniform"});
  expect_table<NormInit>({"normal", "ones"});
  expect_table<MemInit>({"empty", "zeros"});
  expect_table<Compression>({"conv", "mean", "max"});
  expect_table<EvalMemInit>({"model", "empty", "zeros"});
}

TEST(EnumNames, OnlyACastFromANumberIsNamedByNoTable) {
  for (const std::string& name : enum_names<Corpus>())
    EXPECT_TRUE(is_named(*parse_enum<Corpus>(name)));
  EXPECT_FALSE(is_named(static_cast<Corpus>(9)));
  EXPECT_TRUE(is_named(SentencePieceModel::kWord));
  EXPECT_FALSE(is_named(static_cast<SentencePieceModel>(-1)));
}

TEST(EnumNames, AbsoluteAndRelativePositionsSplitTheAttentionTypes) {
  EXPECT_FALSE(uses_absolute_positions(AttnType::kXl));
  EXPECT_FALSE(uses_absolute_positions(AttnType::kShaw));
  EXPECT_TRUE(uses_absolute_positions(AttnType::kVanilla));
  EXPECT_TRUE(uses_absolute_positions(AttnType::kVanillaLearned));
  for (const std::string& name : enum_names<AttnType>()) {
    const AttnType type = *parse_enum<AttnType>(name);
    EXPECT_NE(uses_absolute_positions(type), uses_relative_positions(type)) << name;
  }
}

// An enum setting: its section, its key in the section ("tokenizer.type" for a key of a
// subsection), the value it holds after loading, and whether the dump leaves it out at its
// default (a field added after configs were stored: fields.cpp's add_later).
struct EnumKey {
  std::string section;
  std::string key;
  std::function<std::string(const ExperimentConfig&)> loaded;
  std::vector<std::string> names;
  bool omitted_at_default = false;
};

std::vector<EnumKey> enum_keys() {
  return {
      {"run", "device", [](const auto& c) { return to_string(c.run.device); },
       enum_names<Device>()},
      {"run", "precision", [](const auto& c) { return to_string(c.run.precision); },
       enum_names<Precision>()},
      {"model", "attn_type", [](const auto& c) { return to_string(c.model.attn_type); },
       enum_names<AttnType>()},
      {"train", "optimizer", [](const auto& c) { return to_string(c.train.optimizer); },
       enum_names<Optimizer>()},
      {"train", "schedule", [](const auto& c) { return to_string(c.train.schedule); },
       enum_names<Schedule>()},
      {"eval", "mode", [](const auto& c) { return to_string(c.eval.mode); },
       enum_names<EvalMode>()},
      {"data", "corpus", [](const auto& c) { return to_string(c.data.corpus); },
       enum_names<Corpus>()},
      {"data", "tokenizer.type", [](const auto& c) { return to_string(c.data.tokenizer.type); },
       enum_names<TokenizerType>()},
      {"data", "tokenizer.model_type",
       [](const auto& c) { return to_string(c.data.tokenizer.model_type); },
       enum_names<SentencePieceModel>()},
      {"model", "init", [](const auto& c) { return to_string(c.model.init); },
       enum_names<WeightInit>()},
      {"model", "norm_init", [](const auto& c) { return to_string(c.model.norm_init); },
       enum_names<NormInit>()},
      {"model", "mem_init", [](const auto& c) { return to_string(c.model.mem_init); },
       enum_names<MemInit>(), true},
      {"model", "cmem_compress", [](const auto& c) { return to_string(c.model.cmem_compress); },
       enum_names<Compression>(), true},
      {"eval", "mem_init", [](const auto& c) { return to_string(c.eval.mem_init); },
       enum_names<EvalMemInit>(), true},
  };
}

// The line of `key` holding `name` in a dump: a key of a subsection ("tokenizer.type") is
// written under the subsection's own line, indented once more ("    type: word").
std::string dumped_line(const std::string& key, const std::string& name) {
  const std::size_t dot = key.find('.');
  if (dot == std::string::npos) return "\n  " + key + ": " + name + "\n";
  return "\n    " + key.substr(dot + 1) + ": " + name + "\n";
}

TEST(EnumSettings, EveryNameLoadsIntoItsFieldAndDumpsAsWritten) {
  for (const EnumKey& e : enum_keys()) {
    for (const std::string& name : e.names) {
      const std::string yaml = e.section + ":\n  " + e.key + ": " + name + "\n";
      // Absolute positions need no memory, corpus 'text' a path (rules of their own, not the
      // name's).
      const ExperimentConfig c =
          parse_experiment_string(yaml, "x.yaml", {"model.mem_len=0", "data.path=corpus.txt"});
      EXPECT_EQ(e.loaded(c), name) << yaml;
      const std::string dump = dump_experiment(c);
      EXPECT_NE(("\n" + dump).find("\n" + e.section + ":\n"), std::string::npos);
      const bool omitted = e.omitted_at_default && name == e.loaded(ExperimentConfig{});
      EXPECT_EQ(dump.find(dumped_line(e.key, name)) == std::string::npos, omitted) << dump;
      EXPECT_EQ(dump_experiment(parse_experiment_string(dump, "dump.yaml")), dump);
    }
  }
}

std::string load_error(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  try {
    parse_experiment_string(yaml, "x.yaml", overrides);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a txl::Error for\n" << yaml;
  return "";
}

TEST(EnumSettings, AnUnknownNameIsAnErrorWithTheKeyItsPositionAndTheValidNames) {
  for (const EnumKey& e : enum_keys()) {
    const std::string dotted = e.section + "." + e.key;
    std::string valid;
    for (const std::string& name : e.names) valid += (valid.empty() ? "" : " | ") + name;
    // Line 2, after "  <key>: ": no name is close to zzzz, so no suggestion follows.
    const std::string column = std::to_string(2 + e.key.size() + 2 + 1);
    EXPECT_EQ(load_error("# a comment\n" + e.section + ":\n  " + e.key + ": zzzz\n"),
              "x.yaml:3:" + column + ": " + dotted + ": 'zzzz' is not one of " + valid);
    EXPECT_EQ(load_error("", {dotted + "=zzzz"}),
              "--set " + dotted + "=zzzz: " + dotted + ": 'zzzz' is not one of " + valid);
    EXPECT_EQ(load_error(e.section + ": {" + e.key + ": [a, b]}\n"),
              "x.yaml:1:" + std::to_string(e.section.size() + e.key.size() + 6) + ": " + dotted +
                  ": expected one of " + valid + ", got a sequence");
    // A near miss: the message also suggests the name meant.
    const std::string typo = e.names.back() + "x";
    EXPECT_EQ(load_error("", {dotted + "=" + typo}),
              "--set " + dotted + "=" + typo + ": " + dotted + ": '" + typo + "' is not one of " +
                  valid + "; did you mean '" + e.names.back() + "'?");
  }
}

TEST(EnumSettings, AValueCastFromANumberFailsValidation) {
  ExperimentConfig c;
  c.train.schedule = static_cast<Schedule>(9);
  TXL_EXPECT_THROW_WITH(validate_experiment(c),
                        "train.schedule: '9' is not one of cosine | inv_sqrt | constant | plateau");
}

// The dump of the default experiment, byte for byte as it was when these settings were strings:
// a checkpoint stores this text and its fingerprint is a hash of it.
constexpr const char* kDefaultDump = R"(run:
  name: experiment
  output_dir: ""
  seed: 1234
  threads: 0
  device: cpu
  precision: fp32
  log_interval: 50
  dist_timeout: 600
data:
  corpus: kjv
  path: ""
  cache_dir: data/cache
  tokenizer:
    type: sentencepiece
    model_path: ""
    vocab_size: 8000
    model_type: unigram
    character_coverage: 1.0
    user_symbols: []
    max_sentences: 2000000
    min_count: 0
  synthetic:
    seed: 7
    documents: 4000
    keys: 4
    gap: 256
    alphabet: 32
  document_mode: false
  add_eos: true
model:
  attn_type: xl
  n_layer: 4
  d_model: 256
  n_head: 4
  d_head: 64
  d_inner: 1024
  dropout: 0.1
  dropatt: 0.0
  tgt_len: 128
  mem_len: 128
  ext_len: 0
  clamp_len: -1
  same_length: false
  pre_norm: false
  untie_r: false
  max_rel_dist: 64
  max_positions: 4096
  allow_abs_with_memory: false
  cutoffs: []
  div_val: 1
  tie_weight: true
  tie_projs: true
  init: normal
  norm_init: normal
  init_std: 0.02
  proj_init_std: 0.01
train:
  optimizer: adam
  lr: 0.00025
  weight_decay: 0.0
  momentum: 0.0
  schedule: cosine
  warmup_steps: 0
  lr_min: 0.0
  decay_rate: 0.5
  plateau_patience: 0
  clip: 0.25
  batch_size: 16
  batch_chunk: 1
  max_steps: 1000
  max_tokens: 0
  max_minutes: 0.0
  eval_interval: 200
  checkpoint_interval: 200
  patience: 0
  var_len: false
  roll: false
  eval_max_tokens: 0
  divergence_factor: 3.0
  divergence_patience: 20
eval:
  tgt_len: 0
  mem_len: -1
  clamp_len: -2
  same_length: -1
  mode: memory
  window: 0
  stride: 1
  warmup: 0
  batch_size: 16
  max_tokens: 0
  splits: [valid, test]
  sweep_mem_lens: []
)";

TEST(EnumSettings, TheDefaultExperimentDumpsAsBefore) {
  EXPECT_EQ(dump_experiment(ExperimentConfig{}), kDefaultDump);
  EXPECT_EQ(fingerprint(ExperimentConfig{}), "8497c6f61d41566d");  // FNV-1a of kDefaultDump
}

}  // namespace
}  // namespace txl::config
