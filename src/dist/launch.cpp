#include "txl/dist/launch.h"

#include <cerrno>
#include <csignal>
#include <cstdlib>

#include "txl/util/error.h"
#include "txl/util/log.h"

namespace txl::dist {

namespace {

int parse_int(const char* name, const char* text, int low, int high) {
  char* end = nullptr;
  errno = 0;
  const long value = std::strtol(text, &end, 10);
  TXL_CHECK(end != text && *end == '\0' && errno == 0 && value >= low && value <= high,
            "environment variable ", name, "='", text, "' is not an integer in [", low, ", ", high,
            "]");
  return static_cast<int>(value);
}

}  // namespace

std::string first_slurm_host(const std::string& nodelist) {
  // Hosts are separated by commas outside brackets; a bracket holds ranges of numbers.
  const auto comma = nodelist.find(',');
  const auto open = nodelist.find('[');
  if (open == std::string::npos || (comma != std::string::npos && comma < open))
    return nodelist.substr(0, comma);
  const auto stop = nodelist.find_first_of("-,]", open + 1);
  TXL_CHECK(stop != std::string::npos, "malformed Slurm node list '", nodelist, "'");
  return nodelist.substr(0, open) + nodelist.substr(open + 1, stop - open - 1);
}

LaunchEnv launch_env(const std::function<const char*(const char*)>& getenv) {
  auto get = [&](const char* name) -> const char* {
    const char* value = getenv(name);
    return value != nullptr && value[0] != '\0' ? value : nullptr;
  };
  LaunchEnv env;
  const char *rank = nullptr, *world = nullptr, *local = nullptr;
  if (get("RANK") && get("WORLD_SIZE")) {
    env.launcher = "torchrun";
    rank = get("RANK"), world = get("WORLD_SIZE"), local = get("LOCAL_RANK");
    env.world_size = parse_int("WORLD_SIZE", world, 1, 1 << 20);
    env.rank = parse_int("RANK", rank, 0, env.world_size - 1);
    env.local_rank = local ? parse_int("LOCAL_RANK", local, 0, env.world_size - 1) : env.rank;
    env.local_world_size =
        get("LOCAL_WORLD_SIZE")
            ? parse_int("LOCAL_WORLD_SIZE", get("LOCAL_WORLD_SIZE"), 1, env.world_size)
            : env.world_size;
    if (get("TORCHELASTIC_USE_AGENT_STORE") &&
        std::string(get("TORCHELASTIC_USE_AGENT_STORE")) == "True") {
      env.agent_store = true;
      const char* attempt = get("TORCHELASTIC_RESTART_COUNT");
      env.store_prefix = std::string("/worker/attempt_") + (attempt ? attempt : "0");
    }
  } else if (get("SLURM_PROCID") && get("SLURM_NTASKS")) {
    env.launcher = "slurm";
    env.world_size = parse_int("SLURM_NTASKS", get("SLURM_NTASKS"), 1, 1 << 20);
    env.rank = parse_int("SLURM_PROCID", get("SLURM_PROCID"), 0, env.world_size - 1);
    local = get("SLURM_LOCALID");
    env.local_rank = local ? parse_int("SLURM_LOCALID", local, 0, env.world_size - 1) : 0;
    if (get("SLURM_NTASKS_PER_NODE")) {
      env.local_world_size =
          parse_int("SLURM_NTASKS_PER_NODE", get("SLURM_NTASKS_PER_NODE"), 1, env.world_size);
    } else if (get("SLURM_TASKS_PER_NODE")) {
      const std::string spec = get("SLURM_TASKS_PER_NODE");
      const std::string count = spec.substr(0, spec.find_first_not_of("0123456789"));
      env.local_world_size =
          count.empty() ? 1 : parse_int("SLURM_TASKS_PER_NODE", count.c_str(), 1, env.world_size);
    }
    const char* nodes =
        get("SLURM_STEP_NODELIST") ? get("SLURM_STEP_NODELIST") : get("SLURM_JOB_NODELIST");
    if (nodes) env.master_addr = first_slurm_host(nodes);
  } else {
    return env;
  }
  if (get("MASTER_ADDR")) env.master_addr = get("MASTER_ADDR");
  if (get("MASTER_PORT")) env.master_port = parse_int("MASTER_PORT", get("MASTER_PORT"), 1, 65535);
  return env;
}

LaunchEnv launch_env() {
  return launch_env([](const char* name) { return std::getenv(name); });
}

LaunchEnv enter_job(std::string& who) {
  const LaunchEnv env = launch_env();
  if (env.world_size > 1) {
    // A write to a rank that died must fail with an error this rank reports, not end it
    // silently by SIGPIPE (which happened now and then when a peer was killed).
    std::signal(SIGPIPE, SIG_IGN);
    who = "rank " + std::to_string(env.rank) + ": ";
    if (env.rank != 0) log::set_level(log::Level::kQuiet);
  }
  return env;
}

}  // namespace txl::dist
