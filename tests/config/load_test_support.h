#pragma once
// Helpers shared by the experiment-loading tests: the message of the txl::Error that a load, or
// parsing a text with --set overrides, throws.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "txl/config/load.h"
#include "txl/util/error.h"

namespace txl::config::load_test {

// The message of the txl::Error `load` throws ("" if it does not throw: the test then fails).
template <typename F>
inline std::string error_of(F&& load) {
  try {
    load();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a txl::Error";
  return "";
}

inline std::string load_error(const std::string& yaml,
                              const std::vector<std::string>& overrides = {}) {
  return error_of([&] { parse_experiment_string(yaml, "x.yaml", overrides); });
}

}  // namespace txl::config::load_test
