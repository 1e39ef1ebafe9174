#pragma once
// The members of Transformer-XL's family that the contract tests run over.

#include <vector>

#include "txl/config/enums.h"

namespace txl::test {

// The position schemes that carry Transformer-XL's memory: xl, shaw, rope, alibi. The model's
// and the decoder's contract tests (causality, recurrence equals one pass, padding, the
// stop-gradient, cached keys and values, decoding equals the forward) loop over this list, and
// a test checks that every scheme with relative positions is on it: a new scheme meets them all.
inline const std::vector<config::AttnType>& memory_attn_types() {
  static const std::vector<config::AttnType> kTypes = {
      config::AttnType::kXl, config::AttnType::kShaw, config::AttnType::kRope,
      config::AttnType::kAlibi};
  return kTypes;
}

}  // namespace txl::test
