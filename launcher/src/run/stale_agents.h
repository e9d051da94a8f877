#pragma once
// A node's ddprun started again in a lost node's place (--agent-replaces) may find what is
// left of that node's earlier ddprun on the host: the ddprun itself (its parent in the ssh
// tree was lost and it is still stopping its workers, or its link alone was cut), its
// guardian, its workers (they hold the node's devices and are the same ranks). All of it
// must be gone before the ranks start here again.

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace ddprun {

// One node's place in one job, as its head gave it to the node's agent.
struct AgentIdentity {
  std::string run_id;
  int node_rank = 0;
  std::string master_addr;
  int master_port = 0;
};

// This user's processes on this host that belong to `who`, but this process: the ddprun
// agents (their command line names the run, node, master address and port), their
// guardians (the same command line, named kGuardianName: they are left to kill their
// workers), and the workers (TORCHELASTIC_RUN_ID, GROUP_RANK, MASTER_ADDR and MASTER_PORT in
// their environment, children's children too).
struct StaleProcesses {
  std::vector<pid_t> agents;
  std::vector<pid_t> guardians;
  std::vector<pid_t> workers;
  bool empty() const { return agents.empty() && guardians.empty() && workers.empty(); }
};
StaleProcesses stale_processes(const AgentIdentity& who);

// SIGKILL to the agents; once they and their guardians have ended (the guardians kill the
// workers' process groups), SIGKILL to any worker left; waits for all, at most `wait` in
// all. Returns whether every one has ended.
bool end_stale(const StaleProcesses& stale, std::chrono::milliseconds wait);

}  // namespace ddprun
