// Experiment loading: YAML documents are applied as layers onto a typed ExperimentConfig
// (defaults < base chain < file < --set), remembering where each key was last set so that every
// error can point at a file:line:column. Here: locations, reading config files, base chains,
// load_experiment, parse_experiment_string and validate_experiment. The Loader that applies the
// layers is in loader.cpp, ablation files in ablation_file.cpp, the dump, diffs and resume keys
// in keys.cpp.

#include "txl/config/load.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include "loader.h"
#include "txl/util/error.h"
#include "txl/util/text.h"
#include "validate.h"

namespace txl::config {

namespace {

namespace stdfs = std::filesystem;

}  // namespace

namespace detail {

// ------------------------------------------------------------------------------ locations

std::string where(const Source& source, const YAML::Mark& mark) {
  if (!source.has_positions || mark.is_null() || mark.line < 0) return source.name;
  return source.name + ":" + std::to_string(mark.line + 1) + ":" + std::to_string(mark.column + 1);
}

YAML::Mark value_mark(const YAML::Node& value, const YAML::Mark& key_mark) {
  YAML::Mark mark = value.Mark();
  return value.IsNull() || mark.is_null() || mark.line < 0 ? key_mark : mark;
}

std::string describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
      return "nothing";
    case YAML::NodeType::Sequence:
      return "a sequence";
    case YAML::NodeType::Map:
      return "a mapping";
    default:
      return node.Tag() == "!" ? "the quoted string " + detail::quoted(node.Scalar())
                               : detail::quoted(node.Scalar());
  }
}

YAML::Node parse_yaml(const std::string& text, const std::string& name) {
  // YAML text is Unicode. Other bytes would come back from dump_experiment as U+FFFD, so a
  // config read back from a run or checkpoint would differ (found by fuzz_experiment).
  const std::size_t bad = util::find_invalid_utf8(text).value_or(std::string::npos);
  TXL_CHECK(bad == std::string::npos, name, ":",
            std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(bad), '\n') + 1,
            ": byte ", bad + 1, " is not UTF-8; experiment files must be UTF-8 text");
  try {
    return YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    TXL_FAIL(where(Source{name}, e.mark), ": invalid YAML: ", e.msg);
  }
}

// ------------------------------------------------------------------------------ files

std::string read_config_file(const stdfs::path& path, const std::string& what,
                             const std::string& prefix, const std::string& hint) {
  const std::string name = detail::shorten(path.string());
  std::error_code ec;
  const stdfs::file_status status = stdfs::status(path, ec);
  if (status.type() == stdfs::file_type::not_found) {
    // ENOTDIR (a file used as a folder) is also "not found"; say so.
    const bool plain = !ec || ec == std::errc::no_such_file_or_directory;
    TXL_FAIL(prefix, what, " not found: ", name, plain ? "" : " (" + ec.message() + ")", hint);
  }
  if (ec) TXL_FAIL(prefix, "cannot read ", what, " ", name, ": ", ec.message());
  if (stdfs::is_directory(status)) {
    TXL_FAIL(prefix, what, " ", name, " is a directory; expected a YAML file");
  }
  if (!stdfs::is_regular_file(status)) {
    TXL_FAIL(prefix, what, " ", name, " is not a regular file; expected a YAML file");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) TXL_FAIL(prefix, "cannot read ", what, " ", name, ": ", std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) TXL_FAIL(prefix, "cannot read ", what, " ", name, ": ", std::strerror(errno));
  return text.str();
}

// ------------------------------------------------------------------------------ base chains

namespace {

std::string chain_text(const std::vector<std::string>& chain, const std::string& last) {
  std::string text;
  for (const std::string& name : chain) text += name + " -> ";
  return text + last;
}

}  // namespace

