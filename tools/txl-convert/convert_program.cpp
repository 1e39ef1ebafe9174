#include "txl-convert/convert_program.h"

#include <fmt/core.h>
#include <CLI/CLI.hpp>

#include <filesystem>

#include "txl/data/tokenizer.h"
#include "txl/models/checkpoint.h"
#include "txl/train/legacy.h"
#include "txl/util/error.h"
#include "txl/util/process_setup.h"

namespace txl::convert {

void add_convert_flags(CLI::App& app, ConvertRequest& request) {
  config::CommandLineOptions experiment;
  experiment.config = config::CommandLineOptions::Config::kAbsent;  // the checkpoint's own
  experiment.set_help = "where to look for the tokenizer: data.cache_dir=DIR (nothing else)";
  experiment.dump = false;
  config::add_experiment_options(app, request.line, experiment);
  app.add_option("old", request.old_path, "checkpoint of the first format (.pt)")->required();
  app.add_option("new", request.new_path, "where to write the converted checkpoint (.safetensors)")
      ->required();
  app.add_option("--tokenizer", request.tokenizer_dir,
                 "folder of the tokenizer the model was trained with")
      ->excludes(app.get_option("--set"));
  app.add_flag("--trust-old-format", request.trust,
               "confirm that you trust the file: reading the old format can run code stored in it");
}

std::string convert(ConvertRequest& request, char** argv) {
  const std::string& old_path = request.old_path;
  const std::string& new_path = request.new_path;
  TXL_CHECK(request.trust, old_path,
            ": reading txl's first checkpoint format uses LibTorch's archive "
            "loader, which can run code stored in the file. If you made the file yourself or "
            "trust whoever did, run again with --trust-old-format.");
  TXL_CHECK(!std::filesystem::exists(new_path), new_path, " exists already; choose another name");
  TXL_CHECK(std::filesystem::exists(old_path), "checkpoint not found: ", old_path);
  ProcessSetup setup;
  setup.limit_openmp_spinning = false;  // nothing here computes enough for a re-execution
  setup.choose_openblas_core = false;
  setup.apply(argv);
  std::string tokenizer_dir = request.tokenizer_dir;
  if (tokenizer_dir.empty())
    tokenizer_dir = train::find_legacy_tokenizer(old_path, request.line).string();
  const auto tokenizer = data::load_tokenizer(tokenizer_dir);
  const auto converted = train::convert_legacy_checkpoint(old_path, *tokenizer);
  models::write_checkpoint(new_path, converted);
  models::load_model(new_path);  // the new file reads back
  return fmt::format("converted {} -> {} (tokenizer {} from {}{})", old_path, new_path,
                     tokenizer->fingerprint(), tokenizer_dir,
                     converted.train_state.empty() ? "; model only" : "; resumable");
}

}  // namespace txl::convert
