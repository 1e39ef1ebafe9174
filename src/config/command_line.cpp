#include "txl/config/command_line.h"

#include <CLI/CLI.hpp>

#include "txl/config/load.h"
#include "txl/util/error.h"

namespace txl::config {

namespace {

// "eval." -> "eval.*"; a dotted key as it is.
std::string describe_allowed(const std::string& entry) {
  return !entry.empty() && entry.back() == '.' ? entry + "*" : entry;
}

// "eval.*, data.* and run.threads"
std::string join_allowed(const std::vector<std::string>& allowed) {
  std::string out;
  for (std::size_t i = 0; i < allowed.size(); ++i) {
    if (i > 0) out += i + 1 == allowed.size() ? " and " : ", ";
    out += describe_allowed(allowed[i]);
  }
  return out;
}

bool is_allowed(const std::string& key, const std::vector<std::string>& allowed) {
  for (const std::string& entry : allowed) {
    const bool section = !entry.empty() && entry.back() == '.';
    if (section ? key.rfind(entry, 0) == 0 : key == entry) return true;
  }
  return false;
}

}  // namespace

ExperimentConfig CommandLine::experiment() const {
  if (!config_path.empty()) return load_experiment(config_path, overrides);
  return parse_experiment_string("{}", "", overrides);
}

ExperimentConfig CommandLine::experiment_over(const ExperimentConfig& stored,
                                              const std::string& origin,
                                              const std::vector<std::string>& allowed) const {
  return config::experiment_over(stored, origin, overrides, allowed);
}

ExperimentConfig experiment_over(const ExperimentConfig& stored, const std::string& origin,
                                 const std::vector<std::string>& overrides,
                                 const std::vector<std::string>& allowed) {
  if (overrides.empty()) return stored;
  auto config = parse_experiment_string(dump_experiment(stored), origin, overrides);
  for (const std::string& line : diff_experiments(stored, config)) {
    const std::string key = line.substr(0, line.find(':'));
    TXL_CHECK(is_allowed(key, allowed), "--set: ", line.substr(0, 120), ": only ",
              join_allowed(allowed), " may be set here; the rest stays as in ", origin);
  }
  return config;
}

std::vector<std::string> CommandLine::arguments() const {
  std::vector<std::string> words;
  if (!config_path.empty()) words.insert(words.end(), {"--config", config_path});
  for (const std::string& o : overrides) words.insert(words.end(), {"--set", o});
  return words;
}

void add_experiment_options(CLI::App& app, CommandLine& line, const CommandLineOptions& options) {
  using Config = CommandLineOptions::Config;
  if (options.config != Config::kAbsent) {
    auto* config = app.add_option("--config,-c", line.config_path, options.config_help);
    if (options.config == Config::kRequired) config->required();
  }
  app.add_option("--set", line.overrides, options.set_help);
  if (options.dump)
    app.add_flag("--dump-config", line.dump, "print the resolved experiment and exit");
}

void add_set_shorthand(CLI::App& app, CommandLine& line, const std::string& flag,
                       const std::string& key, const std::string& help, Shorthand kind) {
  const bool list = kind == Shorthand::kList;
  app.add_option_function<std::string>(
      flag,
      [&line, key, list](const std::string& value) {
        line.overrides.push_back(key + "=" + (list ? "[" + value + "]" : value));
      },
      help + " (= --set " + key + (list ? "=[VALUE])" : "=VALUE)"));
}

}  // namespace txl::config
