#pragma once
// What txl-convert does beside its main: its flags and the conversion they ask for.

#include <string>

#include "txl/config/command_line.h"

namespace CLI {
class App;
}

namespace txl::convert {

struct ConvertRequest {
  config::CommandLine line;   // --set data.cache_dir=DIR: where to look for the tokenizer
  std::string old_path;       // checkpoint of the first format (.pt)
  std::string new_path;       // where to write the converted checkpoint (.safetensors)
  std::string tokenizer_dir;  // --tokenizer DIR ("" = found under data.cache_dir)
  bool trust = false;         // --trust-old-format
};

// txl-convert's flags on `app`, into `request`.
void add_convert_flags(CLI::App& app, ConvertRequest& request);

// Converts old_path into new_path (after setting the process up through argv) and checks that
// the new file reads back; returns the line that says what was converted. Throws txl::Error
// without --trust-old-format, when new_path exists or old_path does not, and for a file or
// tokenizer that does not convert.
std::string convert(ConvertRequest& request, char** argv);

}  // namespace txl::convert
