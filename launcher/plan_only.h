// Dry runs without MPI: the plan comes from --hosts or from the SLURM allocation, so a
// placement can be checked on a login node before submitting. Nothing is bound or started.
#pragma once

#include <string>

#include "launcher/options.h"
#include "launcher/placement.h"

namespace ftb::launcher {

// True for --dry-run outside mpirun/srun+PMI and without --nnodes > 1 (those do the real
// rendezvous), with --hosts or SLURM_JOB_NODELIST set.
bool isPlanOnly(const LaunchOptions& opts);

// REQUIRES: isPlanOnly(opts). Node list from --hosts, else SLURM_JOB_NODELIST with
// counts from --nproc-per-node when given, else SLURM_TASKS_PER_NODE. Cores per node:
// --cores-per-node, else SLURM_CPUS_PER_TASK (one launcher task per node), else
// SLURM_JOB_CPUS_PER_NODE, else this machine's. GPUs per node: plannedGpus()
// (--gpus-per-node, else SLURM's GPU variables; launcher/local_node.h), the same on every
// node; --nproc-per-node gpu without any is a ConfigError naming --gpus-per-node. MASTER_ADDR is
// the first host; MASTER_PORT is --master-port, else slurmJobPort(SLURM_JOB_ID) (the trainer's
// rule, common/dist_env.h), else 29500. Throws ConfigError for malformed lists or mismatched
// lengths.
Plan planWithoutMpi(const LaunchOptions& opts);

}  // namespace ftb::launcher
