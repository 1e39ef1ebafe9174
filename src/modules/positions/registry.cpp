// The registry of position schemes: the one list of model.attn_type's names. A new scheme is a
// file of this folder and one line here (docs/model.md, "Adding a member").

#include <algorithm>

#include "txl/modules/position_scheme.h"
#include "txl/util/error.h"

namespace txl::modules {

namespace positions {
const PositionScheme& xl_positions();
const PositionScheme& shaw_positions();
const PositionScheme& vanilla_positions();
const PositionScheme& vanilla_learned_positions();
const PositionScheme& rope_positions();
const PositionScheme& alibi_positions();
const PositionScheme& t5_positions();
}  // namespace positions

const std::vector<const PositionScheme*>& position_schemes() {
  static const std::vector<const PositionScheme*> kSchemes = {
      &positions::xl_positions(),      &positions::shaw_positions(),
      &positions::vanilla_positions(), &positions::vanilla_learned_positions(),
      &positions::rope_positions(),    &positions::alibi_positions(),
      &positions::t5_positions(),
  };
  return kSchemes;
}

std::string position_scheme_choices() {
  std::string text;
  for (const auto* scheme : position_schemes()) {
    text += (text.empty() ? "" : " | ") + std::string(scheme->name());
  }
  return text;
}

const std::vector<const PositionScheme*>& memory_schemes() {
  static const std::vector<const PositionScheme*> kSchemes = [] {
    std::vector<const PositionScheme*> out;
    for (const auto* scheme : position_schemes()) {
      if (scheme->traits().carries_memory()) out.push_back(scheme);
    }
    return out;
  }();
  return kSchemes;
}

std::string memory_scheme_names() {
  std::string text;
  for (const auto* scheme : memory_schemes()) {
    text += (text.empty() ? "" : ", ") + std::string(scheme->name());
  }
  return text;
}

const PositionScheme& position_scheme(std::string_view name) {
  const auto& all = position_schemes();
  const auto found =
      std::find_if(all.begin(), all.end(), [&](const auto* s) { return s->name() == name; });
  TXL_CHECK(found != all.end(), "model.attn_type: unknown value \"", name,
            "\" (allowed: ", position_scheme_choices(), ")");
  return **found;
}

}  // namespace txl::modules
