#include "txl/modules/position_scheme.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "support/test_support.h"
#include "txl/config/enums.h"

namespace txl::modules {
namespace {

// The registry is the list of model.attn_type's names, in the order the config's name table lists
// them, and a scheme's traits say what the config's helpers say of its name.
TEST(PositionSchemes, TheRegistryListsModelAttnTypesNames) {
  std::vector<std::string> registered, configured;
  for (const auto* scheme : position_schemes()) registered.emplace_back(scheme->name());
  for (const auto& [type, name] : config::EnumNames<config::AttnType>::kNames) {
    configured.emplace_back(name);
    const auto& scheme = position_scheme(name);
    EXPECT_EQ(scheme.name(), name);
    EXPECT_EQ(scheme.traits().absolute, config::uses_absolute_positions(type)) << name;
    EXPECT_EQ(scheme.traits().carries_memory(), config::uses_relative_positions(type)) << name;
  }
  EXPECT_EQ(registered, configured);
}

TEST(PositionSchemes, MessagesNameTheSchemesThatCarryMemory) {
  EXPECT_EQ(memory_scheme_names(), "xl, shaw, rope, alibi, t5");
}

TEST(PositionSchemes, AnUnknownNameIsAnErrorListingTheNames) {
  TXL_EXPECT_THROW_WITH(
      position_scheme("transformer"),
      "model.attn_type: unknown value \"transformer\" (allowed: xl | shaw | vanilla | "
      "vanilla_learned | rope | alibi | t5)");
}

// What the fused decoding kernel reads is what the scheme offers: schemes that say fused_step
// prepare no table besides the encodings by distance (and u, v), and the others are refused it.
TEST(PositionSchemes, OnlySchemesTheKernelKnowsTakeTheFusedStep) {
  for (const auto* scheme : position_schemes()) {
    PositionShape shape;
    shape.d_model = 8;
    shape.n_head = 2;
    shape.d_head = 4;
    shape.options.scheme = std::string(scheme->name());
    shape.options.settings["max_positions"] = 16;
    // As the model prepares a decoder: the slots' inputs completed by the model's part.
    torch::nn::Module model, attention;
    const auto model_part = scheme->for_model(model, shape);
    auto part = scheme->for_attention(attention, shape);
    auto slots = scheme->inputs(shape, 1, 6, -1, torch::kFloat, torch::kCPU);
    if (model_part) model_part->complete(slots, nullptr);
    const auto step = part->prepare_step(slots, -1, 0.5);
    if (scheme->traits().fused_step) {
      // The kernel adds (q + v) . by_distance to (q + u) . k: nothing else may be needed.
      const bool by_distance = step.by_distance.defined();
      EXPECT_TRUE(!step.table.defined() || by_distance) << scheme->name();
      if (by_distance) {
        EXPECT_EQ(step.by_distance.sizes(), (std::vector<int64_t>{2, 6, 4})) << scheme->name();
      }
    } else {
      EXPECT_TRUE(step.table.defined()) << scheme->name();
    }
  }
}

}  // namespace
}  // namespace txl::modules
