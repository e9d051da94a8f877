#pragma once
// Reading the launcher's environment contract (docs/environment.md). No LibTorch.
// main() takes one snapshot of the environment (snapshot_environment); nothing below it
// calls getenv.

#include <optional>
#include <string>
#include <vector>

#include "ddprun/contract/environment.h"

namespace ddprun::worker {

// Where this worker sits in the job.
struct WorkerEnv {
  int rank = 0;
  int local_rank = 0;
  int world_size = 1;
  int local_world_size = 1;
  int group_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // 0: standalone, the store picks a free port
  std::string run_id = "standalone";
  int restart_count = 0;
  std::string error_file;              // empty: none
  std::string progress_file;           // DDPRUN_PROGRESS_FILE; empty: none
  std::string trace_file;              // DDPRUN_TRACE_FILE: the collective trace; empty: none
  std::string membership_file;         // DDPRUN_MEMBERSHIP_FILE (--restart-scope rank); empty: none
  bool replacement = false;            // DDPRUN_REPLACEMENT=1: a lost process's replacement
  std::optional<int> omp_num_threads;  // OMP_NUM_THREADS when set
  std::optional<int> threads_per_rank;  // DDPRUN_THREADS_PER_RANK: the launcher's CPU share
  std::optional<int> cpu_sharers;       // DDPRUN_CPU_SHARERS: ranks on this rank's CPUs
  std::string gloo_socket_ifname;       // GLOO_SOCKET_IFNAME when set
  std::string host;                     // DDPRUN_HOST: this node's name in ddprun's plan
  // DDPRUN_DEVICES: the CUDA ordinals this worker should use, in its own numbering; empty
  // when unset (then a GPU worker uses its LOCAL_RANK's, as under torchrun).
  std::vector<int> devices;
  bool standalone = false;          // no rank variable was set
  bool stdout_is_terminal = false;  // DDPRUN_STDOUT_TTY=1, or standalone on a terminal
};

// Reads the contract in one place. When none of RANK, LOCAL_RANK, WORLD_SIZE,
// LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT is set, returns a world of one
// (standalone). Otherwise RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT are required and
// the rest default as torchrun's would. Throws EnvError naming the variable when one is
// missing, not an integer, or out of range (e.g. RANK >= WORLD_SIZE).
WorkerEnv read_worker_env(const Environment& env);

// Whether this process is a warm spare (DDPRUN_SPARE=1, ddprun --warm-spare): started ahead
// of need, with no rank.
bool is_spare(const Environment& env);

// A warm spare's wait for a rank: blocks reading `fd` (its stdin) until ddprun writes the
// rank's whole environment (KEY=VALUE entries, each ended by a NUL byte) and closes it;
// makes that this process's environment (LibTorch's libraries read some of it themselves)
// and returns it. nullopt when the input ends with nothing: the round ended without
// needing the spare (exit 0). Throws EnvError on anything else.
std::optional<Environment> become_rank(int fd);

// The `count` GPU ordinals a worker that uses `count` devices should take: the first
// `count` of DDPRUN_DEVICES, else (no DDPRUN_DEVICES) LOCAL_RANK * count .. + count - 1, as
// a hand-written model-parallel DDP script does. Throws ddprun::UsageError when
// DDPRUN_DEVICES names fewer than `count` (the hint says to run ddprun --gpus-per-proc).
std::vector<int> rank_devices(const WorkerEnv& env, int count);

}  // namespace ddprun::worker
