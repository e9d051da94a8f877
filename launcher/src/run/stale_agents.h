#pragma once
// A node's ddprun started again in a lost node's place (--agent-replaces) may find that
// node's old ddprun still on the host: its parent in the ssh tree was lost, and it is still
// stopping its workers (they keep their devices meanwhile), or its link alone was cut. The
// old one must be gone before a replacement starts on the same devices.

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace ddprun {

// The ddprun agents of run `run_id` for node `node_rank` on this host, of this user, but
// this process: their command lines name them (--agent, --run-id, --node-rank). Each one's
// guardian (a fork with the same command line, child of it) is not counted: it outlives it
// only to kill its workers.
std::vector<pid_t> stale_agents(const std::string& run_id, int node_rank);

// Sends SIGKILL to each of `agents` (their guardians then kill their workers at once) and
// waits until they and their children (guardian, workers) have ended, at most `wait` in all.
void end_stale_agents(const std::vector<pid_t>& agents, std::chrono::milliseconds wait);

}  // namespace ddprun
