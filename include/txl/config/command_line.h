#pragma once
// The command-line grammar every program shares for its experiment:
//
//   --config FILE          the experiment file (with its base: chain)
//   --set key.path=value   override any key; repeatable, the later wins; the value is YAML
//   --dump-config          print the resolved experiment and exit
//
// validated as load.h says (unknown keys with the closest valid one, types, enums, ranges; the
// file or the --set text, the dotted key and line:column in every message). A program adds
// these options to its CLI11 app with add_experiment_options and never writes them itself;
// program-specific flags that are settings are shorthands for --set (add_set_shorthand).
//
//   CLI::App app{"txl-foo: ..."};
//   txl::config::CommandLine line;
//   txl::config::add_experiment_options(app, line);
//   txl::config::add_set_shorthand(app, line, "--threads", "run.threads", "intra-op threads");
//   CLI11_PARSE(app, argc, argv);
//   const txl::config::ExperimentConfig config = line.experiment();  // throws txl::Error
//   if (line.dump) ... print txl::config::dump_experiment(config) and exit

#include <string>
#include <vector>

#include "txl/config/config.h"

namespace CLI {
class App;
}

namespace txl::config {

// What the experiment options of one command line said.
struct CommandLine {
  std::string config_path;             // --config FILE; "" = none given
  std::vector<std::string> overrides;  // --set key.path=value (and shorthands), in order
  bool dump = false;                   // --dump-config

  // The experiment they name: the file with its base chain and the overrides
  // (load_experiment), or without a file the built-in defaults (ExperimentConfig{}) with the
  // overrides. Throws txl::Error naming the file or the override.
  ExperimentConfig experiment() const;

  // For a program whose experiment comes with its input: config::experiment_over (below) with
  // these overrides.
  ExperimentConfig experiment_over(const ExperimentConfig& stored, const std::string& origin,
                                   const std::vector<std::string>& allowed) const;

  // The words that give these options again ("--config", FILE, then "--set", key=value for each
  // override), e.g. for the command a user copies to resume.
  std::vector<std::string> arguments() const;
};

// The experiment of a program whose experiment comes with its input (the one stored in a
// checkpoint, named `origin` in messages): `stored` with `overrides`, which may change only the
// `allowed` keys (a dotted key, or a section ending in '.': {"eval.", "data.", "run.threads"}).
// Any other change is a txl::Error naming the key, both values and what may be set.
ExperimentConfig experiment_over(const ExperimentConfig& stored, const std::string& origin,
                                 const std::vector<std::string>& overrides,
                                 const std::vector<std::string>& allowed);

// Which experiment options a program takes.
struct CommandLineOptions {
  enum class Config { kRequired, kOptional, kAbsent };
  Config config = Config::kOptional;  // --config,-c FILE (kAbsent: the input carries it)
  std::string config_help = "experiment YAML file (default: the built-in defaults of config.h)";
  std::string set_help = "override a setting: key.path=value (repeatable)";
  bool dump = true;  // --dump-config
};

// Adds --config,-c FILE, --set key.path=value and --dump-config to `app` as `options` says,
// writing into `line` (which must outlive the parse).
void add_experiment_options(CLI::App& app, CommandLine& line,
                            const CommandLineOptions& options = {});

// What a shorthand's VALUE is: the key's value as written, or the comma-separated items of a
// list key ("0,64" is the YAML list [0,64]).
enum class Shorthand { kValue, kList };

// Adds `flag` VALUE to `app` as a shorthand for --set `key`=VALUE, e.g. ("--mem-len",
// "eval.mem_len"); with Shorthand::kList, --set `key`=[VALUE]. Add it after
// add_experiment_options: a shorthand then comes after every --set, so it wins over a --set of
// the same key.
void add_set_shorthand(CLI::App& app, CommandLine& line, const std::string& flag,
                       const std::string& key, const std::string& help,
                       Shorthand kind = Shorthand::kValue);

}  // namespace txl::config
