#pragma once
// What the user asked for on the command line. Filled by parse_command_line (cli.cc);
// validated there, so the rest of ddprun can trust every field.

#include <optional>
#include <string>
#include <vector>

namespace ddprun {

enum class PlanFormat { kText, kJson };

struct Options {
  // "auto", "cpu", "gpu" or a positive integer, as given.
  std::string nproc_per_node = "1";
  std::optional<std::string> scheduler;  // --scheduler: skip detection
  std::optional<std::string> hostfile;   // --hostfile
  std::optional<int> nnodes;             // checked against the scheduler's node count
  std::optional<int> node_rank;          // this node's index, when the scheduler cannot tell
  std::optional<std::string> master_addr;
  std::optional<int> master_port;
  std::optional<std::string> run_id;
  int max_restarts = 0;
  double shutdown_timeout_s = 15.0;  // grace between SIGTERM and SIGKILL
  std::optional<std::string> log_dir;
  // Which streams also go to the console when --log-dir is set: 0 none, 1 stdout,
  // 2 stderr, 3 both (torchrun's numbering). Without --log-dir everything goes there.
  int tee = 0;
  bool tag_output = false;
  bool quiet = false;  // no start summary and no end table; errors are still printed
  bool dry_run = false;
  bool check = false;   // preflight every node, print a table, start nothing
  bool doctor = false;  // print what ddprun sees on this node; PROGRAM is optional
  PlanFormat format = PlanFormat::kText;
  // Head-node mode (docs/multinode.md): how to reach the other nodes, and what they get.
  std::string launcher = "auto";          // auto, ssh, mpirun, srun, local
  std::vector<std::string> env_vars;      // --env NAME or NAME=VALUE, for remote agents
  std::optional<std::string> ssh_config;  // --ssh-config: ssh -F FILE
  // Set by the head on the agents it starts; not for users.
  bool agent = false;
  bool agent_stdin = false;                // the head talks to this agent on stdin (ssh)
  std::optional<std::string> agent_nodes;  // "host:nproc,host:nproc,..." in node order
  std::optional<int> restart_count;        // the head's restart round
  std::vector<std::string> program;        // program and its arguments; empty only with doctor
};

// Either options to run with, or a message to print and an exit code (help, version,
// usage errors). Help and version go to stdout, errors to stderr.
struct CommandLine {
  std::optional<Options> options;
  std::string message;
  int exit_code = 0;
};

// Parses argv. Never exits; never throws for bad input (that becomes exit_code != 0).
CommandLine parse_command_line(int argc, const char* const* argv);

}  // namespace ddprun
