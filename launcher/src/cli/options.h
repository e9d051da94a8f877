#pragma once
// What the user asked for on the command line. Filled by parse_command_line (cli.cc);
// validated there, so the rest of ddprun can trust every field.

#include <csignal>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ddprun/contract/environment.h"
#include "plan/placement.h"
#include "plan/restart_rule.h"
#include "plan/torchrun_values.h"
#include "report/control.h"

namespace ddprun {

enum class PlanFormat { kText, kJson };

// What ddprun was asked to do; main dispatches on it. The flags that choose one other than
// kRun (--dry-run, --check, --doctor, --print-job-end, --status/--stacks/--stop/--attach)
// exclude each other.
enum class Mode { kRun, kDryRun, kCheck, kDoctor, kPrintJobEnd, kControl };

struct Options {
  // "auto", "cpu", "gpu" or a positive integer, as given.
  std::string nproc_per_node = "1";
  std::optional<std::string> scheduler;  // --scheduler: skip detection
  // --gpus-per-proc K: each worker owns K of its node's GPUs; without a number of workers
  // from --nproc-per-node, a node runs its GPUs / K of them.
  std::optional<int> gpus_per_proc;
  // --virtual-local-rank (torchrun's): each worker's CUDA_VISIBLE_DEVICES narrowed to its
  // own GPUs and LOCAL_RANK 0; by default every worker sees all and picks by LOCAL_RANK.
  bool virtual_local_rank = false;
  // --numa-binding or --cpu-bind (they exclude each other): where each worker may run.
  BindMode bind = BindMode::kNone;
  std::optional<std::string> hostfile;  // --hostfile
  std::optional<int> nnodes;            // checked against the scheduler's node count
  std::optional<int> node_rank;         // this node's index, when the scheduler cannot tell
  std::optional<std::string> master_addr;
  std::optional<int> master_port;
  std::optional<std::string> run_id;
  int max_restarts = 0;
  // --restart-on, with --restart-repeated as allow_repeats.
  RestartRule restart_on;
  // --restart-scope: a failed worker restarts every rank (job) or only itself (rank, one
  // node only: refused with --nnodes above 1 and for agents).
  RestartScope restart_scope = RestartScope::kJob;
  bool warm_spare = false;           // --warm-spare (rank scope only): a spare worker kept started
  double shutdown_timeout_s = 15.0;  // grace between SIGTERM and SIGKILL
  std::optional<std::string> log_dir;
  // torchrun's -r and -t: a stream redirected and not teed stays off the console. With
  // --log-dir every stream also goes to its file, whatever these say.
  StreamChoice redirects;
  StreamChoice tee;
  std::optional<std::set<int>> local_ranks_filter;  // console only; files keep every rank
  bool tag_output = false;
  // --fold-output / --no-fold-output (output_fold.h); unset: the default, on when the
  // console is a terminal and the job has kFoldFromRanks ranks or more (fold_wanted).
  std::optional<bool> fold_output;
  int fold_window_ms = 150;  // --fold-window
  // torchrun's --duplicate-stdout-filters and --duplicate-stderr-filters: lines holding
  // any of these strings are also copied to the round's filtered files (plan.h).
  std::vector<std::string> duplicate_stdout_filters;
  std::vector<std::string> duplicate_stderr_filters;
  // Take the stacks of workers before SIGKILL (stacks.h); --no-stacks turns it off.
  bool stacks = true;
  bool quiet = false;  // no start summary and no end table; errors are still printed
  // --report FILE: the job's report (report/job_report.h), written by node 0's ddprun.
  std::optional<std::string> report;
  Mode mode = Mode::kRun;
  // kCheck: preflight every node, print a table, start nothing.
  std::vector<std::string> check_paths;  // --check-path: folders --check tries on every node
  bool check_bandwidth = false;          // --check --bandwidth: time each link in a ring
  // kControl: what to ask a running job (control.h), and its run id (empty: the latest).
  ControlVerb control = ControlVerb::kStatus;
  std::string control_run;
  PlanFormat format = PlanFormat::kText;
  // torchrun's rendezvous options, as ddprun reads them (docs/torchrun.md). An endpoint
  // is folded into master_addr/master_port by the parser.
  std::string rdzv_backend = "static";
  RendezvousConf rdzv_conf;
  std::string role = "default";           // ROLE_NAME
  std::optional<std::string> local_addr;  // this node's address, when it hosts rank 0
  bool free_master_port = false;          // an endpoint with port 0, or --standalone
  // How PROGRAM runs (program_command.h): as a Python module, as is, or as a script path.
  bool module = false;
  bool no_python = false;
  bool run_path = false;
  std::vector<int> signals_to_handle;     // beyond ddprun's own; they stop the job
  std::optional<double> exit_timeout_s;   // after the first exit, the others get this long
  std::optional<double> stall_timeout_s;  // no worker's progress advanced for this long: stop
  // The job's clock (deadline.h): its end by hand, and the notice before it.
  std::optional<std::int64_t> deadline_unix;  // --deadline, as unix seconds
  std::optional<std::int64_t> time_limit_s;   // --time-limit: seconds from ddprun's start
  std::int64_t drain_before_s = 300;          // --drain-before; 0: no drain
  int drain_signal = SIGUSR1;                 // --drain-signal
  // Head-node mode (docs/multinode.md): how to reach the other nodes, and what they get.
  std::string launcher = "auto";          // auto, ssh, mpirun, srun, local
  std::vector<std::string> env_vars;      // --env NAME or NAME=VALUE, for remote agents
  std::optional<std::string> ssh_config;  // --ssh-config: ssh -F FILE
  // --ssh-fanout: the most nodes one node starts over ssh; beyond, agents start agents.
  int ssh_fanout = 32;
  // Set by the head on the agents it starts; not for users.
  bool agent = false;
  bool agent_stdin = false;                // the head talks to this agent on stdin (ssh)
  std::optional<std::string> agent_nodes;  // "host:nproc,host:nproc,..." in node order
  std::optional<int> restart_count;        // the head's restart round
  // ssh tree: this agent also starts the agents of nodes node_rank+1 .. agent_subtree_last.
  std::optional<int> agent_subtree_last;
  // --restart-scope rank: this agent starts a lost node's ranks on a spare node, as
  // replacements (its workers wait for the membership that names them).
  bool agent_replaces = false;
  bool agent_head_beats = false;     // the head beats on stdin: its silence is its loss (ssh)
  std::vector<std::string> program;  // program and its arguments; empty only with doctor
};

// Either options to run with, or a message to print and an exit code (help, version,
// usage errors). Help and version go to stdout, errors to stderr.
struct CommandLine {
  std::optional<Options> options;
  std::string message;
  int exit_code = 0;
};

// Parses argv. Never exits; never throws for bad input (that becomes exit_code != 0).
// `env` gives torchrun's PET_* defaults (the command line wins).
CommandLine parse_command_line(int argc, const char* const* argv, const Environment& env = {});

// The options `ddprun --help` lists, each by the names it shows ("-r", "--redirects"), in
// its order; torchrun's underscore spellings and the head's options for agents are not
// among them.
std::vector<std::vector<std::string>> help_options();

}  // namespace ddprun
