#pragma once
// --check: before a long job, ask every node whether it can take part. Each node reports
// what it sees (its host name, what MASTER_ADDR resolves to there, whether the master port
// answers, where the program is); the head prints one table and says what is wrong.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <ostream>

#include "cli/options.h"
#include "cluster.h"
#include "job/job_inputs.h"
#include "plan/plan.h"

namespace ddprun {

// A folder the job will write (--log-dir, --check-path): does it, or the nearest folder
// above it that exists, take writes, and how much room is there.
struct PathCheck {
  std::string path;
  bool writable = false;
  std::int64_t free_mb = -1;  // -1: unknown
  std::string error;          // why not writable
};

struct NodeCheck {
  int node_rank = 0;
  std::string hostname;                       // as the node names itself
  std::vector<std::string> master_addresses;  // what MASTER_ADDR resolves to there
  bool master_reachable = false;              // a TCP connection to the master port worked
  std::string program;                        // resolved path, or empty
  std::string program_error;                  // why not, when empty
  std::int64_t unix_time = 0;                 // the node's clock when it checked
  int gpus = 0;                               // visible GPUs
  std::int64_t shm_free_mb = -1;              // room in /dev/shm; -1: unknown
  std::vector<PathCheck> paths;
  // --bandwidth: this node's link to the next node of the ring; link_to empty: not measured.
  std::string link_to;
  double link_mb_s = 0;
  std::string link_error;  // why it could not be measured
  // topology_summary (placement.h), or why it could not be read; --check compares nodes'.
  std::string topology;
  std::vector<std::string> placement;  // with --numa-binding/--cpu-bind: each local rank's
};

// What the head expects of every node's answers.
struct PreflightExpect {
  // The head's clock before it asked and after the last answer: a node's clock must fall
  // in between, give or take `clock_bound_s`.
  std::int64_t asked_at = 0;
  std::int64_t answered_by = 0;
  std::int64_t clock_bound_s = 2;
  // GPUs each worker takes (1 for --nproc-per-node gpu, K for --gpus-per-proc K; 0: none
  // expected). With the worker count derived from the GPUs (`gpu`, `auto`) a node must see
  // exactly workers x that many; with a worker count given, at least that many.
  int gpus_per_worker = 0;
  bool workers_from_gpus = false;
  std::int64_t min_free_mb = 1024;
  std::int64_t min_shm_mb = 256;
  // A measured link slower than this share of the median link is a problem.
  double slow_link_share = 0.5;
};

// A folder's state on this node (statvfs and access on it, or its nearest existing parent).
PathCheck check_path(const std::string& path);

// This node's answers. Connects to the master port (the head listens on it meanwhile).
NodeCheck check_this_node(int node_rank, const std::string& hostname,
                          const std::string& master_addr, int master_port,
                          const std::string& program, const Environment& env, int gpus,
                          const std::vector<std::string>& paths);

// One JSON line, and back; nullopt for anything that is not such a line.
std::string node_check_line(const NodeCheck& check);
std::optional<NodeCheck> parse_node_check(std::string_view line);

// What reaching a node gave: its report, or why there is none (e.g. ssh's last words).
struct NodeReport {
  std::optional<NodeCheck> check;
  std::string failure;
};

// The table for `plan`'s nodes (reports indexed by node rank) and, after it, one line per
// problem. `ok` tells whether there was none.
struct PreflightSummary {
  std::string text;
  bool ok = true;
};
PreflightSummary format_preflight(const LaunchPlan& plan, const std::vector<NodeReport>& reports,
                                  const PreflightExpect& expect = {});

// --check on this node. An agent prints its node's check as one line. The head keeps the
// master port listening (on node 0), starts the agents with --check, collects every
// node's line and prints the table to `out`. Returns 0 when no problem was found, else 1.
int run_check(const Options& options, const PlanInputs& inputs, const LaunchPlan& plan,
              const Environment& env, std::ostream& out);

}  // namespace ddprun
