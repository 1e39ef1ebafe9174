#pragma once
// What txl-generate does, as a library call: rebuild the model and its tokenizer from a
// checkpoint alone, read the prompts (and a context to prime the memory with), generate, print
// plain text or JSON lines.
//
// A prompt is read as a line of the corpus: it starts after an <eos> (the end of the line
// before; an empty prompt is that <eos> alone) and a newline inside it is an <eos>. With a
// context file, the file's text (an <eos> after each line) comes first instead of that <eos>.

#include <iosfwd>
#include <string>
#include <vector>

#include "txl/eval/generate.h"
#include "txl/eval/run.h"

namespace CLI {
class App;
}

namespace txl::config {
struct CommandLine;
}

namespace txl::eval {

struct GenerateRequest {
  std::string checkpoint;             // checkpoint file (.safetensors)
  std::vector<std::string> prompts;   // --prompt TEXT (repeatable)
  std::string prompts_file;           // --prompts FILE: one prompt a line
  std::string context_file;           // --context-file FILE: read before every prompt
  // `key.path=value` overrides of the checkpoint's experiment: generate_settable_keys() only.
  std::vector<std::string> overrides;
  bool json = false;                  // JSON lines instead of text
  bool ignore_eos = false;            // true: <eos> is a newline like any token
  // max_new_tokens, temperature, top_k, top_p, seed, stop, batch_size; eos_id and lengths are
  // set from the checkpoint and the experiment.
  GenerateOptions options;
};

// txl-generate's flags on `app`: the checkpoint, prompts, sampling and output into `request`,
// and --tgt-len, --mem-len, --clamp-len, --same-length, --threads as shorthands for a --set into
// `line` (after config::add_experiment_options).
void add_generate_flags(CLI::App& app, config::CommandLine& line, GenerateRequest& request);

// What generation may change of the checkpoint's experiment: eval.* (tgt_len, mem_len,
// clamp_len, same_length are the decoding lengths), run.threads and run.device.
const std::vector<std::string>& generate_settable_keys();

// The checkpoint and the experiment to generate with (the stored one with the overrides). Throws
// txl::Error for a missing or bad checkpoint (one of another format included) and for an
// override that is invalid or not settable.
Evaluation load_generation(const GenerateRequest& request);

// The decoding lengths of an experiment: eval.tgt_len, eval.mem_len (memory mode), clamp_len and
// same_length as evaluation resolves them.
models::DecodeOptions decode_options(const config::ExperimentConfig& config);

// Generates for every prompt and prints to `out` (one block of prompt + continuation per prompt,
// or one JSON line each and a summary line); prompts come from `in`, one a line, when the
// request names none. Throws txl::Error on bad input.
void run_generate(const GenerateRequest& request, const Evaluation& loaded, std::istream& in,
                  std::ostream& out);

}  // namespace txl::eval
