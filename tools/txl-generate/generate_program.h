#pragma once
// What txl-generate does (its flags, input and printing, beside its main), as a call its main and
// its tests make: rebuild the model and its tokenizer from a
// checkpoint alone, read the prompts (and a context to prime the memory with), generate, print
// plain text or JSON lines.
//
// A prompt is read as a line of the corpus: it starts after an <eos> (the end of the line
// before; an empty prompt is that <eos> alone) and a newline inside it is an <eos>. With a
// context file, the file's text (an <eos> after each line) comes first instead of that <eos>.

#include <atomic>
#include <iosfwd>
#include <string>
#include <vector>

#include "txl-eval/eval_program.h"
#include "txl/generation/generate.h"

namespace CLI {
class App;
}

namespace txl::config {
struct CommandLine;
}

namespace txl::generation {

struct GenerateRequest {
  std::string checkpoint;            // checkpoint file (.safetensors)
  std::vector<std::string> prompts;  // --prompt TEXT (repeatable)
  std::string prompts_file;          // --prompts FILE: one prompt a line
  std::string context_file;          // --context-file FILE: read before every prompt
  // `key.path=value` overrides of the checkpoint's experiment: generate_settable_keys() only.
  std::vector<std::string> overrides;
  bool json = false;        // JSON lines instead of text
  bool ignore_eos = false;  // true: <eos> is a newline like any token
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
eval::Evaluation load_generation(const GenerateRequest& request);

// Generates for every prompt and prints to `out` as it goes: in text, each prompt and its
// continuation in the prompts' order, the continuation streamed as its tokens come (a blank
// line between prompts); with request.json, one JSON line per prompt as each finishes (in the
// order they finish, "index" says which prompt), then a summary line. A text that is not valid
// UTF-8 (a byte-level model cut inside a character) is in JSON as "text" with U+FFFD for each
// such byte, and exactly as "text_base64" beside it. Prompts come from `in`, one a line, when
// the request names none. Every write is checked (fs::flush_output): a full disk ends it with
// txl::Error. When `stop` (e.g. &util::stop_signal()) holds a signal, the prompts in progress end
// with what they have ("finish": "interrupted"), the rest are not printed in text (in JSON they
// are, without tokens), and the signal is returned; 0 otherwise. Throws txl::Error on bad input
// and on a model whose weights are not finite.
int run_generate(const GenerateRequest& request, const eval::Evaluation& loaded, std::istream& in,
                 std::ostream& out, const std::atomic<int>* stop = nullptr);

}  // namespace txl::generation
