#include "support/tiny_experiment.h"

namespace txl::test {

config::ExperimentConfig tiny_experiment(const std::filesystem::path& dir,
                                         const std::string& name) {
  config::ExperimentConfig c;
  c.run.name = name;
  c.run.output_dir = (dir / "runs" / name).string();
  c.run.seed = 1;
  c.run.threads = 1;
  c.run.log_interval = 5;
  c.data.corpus = config::Corpus::kSynthetic;
  c.data.cache_dir = (dir / "cache").string();
  c.data.tokenizer.type = config::TokenizerType::kWord;
  c.data.synthetic.documents = 200;
  c.data.synthetic.keys = 2;
  c.data.synthetic.gap = 24;
  c.data.synthetic.alphabet = 16;
  c.model.attn_type = txl::config::AttnType::kXl;
  c.model.n_layer = 2;
  c.model.d_model = 32;
  c.model.n_head = 2;
  c.model.d_head = 16;
  c.model.d_inner = 64;
  c.model.dropout = 0.1;  // dropout on: resume must restore the RNG too
  c.model.tgt_len = 16;
  c.model.mem_len = 16;
  c.train.lr = 1e-3;
  c.train.schedule = txl::config::Schedule::kCosine;
  c.train.warmup_steps = 3;
  c.train.batch_size = 4;
  c.train.max_steps = 20;
  c.train.eval_interval = 10;
  c.train.checkpoint_interval = 0;
  c.eval.batch_size = 4;
  c.eval.splits = {"valid"};
  return c;
}

std::shared_ptr<data::Tokenizer> word_tokenizer(int vocab) {
  std::string line;
  for (int i = 0; i < vocab - 3; ++i) line += "w" + std::to_string(i) + " ";
  return data::build_word_tokenizer({line}, 0);
}

data::Batch random_batch(std::uint64_t seed) {
  torch::manual_seed(seed);
  data::Batch b;
  b.tokens = torch::randint(30, {4, 12}, torch::kInt64);   // [4, 12]
  b.targets = torch::randint(30, {4, 12}, torch::kInt64);  // [4, 12]
  b.input_mask = torch::ones({4, 12}, torch::kBool);       // [4, 12]
  b.target_mask = torch::ones({4, 12}, torch::kBool);      // [4, 12]
  b.reset = torch::zeros({4}, torch::kBool);               // [4]
  b.n_scored = 48;
  return b;
}

train::TrainOptions quiet_run(train::StartMode start, std::int64_t pause_at_step) {
  train::TrainOptions options;
  options.start = start;
  options.quiet = true;
  options.pause_at_step = pause_at_step;
  return options;
}

}  // namespace txl::test
