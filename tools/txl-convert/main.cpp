// txl-convert: converts a checkpoint of txl's first format (a TorchScript archive, *.pt) to the
// data-only format, once.
//   txl-convert --trust-old-format runs/x/checkpoint_last.pt runs/x/checkpoint_last.safetensors
// Reading the old format means LibTorch's archive loader, which can run TorchScript code stored
// in the file: convert only files you made yourself or whose maker you trust. Old files did not
// hold their tokenizer: it is taken from --tokenizer DIR (a folder under data.cache_dir holding
// tokenizer.meta), or found there when exactly one cached tokenizer of the corpus fits.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <iostream>

#include "txl/config/load.h"
#include "txl/data/tokenizer.h"
#include "txl/models/checkpoint.h"
#include "txl/train/legacy.h"
#include "txl/util/error.h"

namespace {

namespace stdfs = std::filesystem;

// The cached tokenizer folders of `cache_dir` (each holding tokenizer.meta) with `vocab` ids.
std::vector<stdfs::path> fitting_tokenizers(const stdfs::path& cache_dir, std::int64_t vocab) {
  std::vector<stdfs::path> out;
  std::error_code ec;
  if (!stdfs::is_directory(cache_dir, ec)) return out;
  for (const auto& entry : stdfs::directory_iterator(cache_dir, ec)) {
    if (!stdfs::exists(entry.path() / "tokenizer.meta", ec)) continue;
    try {
      if (txl::data::load_tokenizer(entry.path())->vocab_size() == vocab) out.push_back(entry.path());
    } catch (const txl::Error&) {
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"txl-convert: convert a checkpoint of txl's first format (TorchScript, .pt) to the "
               "data-only format (.safetensors)"};
  std::string old_path, new_path, tokenizer_dir;
  bool trust = false;
  app.add_option("old", old_path, "checkpoint of the first format (.pt)")->required();
  app.add_option("new", new_path, "where to write the converted checkpoint (.safetensors)")->required();
  app.add_option("--tokenizer", tokenizer_dir, "folder of the tokenizer the model was trained with");
  app.add_flag("--trust-old-format", trust,
               "confirm that you trust the file: reading the old format can run code stored in it");
  CLI11_PARSE(app, argc, argv);
  try {
    TXL_CHECK(trust, old_path, ": reading txl's first checkpoint format uses LibTorch's archive "
              "loader, which can run code stored in the file. If you made the file yourself or "
              "trust whoever did, run again with --trust-old-format.");
    TXL_CHECK(!stdfs::exists(new_path), new_path, " exists already; choose another name");
    TXL_CHECK(stdfs::exists(old_path), "checkpoint not found: ", old_path);
    std::shared_ptr<txl::data::Tokenizer> tokenizer;
    if (!tokenizer_dir.empty()) {
      tokenizer = txl::data::load_tokenizer(tokenizer_dir);
    } else {
      // Find the cached tokenizers of the old checkpoint's vocabulary size (read from the file).
      torch::serialize::InputArchive archive;
      archive.load_from(old_path);
      torch::Tensor vocab;
      archive.read("vocab_size", vocab);
      c10::IValue yaml;
      archive.read("config", yaml);
      const auto config = txl::config::parse_experiment_string(yaml.toStringRef(), old_path);
      const auto found = fitting_tokenizers(config.data.cache_dir, vocab.item<std::int64_t>());
      TXL_CHECK(found.size() == 1, found.empty() ? "no" : "more than one",
                " cached tokenizer with ", vocab.item<std::int64_t>(), " ids in ",
                config.data.cache_dir, "; name the one the model was trained with: --tokenizer DIR");
      tokenizer_dir = found.front().string();
      tokenizer = txl::data::load_tokenizer(tokenizer_dir);
    }
    const auto converted = txl::train::convert_legacy_checkpoint(old_path, *tokenizer);
    txl::models::write_checkpoint(new_path, converted);
    txl::models::load_model(new_path);  // the new file reads back
    std::printf("converted %s -> %s (tokenizer %s from %s%s)\n", old_path.c_str(), new_path.c_str(),
                tokenizer->fingerprint().c_str(), tokenizer_dir.c_str(),
                converted.train_state.empty() ? "; model only" : "; resumable");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", txl::error_message(e).c_str());
    return 1;
  }
}
