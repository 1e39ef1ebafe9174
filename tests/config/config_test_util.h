#pragma once
// Shared by the config tests: an experiment that sets every field away from its default, and a
// helper writing a YAML file into a TempDir.

#include <map>
#include <string>
#include <vector>

#include "support/test_support.h"

namespace txl::test {

// Every field differs from config.h's default (load_test checks that), and setting any single
// field back to its default still gives a valid experiment (dump_test relies on that), except
// for a field that a rule ties to another (kCompanions): the two go back together.
inline const char* kEveryField = R"(run:
  name: e_run
  output_dir: out/e
  seed: 99
  threads: 2
  device: cuda
  precision: bf16
  log_interval: 7
  dist_timeout: 45
data:
  corpus: wikitext
  path: corpora/wt103
  cache_dir: cache/e
  tokenizer:
    type: word
    model_path: m/tok.model
    vocab_size: 500
    model_type: bpe
    character_coverage: 0.9995
    user_symbols: ["<sep>", "<cls>"]
    max_sentences: 1000
    min_count: 3
  synthetic:
    seed: 8
    documents: 100
    keys: 3
    gap: 17
    alphabet: 9
  document_mode: true
  add_eos: false
model:
  attn_type: shaw
  n_layer: 6
  d_model: 128
  n_head: 8
  d_head: 16
  d_inner: 512
  dropout: 0.2
  dropatt: 0.05
  tgt_len: 64
  mem_len: 96
  ext_len: 8
  clamp_len: 200
  same_length: true
  pre_norm: true
  final_norm: false
  untie_r: true
  max_rel_dist: 32
  max_positions: 2048
  t5_buckets: 16
  t5_max_distance: 64
  allow_abs_with_memory: true
  cutoffs: [200, 400]
  div_val: 2
  tie_weight: false
  tie_projs: false
  init: uniform
  norm_init: ones
  init_std: 0.05
  proj_init_std: 0.02
  mem_init: zeros
  cmem_len: 8
  cmem_rate: 2
  cmem_compress: max
  cmem_loss_weight: 0.5
  mem_tokens: 3
  knn_layer: 2
  knn_topk: 8
  knn_size: 64
train:
  optimizer: adamw
  lr: 1.0e-3
  weight_decay: 0.01
  momentum: 0.9
  schedule: inv_sqrt
  warmup_steps: 100
  lr_min: 1.0e-5
  decay_rate: 0.25
  plateau_patience: 2
  clip: 1.0
  batch_size: 8
  batch_chunk: 2
  bptt_segments: 1
  max_steps: 5000
  max_tokens: 1000000
  max_minutes: 30.5
  eval_interval: 250
  checkpoint_interval: 500
  patience: 3
  var_len: true
  roll: true
  eval_max_tokens: 20000
  divergence_factor: 5.0
  divergence_patience: 7
eval:
  tgt_len: 48
  mem_len: 160
  clamp_len: 100
  same_length: 1
  mem_init: empty
  mode: sliding
  window: 64
  stride: 32
  warmup: 10
  batch_size: 2
  max_tokens: 5000
  splits: [test]
  sweep_mem_lens: [0, 64, 128]
)";

// Writes `content` to dir/name and returns the path as a string.
inline std::string write_yaml(const TempDir& dir, const std::string& name,
                              const std::string& content) {
  write_text(dir / name, content);
  return (dir / name).string();
}

// Fields whose default the every-field experiment cannot take alone, and the field a rule ties
// them to: train.bptt_segments 0 is refused with model.mem_tokens > 0 (nothing would train the
// tokens written).
inline const std::map<std::string, std::string> kCompanions = {
    {"train.bptt_segments", "model.mem_tokens"}};

// The overrides that set `key` back to its default (its text in `line`, "key: every -> default")
// in the every-field experiment, with its companion's (from `lines`, in the order of `keys`):
// "key=default" first. Returns the indices of the keys set back in `changed`.
inline std::vector<std::string> back_to_default(const std::vector<std::string>& keys,
                                                const std::vector<std::string>& lines,
                                                std::size_t i, std::vector<std::size_t>* changed) {
  std::vector<std::size_t> which = {i};
  if (auto it = kCompanions.find(keys[i]); it != kCompanions.end()) {
    for (std::size_t j = 0; j < keys.size(); ++j)
      if (keys[j] == it->second) which.push_back(j);
  }
  std::vector<std::string> overrides;
  for (std::size_t j : which)
    overrides.push_back(keys[j] + "=" + lines[j].substr(lines[j].find(" -> ") + 4));
  if (changed != nullptr) *changed = which;
  return overrides;
}

}  // namespace txl::test
