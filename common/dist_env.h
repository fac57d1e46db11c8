// Rank/world discovery from the environment.
//
// Order (first complete source wins):
//   RANK/WORLD_SIZE (torchrun, our launcher) -> OMPI_COMM_WORLD_RANK/SIZE ->
//   SLURM_PROCID/SLURM_NTASKS -> PMI_RANK/PMI_SIZE -> single process.
// local rank: LOCAL_RANK -> OMPI_COMM_WORLD_LOCAL_RANK -> SLURM_LOCALID -> MPI_LOCALRANKID -> 0.
// master address: MASTER_ADDR -> first host of SLURM_STEP_NODELIST / SLURM_JOB_NODELIST -> "127.0.0.1".
// master port: MASTER_PORT -> 20000 + (SLURM_JOB_ID % 20000) -> 29500.
// Throws ConfigError for unparsable numbers or rank >= world_size.
#pragma once

#include <functional>
#include <string>

namespace ftb {

struct DistEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  int node_rank = 0;  // GROUP_RANK or SLURM_NODEID, else 0
  // Nodes of the job: GROUP_WORLD_SIZE (torchrun, our launcher) -> the entries of
  // SLURM_TASKS_PER_NODE -> world_size / local_world_size -> 1. Part of the run identity.
  int nodes = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string source;  // "torchrun", "openmpi", "slurm", "pmi", "single"
  int restart_count = 0;  // TORCHELASTIC_RESTART_COUNT
  // TORCHELASTIC_USE_AGENT_STORE=True (torchrun 2.x): torchrun's agent already serves the
  // TCPStore at MASTER_ADDR:MASTER_PORT, so every rank, rank 0 too, connects as a client.
  bool agent_store = false;
};

// `getenv` is injectable for tests; default reads the process environment.
using EnvLookup = std::function<const char*(const char*)>;
DistEnv discoverDistEnv(const EnvLookup& getenv_fn = nullptr);

}  // namespace ftb
