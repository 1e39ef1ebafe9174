// The registry of memory mechanisms: the one list a model's memory is made of, Transformer-XL's
// memory of positions first. A new mechanism is a file of this folder and one line here
// (docs/model.md, "Adding a member").
#include "txl/models/memory_mechanism.h"

namespace txl::models {

namespace memory {
const MemoryMechanism& xl_cache();
const MemoryMechanism& compressive();
const MemoryMechanism& memory_tokens();
const MemoryMechanism& knn();
}  // namespace memory

const std::vector<const MemoryMechanism*>& memory_mechanisms() {
  static const std::vector<const MemoryMechanism*> kMechanisms = {
      &memory::xl_cache(),
      &memory::compressive(),
      &memory::memory_tokens(),
      &memory::knn(),
  };
  return kMechanisms;
}

int64_t memory_state_rows(const config::ModelConfig& config, int64_t mem_len) {
  int64_t rows = 0;
  for (const auto* mechanism : memory_mechanisms()) {
    if (mechanism->used_by(config)) rows += mechanism->state_rows(config, mem_len);
  }
  return rows;
}

}  // namespace txl::models
