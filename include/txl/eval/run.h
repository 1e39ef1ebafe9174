#pragma once
// What txl-eval does, as a library call: rebuild the model and its tokenizer from a checkpoint
// alone, evaluate splits, a text file or a text in the requested mode, optionally sweep the
// evaluation memory length. A file or a text needs no corpus; splits are encoded with the
// checkpoint's own tokenizer, whatever the corpus's cache holds.

#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace txl::dist {
class Group;
}

namespace txl::eval {

// Unset optionals inherit from the experiment stored in the checkpoint.
struct EvalRequest {
  std::string checkpoint;                 // checkpoint file
  std::vector<std::string> splits;        // empty = the experiment's eval.splits
  std::string file;                       // a text file to evaluate instead of splits
  std::string text;                       // a text to evaluate instead of splits
  // `key.path=value` overrides of the checkpoint's experiment: eval.*, data.* (e.g. data.path
  // to find the corpus), run.threads, run.device and run.precision; anything else is refused.
  std::vector<std::string> overrides;
  std::optional<std::string> mode;        // memory | segments | sliding
  std::optional<int> tgt_len, mem_len, clamp_len, same_length, window, stride, warmup, batch_size;
  std::int64_t max_tokens = 0;            // 0 = every token
  int threads = 0;                        // 0 = all cores
  std::string token_losses_path;          // "" = not written
  bool sweep = false;                     // context sweep over mem_len
  std::vector<int> sweep_mem_lens;        // empty = 0, Q, 2Q, 4Q, 8Q
  std::string out_dir;                    // sweep output folder ("" = the checkpoint's folder)
  bool json = false;                      // JSON lines instead of a table
  // Data-parallel evaluation (txl-eval under torchrun or srun): every rank scores its share of
  // each batch's rows and the sums are reduced, so the figures are those of one process; rank
  // 0 alone prints and writes files. Null = this process alone.
  std::shared_ptr<dist::Group> group;
};

// Runs the request, printing a table (or JSON lines) to `out`. Throws txl::Error on bad input.
void run(const EvalRequest& request, std::ostream& out);

}  // namespace txl::eval
