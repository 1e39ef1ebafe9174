// txl-profile-step: times fp32 training steps (forward + backward + Adam) of a TransformerLM
// and optionally writes a Chrome trace of one step (autograd profiler) for
// tools/txl-profile-step/summarize.py. A developer tool for the model's speed shape, not a
// benchmark of record (that is txl-bench).
//
//   txl-profile-step [--threads N] [--steps N] [--batch B] [--vocab V] [--attn xl|...]
//                    [--trace out.json]
// Defaults: the bench model (4 layers, d 256, 4 heads of 64, FF 1024, tgt_len = mem_len = 128),
// batch 16, vocabulary 12871, 2 threads.

#include <torch/csrc/autograd/profiler.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>

#include "txl/models/flops.h"
#include "txl/models/transformer_lm.h"

int main(int argc, char** argv) {
  int threads = 2, steps = 5, batch = 16;
  int64_t vocab = 12871;
  std::string trace, attn = "xl";
  try {
    for (int i = 1; i < argc; ++i) {
      std::string a = argv[i];
      auto next = [&]() -> std::string {
        if (i + 1 >= argc) throw std::runtime_error("missing value after " + a);
        return argv[++i];
      };
      if (a == "--threads")
        threads = std::stoi(next());
      else if (a == "--steps")
        steps = std::stoi(next());
      else if (a == "--batch")
        batch = std::stoi(next());
      else if (a == "--vocab")
        vocab = std::stoll(next());
      else if (a == "--attn")
        attn = next();
      else if (a == "--trace")
        trace = next();
      else
        throw std::runtime_error("unknown flag " + a);
    }
    torch::set_num_threads(threads);
    torch::manual_seed(1);
    txl::config::ModelConfig config;  // defaults = the bench model
    config.attn_type = attn;
    if (attn == "vanilla" || attn == "vanilla_learned") config.mem_len = 0;
    txl::models::TransformerLM model(config, vocab);
    model->train();
    torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(2.5e-4));
    auto ctx = model->default_context();
    txl::models::Memory memory;
    const int64_t q = config.tgt_len;
    using clock = std::chrono::steady_clock;
    double phase[3] = {0, 0, 0};  // forward, backward, optimizer seconds
    auto since = [](clock::time_point t) {
      return std::chrono::duration<double>(clock::now() - t).count();
    };
    auto step = [&] {
      auto tokens = torch::randint(vocab, {batch, q}, torch::kLong);
      auto targets = torch::randint(vocab, {batch, q}, torch::kLong);
      auto t0 = clock::now();
      auto out = model->forward(tokens, targets, {}, memory, {}, ctx);
      memory = out.memory;
      auto loss = out.nll.mean();
      phase[0] += since(t0);
      // Gradients reset to undefined rather than zero-filled (LibTorch 1.13's zero_grad fills).
      for (auto& p : model->parameters()) p.mutable_grad().reset();
      auto t1 = clock::now();
      loss.backward();
      phase[1] += since(t1);
      auto t2 = clock::now();
      adam.step();
      phase[2] += since(t2);
    };
    step();  // warm-up: allocator, memory filled
    step();
    for (double& p : phase) p = 0;
    auto start = clock::now();
    for (int s = 0; s < steps; ++s) step();
    const double seconds = since(start);
    std::printf("per step: forward %.1f ms, backward %.1f ms, Adam %.1f ms\n",
                1e3 * phase[0] / steps, 1e3 * phase[1] / steps, 1e3 * phase[2] / steps);
    const double tokens_per_s = static_cast<double>(steps) * batch * q / seconds;
    const auto flops = txl::models::count_flops_per_token(config, vocab, q, config.mem_len);
    std::printf("%s: %d threads, batch %d x %lld, %.1f ms/step, %.0f tokens/s, %.2f GFLOP/s\n",
                attn.c_str(), threads, batch, static_cast<long long>(q), 1e3 * seconds / steps,
                tokens_per_s, tokens_per_s * flops.training / 1e9);
    if (!trace.empty()) {
      torch::autograd::profiler::RecordProfile profile(trace);
      step();
    }
  } catch (const std::exception& e) {
    std::cerr << "txl-profile-step: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
