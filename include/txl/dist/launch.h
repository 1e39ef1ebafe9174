#pragma once
// Where a process stands in a data-parallel job: its rank, the world size and the rendezvous
// address, read from the launcher's environment (torchrun or Slurm's srun).

#include <cstdint>
#include <functional>
#include <string>

namespace txl::dist {

struct LaunchEnv {
  int rank = 0;                           // this process, 0 .. world_size - 1
  int world_size = 1;                     // processes in the job
  int local_rank = 0;                     // this process on its node (picks the GPU)
  int local_world_size = 1;               // processes on this node (shares its cores)
  std::string master_addr = "127.0.0.1";  // rank 0's host: the TCPStore rendezvous
  int master_port = 29500;                // rank 0's TCPStore port
  std::string launcher = "none";          // torchrun | slurm | none
  // torchrun's agent already serves the TCPStore at master_addr:master_port
  // (TORCHELASTIC_USE_AGENT_STORE=True): every rank is then a client, and keys live under
  // store_prefix ("/worker/attempt_<TORCHELASTIC_RESTART_COUNT>"), as PyTorch's own workers do.
  bool agent_store = false;
  std::string store_prefix;
};

// Reads, in this order:
// - torchrun (and any launcher that sets the same variables): RANK, WORLD_SIZE, LOCAL_RANK,
//   LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT;
// - Slurm under srun: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE (else the
//   leading count of SLURM_TASKS_PER_NODE, "4(x2)" -> 4); MASTER_ADDR / MASTER_PORT when
//   set, else the first host of SLURM_STEP_NODELIST (or SLURM_JOB_NODELIST) and 29500;
// - otherwise a single process.
// Throws txl::Error naming the variable when a value is malformed or out of range.
LaunchEnv launch_env();
LaunchEnv launch_env(const std::function<const char*(const char*)>& getenv);

// For a program's main: launch_env(), with the log quiet on every rank but 0 (rank 0 speaks for
// all) and `who` set to "rank R: " in a job of several processes (the prefix of its error lines).
LaunchEnv enter_job(std::string& who);

// The first host of a Slurm node list: "node[003-005,9],gpu1" -> "node003".
std::string first_slurm_host(const std::string& nodelist);

}  // namespace txl::dist
