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

#include "txl-convert/convert_program.h"
#include "txl/util/error.h"
#include "txl/util/fs.h"

int main(int argc, char** argv) {
  CLI::App app{
      "txl-convert: convert a checkpoint of txl's first format (TorchScript, .pt) to the "
      "data-only format (.safetensors)"};
  txl::convert::ConvertRequest request;
  txl::convert::add_convert_flags(app, request);
  CLI11_PARSE(app, argc, argv);
  try {
    std::cout << txl::convert::convert(request, argv) << "\n";
    txl::fs::flush_output(std::cout, "standard output");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", txl::error_message(e).c_str());
    return 1;
  }
}
