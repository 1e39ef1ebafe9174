// Ablation files (load_ablation): the ablation's own fields (name, output_dir, seeds, contexts,
// sbatch), its base and the sections every variant shares, and each variant resolved, named and
// validated like an experiment.

#include "txl/config/load.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "fields.h"
#include "loader.h"
#include "txl/util/error.h"
#include "validate.h"

namespace txl::config {

namespace {

namespace stdfs = std::filesystem;
using detail::apply_experiment_file;
using detail::apply_experiment_node;
using detail::apply_overrides;
using detail::Chain;
using detail::describe;
using detail::Loader;
using detail::parse_yaml;
using detail::read_config_file;
using detail::Source;
using detail::State;
using detail::where;

// "" when an ablation's or a variant's name is a plain folder name (they make up run.name
// "<ablation>/<variant>"), else the message, e.g. "variant name 'a/b' must be ...: it holds '/'".
std::string name_error(const std::string& what, const std::string& name) {
  const std::string problem = detail::plain_name_problem(name, /*parts=*/false);
  if (problem.empty()) return "";
  return what + " " + detail::quoted(name) +
         " must be letters, digits, '_', '-' or '.' only (it names a folder under runs/): " +
         problem;
}

// Reads an optional string field of the ablation file itself.
std::string ablation_string(Loader& loader, const YAML::Node& root, const std::string& key,
                            const Source& source) {
  const YAML::Node node = root[key];
  if (!node || node.IsNull()) return "";
  if (!node.IsScalar()) {
    loader.error(where(source, node.Mark()), key + ": expected a string, got " + describe(node));
    return "";
  }
  return node.Scalar();
}

// An ablation-level list of integers (seeds, contexts): each at least `least`, no repeats,
// strictly increasing when `increasing`; an error at the offending item otherwise.
std::vector<std::int64_t> ablation_int_list(Loader& loader, const YAML::Node& root,
                                            const std::string& key, const Source& source,
                                            std::int64_t least, bool increasing) {
  std::vector<std::int64_t> out;
  const YAML::Node node = root[key];
  if (!node || node.IsNull()) return out;
  if (!node.IsSequence() || node.size() == 0) {
    loader.error(where(source, node.Mark()), key +
                                                 ": expected a non-empty list of integers, e.g. " +
                                                 key + ": [1, 2, 3], got " + describe(node));
    return out;
  }
  for (const YAML::Node& item : node) {
    std::int64_t value = 0;
    const std::string text = item.IsScalar() ? item.Scalar() : "";
    std::size_t used = 0;
    try {
      value = std::stoll(text, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    const std::string at = where(source, item.Mark());
    if (text.empty() || used != text.size()) {
      loader.error(at, key + ": expected an integer, got " + describe(item));
    } else if (value < least) {
      loader.error(at, key + ": " + text + " is below the least allowed, " + std::to_string(least));
    } else if (std::find(out.begin(), out.end(), value) != out.end()) {
      loader.error(at, key + ": " + text + " is listed twice");
    } else if (increasing && !out.empty() && value < out.back()) {
      loader.error(at, key + ": " + text + " comes after " + std::to_string(out.back()) +
                           "; list them in increasing order");
    } else {
      out.push_back(value);
      continue;
    }
    return {};
  }
  return out;
}

// `sbatch:` of an ablation: a list of option strings.
std::vector<std::string> ablation_string_list(Loader& loader, const YAML::Node& root,
                                              const std::string& key, const Source& source) {
  std::vector<std::string> out;
  const YAML::Node node = root[key];
  if (!node || node.IsNull()) return out;
  if (!node.IsSequence()) {
    loader.error(where(source, node.Mark()),
                 key + ": expected a list of strings, e.g. [\"--time=60\"], got " + describe(node));
    return out;
  }
  for (const YAML::Node& item : node) {
    if (!item.IsScalar()) {
      loader.error(where(source, item.Mark()), key + ": expected a string, got " + describe(item));
      return {};
    }
    out.push_back(item.Scalar());
  }
  return out;
}

// Threads belong to the process, which txl-ablate sets once before the first variant, so every
// variant asks for the same run.threads. "" when `variant` agrees with the first variant loaded,
// else the error at the place that set its run.threads (the variant's name when none did).
std::string threads_error(const AblationConfig& ablation, const std::string& name,
                          const State& variant, const std::string& location) {
  if (ablation.variants.empty()) return "";
  const auto& [first_name, first] = ablation.variants.front();
  const int threads = variant.config.run.threads;
  if (threads == first.run.threads) return "";
  const auto set_at = variant.origin.find("run.threads");
  return (set_at != variant.origin.end() ? set_at->second : location) + ": run.threads: variant '" +
         name + "' asks for " + std::to_string(threads) + ", variant '" + first_name + "' for " +
         std::to_string(first.run.threads) +
         "; threads belong to the process, which txl-ablate sets once for every variant: set "
         "run.threads in the ablation's own run section or with --set";
}

// ------------------------------------------------------------------------------ ablations

// The ablation's name and output_dir, checked (a name is required and must be a folder name).
AblationConfig read_ablation_names(Loader& loader, const YAML::Node& root, const Source& source) {
  AblationConfig ablation;
  ablation.name = ablation_string(loader, root, "name", source);
  ablation.output_dir = ablation_string(loader, root, "output_dir", source);
  ablation.seeds = ablation_int_list(loader, root, "seeds", source, 0, false);
  ablation.contexts = ablation_int_list(loader, root, "contexts", source, 1, true);
  ablation.sbatch = ablation_string_list(loader, root, "sbatch", source);
  if (!root["name"]) {
    loader.error(source.name,
                 "name: missing; every ablation needs a name (its runs go to runs/<name>/)");
  } else if (!loader.has_errors() && !name_error("name:", ablation.name).empty()) {
    loader.error(where(source, root["name"].Mark()), name_error("name:", ablation.name));
  }
  return ablation;
}

// Applies the ablation's base (an experiment file, or an inline mapping of sections), then the
// ablation file's own sections, which every variant shares.
void apply_ablation_base(Loader& loader, const YAML::Node& root, const Source& source) {
  Chain chain;
  const stdfs::path folder = stdfs::path(source.name).parent_path();
  const YAML::Node base_node = root["base"];
  if (base_node && base_node.IsScalar()) {
    apply_experiment_file(loader, (folder / base_node.Scalar()).lexically_normal(),
                          where(source, base_node.Mark()), chain);
  } else if (base_node && base_node.IsMap()) {
    apply_experiment_node(loader, base_node, source.name, folder, chain);
  } else if (base_node && !base_node.IsNull()) {
    loader.error(where(source, base_node.Mark()),
                 "base: expected an experiment file path or a mapping of sections, got " +
                     describe(base_node));
  }
  loader.begin_layer();
  loader.apply_document(root, source,
                        {"name", "output_dir", "base", "variants", "seeds", "contexts", "sbatch"});
}

// An error unless `variants` is a non-empty mapping of variant name -> overrides.
void check_variants_node(Loader& loader, const YAML::Node& variants, const Source& source) {
  if (!variants || variants.IsNull() || (variants.IsMap() && variants.size() == 0)) {
    loader.error(source.name,
                 "variants: missing or empty; list at least one, e.g. variants: {xl: {}}");
  } else if (!variants.IsMap()) {
    loader.error(
        where(source, variants.Mark()),
        "variants: expected a mapping of variant name -> overrides, got " + describe(variants));
  }
}

// The base with the --set overrides, which may not name the runs (each variant's are its own).
ExperimentConfig base_with_overrides(const State& base, const std::vector<std::string>& overrides) {
  Loader resolved(base);
  for (const std::string& text : overrides) {
    resolved.begin_layer(true);
    resolved.apply_override(text);
    for (const char* key : {"run.name", "run.output_dir"}) {
      if (resolved.layer_keys().count(key)) {
        resolved.error("--set " + detail::shorten(text),
                       std::string(key) +
                           ": an ablation names its variants itself "
                           "(<ablation>/<variant>); set it per variant in the file");
      }
    }
  }
  resolved.throw_if_errors();
  return resolved.state().config;
}

// One entry of an ablation's variants: its name, where it sits and its overrides.
struct VariantNode {
  std::string name;
  std::string location;  // "file:line:col" of its name
  YAML::Node changes;
  const Source& source;
};

// Resolves one variant (the base, its changes, the --set overrides, its run name and folder)
// and appends it to `ablation`, or its errors to `errors`.
void load_variant(const State& base, AblationConfig& ablation, const VariantNode& node,
                  const std::vector<std::string>& overrides, std::vector<std::string>& errors) {
  const std::string context = "variant '" + node.name + "': ";
  Loader variant(base);
  variant.begin_layer();
  if (node.changes.IsMap()) {
    variant.apply_mapping(node.changes, "", node.source);
  } else if (!node.changes.IsNull()) {
    variant.error(where(node.source, node.changes.Mark()),
                  context + "expected a mapping of overrides (dotted keys or sections), got " +
                      describe(node.changes));
  }
  const bool sets_name = variant.layer_keys().count("run.name") > 0;
  const bool sets_dir = variant.layer_keys().count("run.output_dir") > 0;
  apply_overrides(variant, overrides);
  ExperimentConfig& config = variant.config();
  if (!sets_name) {
    config.run.name = ablation.name + "/" + node.name;
    variant.note_origin("run.name", node.location);  // a rule on the name points at the variant
  }
  const std::string root_dir =
      ablation.output_dir.empty() ? "runs/" + ablation.name : ablation.output_dir;
  if (!sets_dir) config.run.output_dir = root_dir + "/" + node.name;
  if (!variant.has_errors()) variant.validate(context);
  errors.insert(errors.end(), variant.errors().begin(), variant.errors().end());
  if (errors.empty()) {
    const std::string threads = threads_error(ablation, node.name, variant.state(), node.location);
    if (!threads.empty()) errors.push_back(threads);
  }
  if (errors.empty()) ablation.variants.emplace_back(node.name, config);
}

}  // namespace

AblationConfig load_ablation(const std::string& path, const std::vector<std::string>& overrides) {
  const YAML::Node root = parse_yaml(read_config_file(path, "ablation file", ""), path);
  const Source source{path};
  TXL_CHECK(root.IsMap(), where(source, root.Mark()),
            ": expected an ablation (name, base, variants), got ", describe(root));
  Loader base;
  base.config().source = path;
  AblationConfig ablation = read_ablation_names(base, root, source);
  apply_ablation_base(base, root, source);
  check_variants_node(base, root["variants"], source);
  base.throw_if_errors();
  ablation.base = base_with_overrides(base.state(), overrides);
  std::vector<std::string> errors;
  std::set<std::string> names;
  const YAML::Node variants = root["variants"];
  for (auto it = variants.begin(); it != variants.end(); ++it) {
    const std::string name = it->first.Scalar();
    const std::string location = where(source, it->first.Mark());
    if (!name_error("variant name", name).empty()) {
      errors.push_back(location + ": " + name_error("variant name", name));
    } else if (!names.insert(name).second) {
      errors.push_back(location + ": variant '" + name + "' is listed twice");
    } else {
      load_variant(base.state(), ablation, {name, location, it->second, source}, overrides, errors);
    }
  }
  Loader::throw_errors(errors);
  return ablation;
}

}  // namespace txl::config
