#pragma once
// Range and consistency rules of an experiment. Private to src/config: the loader attaches the
// file:line:column where each offending key was set; validate_experiment() reports them bare.

#include <string>
#include <vector>

#include "txl/config/config.h"

namespace txl::config::detail {

struct Violation {
  std::string key;      // the dotted key to blame, e.g. "train.batch_chunk"
  std::string message;  // what is wrong and the fix, e.g. "must be >= 1, got 0"
};

// The longest run.name accepted, in bytes: a folder name under runs/, well inside the 255 bytes
// a file system allows for one name.
constexpr std::size_t kMaxRunNameBytes = 200;

// "" when `name` is a plain name: letters, digits, '.', '_' and '-', not '.' or '..', not starting
// with '-', at most kMaxRunNameBytes; with `parts`, several such names joined by single '/'s
// (run.name "kjv_ablation/xl"). Else the reason, e.g. "a part is '..'".
std::string plain_name_problem(const std::string& name, bool parts);

// Every violated rule, in struct order; empty when the experiment is consistent. Shapes that only
// the model can judge (d_model against the heads, cutoffs against the vocabulary of a trained
// tokenizer) are left to the model.
std::vector<Violation> check_experiment(const ExperimentConfig& config);

}  // namespace txl::config::detail
