// txl-convert: converts a checkpoint of txl's first format (a TorchScript archive, *.pt) to the
// data-only format, once.
//   txl-convert --trust-old-format runs/x/checkpoint_last.pt runs/x/checkpoint_last.safetensors
// Reading the old format means LibTorch's archive loader, which can run TorchScript code stored
// in the file: convert only files you made yourself or whose maker you trust. Old files did not
// hold their tokenizer: it is taken from --tokenizer DIR (a folder under data.cache_dir holding
// tokenizer.meta), or found there when exactly one cached tokenizer of the corpus fits
// (--set data.cache_dir=DIR says where to look instead of the stored experiment's folder).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>
#include <filesystem>

#include "txl/config/command_line.h"
#include "txl/data/tokenizer.h"
#include "txl/models/checkpoint.h"
#include "txl/train/legacy.h"
#include "txl/util/error.h"
#include "txl/util/fs.h"
#include "txl/util/process_setup.h"

int main(int argc, char** argv) {
  CLI::App app{
      "txl-convert: convert a checkpoint of txl's first format (TorchScript, .pt) to the "
      "data-only format (.safetensors)"};
  txl::config::CommandLine line;
  txl::config::CommandLineOptions experiment;
  experiment.config = txl::config::CommandLineOptions::Config::kAbsent;  // the checkpoint's own
  experiment.set_help = "where to look for the tokenizer: data.cache_dir=DIR (nothing else)";
  experiment.dump = false;
  txl::config::add_experiment_options(app, line, experiment);
  std::string old_path, new_path, tokenizer_dir;
  bool trust = false;
  app.add_option("old", old_path, "checkpoint of the first format (.pt)")->required();
  app.add_option("new", new_path, "where to write the converted checkpoint (.safetensors)")
      ->required();
  app.add_option("--tokenizer", tokenizer_dir, "folder of the tokenizer the model was trained with")
      ->excludes(app.get_option("--set"));
  app.add_flag("--trust-old-format", trust,
               "confirm that you trust the file: reading the old format can run code stored in it");
  CLI11_PARSE(app, argc, argv);
  try {
    TXL_CHECK(trust, old_path,
              ": reading txl's first checkpoint format uses LibTorch's archive "
              "loader, which can run code stored in the file. If you made the file yourself or "
              "trust whoever did, run again with --trust-old-format.");
    TXL_CHECK(!std::filesystem::exists(new_path), new_path, " exists already; choose another name");
    TXL_CHECK(std::filesystem::exists(old_path), "checkpoint not found: ", old_path);
    txl::ProcessSetup setup;
    setup.limit_openmp_spinning = false;  // nothing here computes enough for a re-execution
    setup.choose_openblas_core = false;
    setup.apply(argv);
    if (tokenizer_dir.empty())
      tokenizer_dir = txl::train::find_legacy_tokenizer(old_path, line).string();
    const auto tokenizer = txl::data::load_tokenizer(tokenizer_dir);
    const auto converted = txl::train::convert_legacy_checkpoint(old_path, *tokenizer);
    txl::models::write_checkpoint(new_path, converted);
    txl::models::load_model(new_path);  // the new file reads back
    std::printf("converted %s -> %s (tokenizer %s from %s%s)\n", old_path.c_str(), new_path.c_str(),
                tokenizer->fingerprint().c_str(), tokenizer_dir.c_str(),
                converted.train_state.empty() ? "; model only" : "; resumable");
    txl::fs::flush_output(std::cout, "standard output");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", txl::error_message(e).c_str());
    return 1;
  }
}
