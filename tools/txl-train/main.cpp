// txl-train: trains one experiment.
//   txl-train --config experiments/kjv_xl.yaml [--set train.max_steps=500] [--resume | --overwrite]
// Data parallel: torchrun --no-python --nproc-per-node N txl-train --config ...  (or srun).
// Ctrl-C / SIGTERM: the step in flight finishes, a checkpoint is written, exit 130 / 143. A
// cache file truncated under the run by another program: a line naming it, exit 74.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>

#include "txl-train/train_program.h"
#include "txl/config/device.h"
#include "txl/config/load.h"
#include "txl/dist/group.h"
#include "txl/util/error.h"
#include "txl/util/fs.h"
#include "txl/util/process_setup.h"
#include "txl/util/stop.h"

int main(int argc, char** argv) {
  CLI::App app{
      "txl-train: train a Transformer-XL or baseline language model from a YAML experiment"};
  txl::train_program::TrainRequest request;
  txl::train_program::add_train_flags(app, request);
  CLI11_PARSE(app, argc, argv);
  std::string who;  // "rank R: " in a data-parallel job
  try {
    const auto config = request.line.experiment();
    if (request.line.dump) {
      std::cout << txl::config::dump_experiment(config);
      txl::fs::flush_output(std::cout, "standard output");
      return 0;
    }
    const auto env = txl::dist::enter_job(who);
    txl::ProcessSetup setup;
    setup.threads = config.run.threads;
    setup.processes_per_node = env.local_world_size;  // a data-parallel job shares the node's cores
    setup.apply(argv);  // before the rendezvous: it may re-execute this program
    request.options.start = request.start();
    const bool cuda = txl::config::resolve_device(config.run.device, env.local_rank).is_cuda();
    request.options.group =
        txl::dist::Group::create(env, std::chrono::seconds(config.run.dist_timeout), cuda);
    txl::util::install_stop_handlers();  // after the rendezvous, which a signal simply ends
    return txl::train_program::finish(request, txl::train::train(config, request.options),
                                      env.rank);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s%s\n", who.c_str(), txl::error_message(e).c_str());
    return 1;
  }
}
