#pragma once
// What txl-eval does, as a library call: rebuild the model and its tokenizer from a checkpoint
// alone, evaluate splits, a text file or a text in the requested mode, optionally sweep the
// evaluation memory length. A file or a text needs no corpus; splits are encoded with the
// checkpoint's own tokenizer, whatever the corpus's cache holds.

#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

namespace txl::dist {
class Group;
}

namespace txl::eval {

// What txl-eval is asked besides evaluation settings. Every evaluation setting is an eval.* key
// of the checkpoint's experiment, changed through `overrides` (txl-eval's --mode, --mem-len, ...
// are written as such overrides), so it is validated like any experiment file.
struct EvalRequest {
  std::string checkpoint;                 // checkpoint file
  std::vector<std::string> splits;        // empty = the experiment's eval.splits
  std::string file;                       // a text file to evaluate instead of splits
  std::string text;                       // a text to evaluate instead of splits
  // `key.path=value` overrides of the checkpoint's experiment: eval.*, data.* (e.g. data.path
  // to find the corpus), run.threads, run.device and run.precision; anything else is refused.
  std::vector<std::string> overrides;
  int threads = 0;                        // 0 = all cores
  std::string token_losses_path;          // "" = not written
  bool sweep = false;                     // context sweep over mem_len (eval.sweep_mem_lens)
  std::string out_dir;                    // sweep output folder ("" = the checkpoint's folder)
  bool json = false;                      // JSON lines instead of a table
  // Data-parallel evaluation (txl-eval under torchrun or srun): every rank scores its share of
  // each batch's rows and the sums are reduced, so the figures are those of one process; rank
  // 0 alone prints and writes files. Null = this process alone.
  std::shared_ptr<dist::Group> group;
};

// txl-eval's shorthand flags, each the override of one eval key: `--mode sliding` is
// `--set eval.mode=sliding`; a list flag's comma-separated value becomes a YAML list
// (`--sweep-mem-lens 0,64` is `--set eval.sweep_mem_lens=[0,64]`).
struct EvalFlag {
  const char* flag;  // e.g. "--mem-len"
  const char* key;   // e.g. "eval.mem_len"
  const char* help;  // the flag's help text
  bool list;         // the key holds a list
};
const std::vector<EvalFlag>& eval_flags();

// The override a shorthand flag stands for: "eval.mem_len=256", "eval.sweep_mem_lens=[0,64]".
std::string flag_override(const EvalFlag& flag, const std::string& value);

// Runs the request, printing a table (or JSON lines) to `out`. Throws txl::Error on bad input.
void run(const EvalRequest& request, std::ostream& out);

}  // namespace txl::eval