void apply_experiment_file(Loader& loader, const stdfs::path& path,
                           const std::string& included_from, Chain& chain) {
  const std::string name = path.string();
  std::error_code ec;
  const stdfs::path resolved = stdfs::weakly_canonical(stdfs::absolute(path), ec);
  for (const stdfs::path& previous : chain.resolved) {
    if (previous == resolved) {
      TXL_FAIL(included_from, ": base cycle: ", chain_text(chain.names, name),
               " (remove one of these base: keys)");
    }
  }
  const std::string text =
      included_from.empty()
          ? read_config_file(path, "experiment file", "")
          : read_config_file(path, "base file", included_from + ": ",
                             " (a base path is relative to the folder of the file naming it)");
  const YAML::Node root = parse_yaml(text, name);
  chain.names.push_back(name);
  chain.resolved.push_back(resolved);
  const std::size_t errors_before = loader.errors().size();
  const bool holds_settings = apply_experiment_node(loader, root, name, path.parent_path(), chain);
  if (!holds_settings && loader.errors().size() == errors_before) {
    // Else an empty file (or a truncated one, or one of comments) would train the built-in
    // defaults as if they had been asked for.
    loader.error(name,
                 std::string("holds no settings (it is empty, or only comments or empty "
                             "sections)") +
                     (included_from.empty() ? "" : "; it is the base named at " + included_from) +
                     "; an experiment file needs at least one setting or a base:");
  }
  chain.names.pop_back();
  chain.resolved.pop_back();
}

bool apply_experiment_node(Loader& loader, const YAML::Node& root, const std::string& name,
                           const stdfs::path& folder, Chain& chain) {
  const Source source{name};
  if (root.IsMap() && root["base"]) {
    const YAML::Node base = root["base"];
    const std::string location = where(source, base.Mark());
    if (!base.IsScalar() || base.Scalar().empty()) {
      TXL_FAIL(location, ": base: expected the path of an experiment file, got ", describe(base));
    }
    apply_experiment_file(loader, (folder / base.Scalar()).lexically_normal(), location, chain);
  }
  loader.begin_layer();
  loader.apply_document(root, source, {"base"});
  return (root.IsMap() && root["base"]) || !loader.layer_keys().empty();
}

// Applies --set overrides, each a layer of its own so a later one may repeat an earlier key.
void apply_overrides(Loader& loader, const std::vector<std::string>& overrides) {
  for (const std::string& text : overrides) {
    loader.begin_layer(true);
    loader.apply_override(text);
  }
}

}  // namespace detail

namespace {

using detail::apply_experiment_file;
using detail::apply_experiment_node;
using detail::apply_overrides;
using detail::Chain;
using detail::Loader;
using detail::parse_yaml;

ExperimentConfig finish(Loader& loader) {
  loader.throw_if_errors();  // type errors first: range checks on half-read values mislead
  loader.validate();
  loader.throw_if_errors();
  return loader.state().config;
}

}  // namespace

// ------------------------------------------------------------------------------ public API

ExperimentConfig load_experiment(const std::string& path,
                                 const std::vector<std::string>& overrides) {
  Loader loader;
  loader.config().source = path;
  Chain chain;
  apply_experiment_file(loader, path, "", chain);
  apply_overrides(loader, overrides);
  return finish(loader);
}

ExperimentConfig parse_experiment_string(const std::string& yaml, const std::string& origin,
                                         const std::vector<std::string>& overrides) {
  Loader loader;
  loader.config().source = origin;
  const std::string name = origin.empty() ? "<string>" : origin;
  Chain chain;
  chain.names.push_back(name);
  apply_experiment_node(loader, parse_yaml(yaml, name), name, stdfs::path(origin).parent_path(),
                        chain);
  apply_overrides(loader, overrides);
  return finish(loader);
}

void validate_experiment(const ExperimentConfig& config) {
  std::vector<std::string> errors;
  const std::string prefix = config.source.empty() ? "" : config.source + ": ";
  for (const detail::Violation& v : detail::check_experiment(config)) {
    errors.push_back(prefix + v.key + ": " + v.message);
  }
  Loader::throw_errors(errors);
}

}  // namespace txl::config
