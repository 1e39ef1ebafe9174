// libFuzzer target: the YAML experiment loader, config::parse_experiment_string, on any text.
// Allowed outcomes: a validated experiment or a txl::Error. A crash, leak, UB report, hang or any
// other exception escaping is a finding. A parsed experiment must also survive
// dump -> parse with the same settings (load.h promises it).

#include <cstddef>
#include <cstdint>
#include <string>

#include "txl/config/load.h"
#include "txl/util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string yaml(reinterpret_cast<const char*>(data), size);
  txl::config::ExperimentConfig config;
  try {
    // A folder that does not exist: a `base:` in the input resolves to nothing on disk.
    config = txl::config::parse_experiment_string(yaml, "/nonexistent/fuzz/experiment.yaml");
  } catch (const txl::Error&) {
    return 0;
  }
  const std::string dumped = txl::config::dump_experiment(config);
  const auto again = txl::config::parse_experiment_string(dumped, "/nonexistent/fuzz/dump.yaml");
  if (!txl::config::same_settings(config, again)) __builtin_trap();
  return 0;
}
