#include "txl/dist/launch.h"

#include <map>
#include <string>

#include "support/test_support.h"
#include "txl/dist/group.h"

namespace {

using txl::dist::LaunchEnv;

LaunchEnv env_of(const std::map<std::string, std::string>& vars) {
  return txl::dist::launch_env([&](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

TEST(LaunchEnv, NoLauncherIsOneProcess) {
  auto e = env_of({{"MASTER_PORT", "1234"}});
  EXPECT_EQ(e.world_size, 1);
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.launcher, "none");
}

TEST(LaunchEnv, TorchrunVariables) {
  auto e = env_of({{"RANK", "3"},
                   {"WORLD_SIZE", "8"},
                   {"LOCAL_RANK", "1"},
                   {"LOCAL_WORLD_SIZE", "2"},
                   {"MASTER_ADDR", "10.0.0.7"},
                   {"MASTER_PORT", "29911"},
                   {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                   {"TORCHELASTIC_RESTART_COUNT", "2"}});
  EXPECT_EQ(e.launcher, "torchrun");
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.world_size, 8);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world_size, 2);
  EXPECT_EQ(e.master_addr, "10.0.0.7");
  EXPECT_EQ(e.master_port, 29911);
  EXPECT_TRUE(e.agent_store);
  EXPECT_EQ(e.store_prefix, "/worker/attempt_2");
}

TEST(LaunchEnv, SlurmVariablesAndTheFirstNodeAsMaster) {
  auto e = env_of({{"SLURM_PROCID", "5"},
                   {"SLURM_NTASKS", "6"},
                   {"SLURM_LOCALID", "2"},
                   {"SLURM_TASKS_PER_NODE", "3(x2)"},
                   {"SLURM_JOB_NODELIST", "gpu[07-08]"}});
  EXPECT_EQ(e.launcher, "slurm");
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.world_size, 6);
  EXPECT_EQ(e.local_rank, 2);
  EXPECT_EQ(e.local_world_size, 3);
  EXPECT_EQ(e.master_addr, "gpu07");
  EXPECT_EQ(e.master_port, 29500);
  EXPECT_FALSE(e.agent_store);
  // MASTER_ADDR wins over the node list; the step's node list over the job's.
  auto f = env_of({{"SLURM_PROCID", "0"},
                   {"SLURM_NTASKS", "2"},
                   {"SLURM_STEP_NODELIST", "a1,a2"},
                   {"SLURM_JOB_NODELIST", "b[1-2]"}});
  EXPECT_EQ(f.master_addr, "a1");
  auto g = env_of({{"SLURM_PROCID", "0"},
                   {"SLURM_NTASKS", "2"},
                   {"MASTER_ADDR", "head"},
                   {"SLURM_JOB_NODELIST", "b[1-2]"}});
  EXPECT_EQ(g.master_addr, "head");
}

TEST(LaunchEnv, TorchrunTakesPrecedenceOverSlurm) {
  auto e =
      env_of({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}});
  EXPECT_EQ(e.launcher, "torchrun");
  EXPECT_EQ(e.world_size, 2);
}

TEST(LaunchEnv, MalformedValuesNameTheVariable) {
  TXL_EXPECT_THROW_WITH(env_of({{"RANK", "x"}, {"WORLD_SIZE", "2"}}), "RANK='x'");
  TXL_EXPECT_THROW_WITH(env_of({{"RANK", "2"}, {"WORLD_SIZE", "2"}}), "RANK='2'");
  TXL_EXPECT_THROW_WITH(env_of({{"RANK", "0"}, {"WORLD_SIZE", "0"}}), "WORLD_SIZE='0'");
  TXL_EXPECT_THROW_WITH(env_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "70000"}}),
                        "MASTER_PORT='70000'");
  TXL_EXPECT_THROW_WITH(env_of({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "two"}}), "SLURM_NTASKS");
}

TEST(LaunchEnv, FirstSlurmHost) {
  EXPECT_EQ(txl::dist::first_slurm_host("node1"), "node1");
  EXPECT_EQ(txl::dist::first_slurm_host("node1,node2"), "node1");
  EXPECT_EQ(txl::dist::first_slurm_host("node[003-005,9],gpu1"), "node003");
  EXPECT_EQ(txl::dist::first_slurm_host("n[4,6]"), "n4");
  EXPECT_EQ(txl::dist::first_slurm_host("a1,b[2-3]"), "a1");
}

TEST(ShardRows, ContiguousDisjointAndCoveringInRankOrder) {
  for (std::int64_t rows : {0, 1, 4, 7, 16}) {
    for (int world : {1, 2, 3, 5}) {
      std::int64_t next = 0, smallest = rows, largest = 0;
      for (int r = 0; r < world; ++r) {
        auto range = txl::dist::shard_rows(rows, r, world);
        EXPECT_EQ(range.begin, next) << rows << " rows, rank " << r << " of " << world;
        next = range.end;
        smallest = std::min(smallest, range.size());
        largest = std::max(largest, range.size());
      }
      EXPECT_EQ(next, rows);
      EXPECT_LE(largest - smallest, 1);
    }
  }
}

TEST(Group, OneProcessNeedsNoRendezvousAndCollectivesAreIdentities) {
  auto group = txl::dist::Group::create(LaunchEnv{}, std::chrono::seconds(1));
  EXPECT_FALSE(group->distributed());
  auto t = torch::arange(5).to(torch::kFloat);
  auto copy = t.clone();
  group->all_reduce(t);
  EXPECT_TRUE(txl::test::tensor_equal(t, copy));
  EXPECT_TRUE(txl::test::tensor_equal(group->all_gather_rows(t), copy));
  group->barrier();
}

}  // namespace
