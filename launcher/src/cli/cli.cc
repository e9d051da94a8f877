#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>

#include "cli/help_formatter.h"
#include "cli/options.h"
#include "ddprun/common/parse_int.h"
#include "ddprun/contract/errors.h"
#include "ddprun/contract/version.h"
#include "plan/deadline.h"
#include "plan/restart_rule.h"
#include "plan/torchrun_values.h"
#include "schedulers.h"

namespace ddprun {
namespace {

constexpr const char* kDescription =
    R"(ddprun launches a distributed (DDP) training job and supervises it: one worker per rank, with
torchrun's environment, on the nodes the scheduler or a hostfile gives; their output relayed
line by line; a failed rank named with its last lines. To begin:
  ddprun --nproc-per-node 2 ./my_worker   two workers on this machine
  ddprun --doctor                         what ddprun sees here: scheduler, GPUs, network
  ddprun --status                         how the running job is doing, rank by rank

Usage: ddprun [OPTIONS] [--] PROGRAM [ARGS...]
)";

constexpr const char* kExamples = R"(
Examples:
  ddprun --nproc-per-node 2 -- build/bin/ddp-train --config configs/fashion_mlp.json
  ddprun --nproc-per-node 4 --tag-output python3 train.py --epochs 3   # a torchrun script
  ddprun --nproc-per-node gpu --log-dir logs --tee 3 ./my_worker
  ddprun --nproc-per-node 8 --dry-run --format json ./my_worker
  ddprun --standalone --nproc_per_node=2 train.py   # torchrun's command line works as is

Each worker gets torchrun's environment (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT, ...); see docs/environment.md. Exit codes: docs/exit-codes.md.
)";

std::string validate_nproc(const std::string& value) {
  if (value == "auto" || value == "cpu" || value == "gpu") return {};
  if (value == "xpu") return "xpu: ddprun counts CUDA GPUs only; give a number of workers";
  const auto parsed = parse_int(value);
  if (!parsed || *parsed < 1 || *parsed > 65536) {
    return "expected a positive integer or one of auto, cpu, gpu; got '" + value + "'";
  }
  return {};
}

}  // namespace

namespace {

// The strings of torchrun's options whose values need more than CLI11's checks; parsed
// after CLI11 (torchrun_values.h) so that each error is one line naming the option.
struct TorchrunStrings {
  std::optional<std::string> deadline, time_limit;  // parsed into Options (deadline.h)
  std::optional<std::string> nnodes;
  std::optional<std::string> rdzv_endpoint;
  std::string rdzv_conf;
  std::optional<std::string> redirects;
  std::optional<std::string> tee;
  std::optional<std::string> local_ranks_filter;
  std::optional<std::string> signals_to_handle;
  std::optional<std::string> drain_before;
  std::optional<std::string> drain_signal;
  std::string event_log_handler = "null";
  std::optional<std::string> logs_specs;
  std::optional<std::string> numa_binding;
  std::optional<std::string> cpu_bind;
  std::optional<std::string> duplicate_stdout_filters, duplicate_stderr_filters;
  std::optional<std::string> rdzv_id;
  std::string restart_on = "any";
  std::string restart_scope = "job";
  bool standalone = false;
};

struct Parser {
  CLI::App app{kDescription, "ddprun"};
  Options options;
  TorchrunStrings torchrun;
  double monitor_interval_s = 0.1;
  std::string start_method = "spawn";
  // --status, --stacks, --stop, --attach: each with an optional run id.
  std::vector<std::string> control_runs[4];
  // The flags that choose the mode (Options::mode).
  bool dry_run = false;
  bool check = false;
  bool doctor = false;
  bool print_job_end = false;
  bool fold_output = false;  // --fold-output and --no-fold-output (Options::fold_output)
  bool no_fold_output = false;

  Parser();

 private:
  // One --help section each (help_formatter.h), in the order --help shows them.
  void add_workers(CLI::App& group);
  void add_nodes(CLI::App& group);
  void add_remote_start(CLI::App& group);  // how the first node starts the others
  void add_restarts(CLI::App& group);
  void add_walltime(CLI::App& group);
  void add_output(CLI::App& group);
  void add_placement(CLI::App& group);
  void add_diagnosis(CLI::App& group);
  void add_job_handle(CLI::App& group);
  void add_torchrun(CLI::App& group);
  void add_agent();  // set by a head ddprun on the agents it starts; not in --help
};

// torchrun reads each of its options also from PET_<NAME> (what Kubeflow's PyTorchJob
// sets); the command line wins. PET_NNODES and PET_NODE_RANK describe the job and are read
// by the Kubeflow reader (schedulers/kubeflow.cc); PET_MASTER_ADDR and PET_MASTER_PORT with
// the job's inputs (job_inputs.cc), next to their plain names.
struct PetVariable {
  const char* variable;
  const char* option;
  bool flag;
};
constexpr PetVariable kPetVariables[] = {
    {"PET_NPROC_PER_NODE", "--nproc-per-node", false},
    {"PET_RDZV_BACKEND", "--rdzv-backend", false},
    {"PET_RDZV_ENDPOINT", "--rdzv-endpoint", false},
    {"PET_RDZV_ID", "--rdzv-id", false},
    {"PET_RDZV_CONF", "--rdzv-conf", false},
    {"PET_STANDALONE", "--standalone", true},
    {"PET_MAX_RESTARTS", "--max-restarts", false},
    {"PET_MONITOR_INTERVAL", "--monitor-interval", false},
    {"PET_START_METHOD", "--start-method", false},
    {"PET_ROLE", "--role", false},
    {"PET_MODULE", "--module", true},
    {"PET_NO_PYTHON", "--no-python", true},
    {"PET_RUN_PATH", "--run-path", true},
    {"PET_LOG_DIR", "--log-dir", false},
    {"PET_REDIRECTS", "--redirects", false},
    {"PET_TEE", "--tee", false},
    {"PET_LOCAL_RANKS_FILTER", "--local-ranks-filter", false},
    {"PET_LOCAL_ADDR", "--local-addr", false},
    {"PET_SIGNALS_TO_HANDLE", "--signals-to-handle", false},
    {"PET_DUPLICATE_STDOUT_FILTERS", "--duplicate-stdout-filters", false},
    {"PET_DUPLICATE_STDERR_FILTERS", "--duplicate-stderr-filters", false},
};

std::string seconds_check(const std::string& value, double low, double high) {
  const auto seconds = parse_seconds(value);
  if (!seconds || *seconds < low || *seconds > high) {
    char range[64];
    std::snprintf(range, sizeof range, "%g to %g", low, high);
    return "expected " + std::string(range) + " seconds; got '" + value + "'";
  }
  return {};
}

CLI::Validator seconds_validator(double low, double high) {
  return CLI::Validator(
      [low, high](const std::string& value) { return seconds_check(value, low, high); }, "SECONDS",
      "seconds");
}

std::string id_check(const std::string& value) {
  if (value.empty() || value.size() > 128) return "must be 1 to 128 characters";
  for (char c : value) {
    if (std::isalnum(static_cast<unsigned char>(c)) == 0 && c != '-' && c != '_' && c != '.') {
      return "may contain only letters, digits, '-', '_' and '.'";
    }
  }
  return {};
}

std::string env_check(const std::string& value) {
  const std::string name = value.substr(0, value.find('='));
  const bool valid = !name.empty() && std::isdigit(static_cast<unsigned char>(name.front())) == 0 &&
                     std::all_of(name.begin(), name.end(), [](char c) {
                       return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_';
                     });
  return valid ? std::string() : "'" + name + "' is not a variable name";
}

// A value from a fixed list; the error names the list (CLI11's IsMember shows "{a,b,c}").
CLI::Validator one_of(std::vector<std::string> names, const char* what) {
  return CLI::Validator(
      [names](const std::string& value) -> std::string {
        if (std::find(names.begin(), names.end(), value) != names.end()) return {};
        std::string list;
        for (const auto& name : names) list += (list.empty() ? "" : ", ") + name;
        return "expected one of " + list + "; got '" + value + "'";
      },
      "", what);
}

// --format: text or json, as the enum's number; 0 and 1 stay accepted, as CLI11's
// CheckedTransformer accepted them (its error showed "{json->1,text->0} OR {1,0}").
std::string format_transform(std::string& value) {
  if (value == "text" || value == "0") {
    value = "0";
  } else if (value == "json" || value == "1") {
    value = "1";
  } else {
    return "expected text or json; got '" + value + "'";
  }
  return {};
}

std::string scheduler_check(const std::string& value) {
  for (const auto name : scheduler_names()) {
    if (name == value) return {};
  }
  return "expected one of slurm, lsf, pbs, sge, mpi, kubeflow, hostfile, local; got '" + value +
         "'";
}

// An option with a value, shown in --help as its names and `value_text` ("N|auto|cpu|gpu").
template <typename T>
CLI::Option* add_value(CLI::App& group, const char* names, T& variable, const char* value_text,
                       const std::string& description) {
  return group.add_option(names, variable, description)->option_text(value_text);
}

// An option group: a section of --help, without the help flag CLI11 gives each group.
CLI::App& add_group(CLI::App& app, const char* name) {
  CLI::App& group = *app.add_option_group(name);
  group.set_help_flag();
  return group;
}

// torchrun's underscore spellings of the options (--nproc_per_node), listed once.
std::string underscore_spellings(const CLI::App& app) {
  std::string list;
  const auto add = [&list](const CLI::Option* option) {
    for (const auto& name : option->get_lnames()) {
      if (name.find('_') != std::string::npos) list += (list.empty() ? "--" : ", --") + name;
    }
  };
  for (const CLI::Option* option : app.get_options()) add(option);
  for (const CLI::App* group : app.get_subcommands([](const CLI::App*) { return true; })) {
    for (const CLI::Option* option : group->get_options()) {
      if (!option->get_group().empty()) add(option);
    }
  }
  return list;
}

Parser::Parser() {
  app.formatter(std::make_shared<HelpFormatter>());
  app.footer(kExamples);
  app.prefix_command();  // everything from PROGRAM on belongs to the worker
  add_workers(add_group(app, "Workers"));
  CLI::App& nodes = add_group(app, "Nodes and rendezvous");
  add_nodes(nodes);
  add_remote_start(nodes);
  add_restarts(add_group(app, "Restarts and faults"));
  add_walltime(add_group(app, "Walltime and signals"));
  add_output(add_group(app, "Output and logs"));
  add_placement(add_group(app, "Placement and GPUs"));
  CLI::App& diagnosis = add_group(app, "Diagnosis and the job handle");
  add_diagnosis(diagnosis);
  add_job_handle(diagnosis);
  CLI::App& torchrun_group = add_group(app, "torchrun compatibility");
  add_torchrun(torchrun_group);
  add_agent();
  app.set_version_flag("--version", std::string("ddprun ") + kVersion);
  torchrun_group.description(
      "Every torchrun option is accepted, with torchrun's meaning or one clear error "
      "(docs/torchrun.md), and so are its PET_* variables (the command line wins) and its "
      "underscore spellings: " +
      underscore_spellings(app) + ".");
}

void Parser::add_workers(CLI::App& group) {
  add_value(group, "--nproc-per-node,--nproc_per_node", options.nproc_per_node, "N|auto|cpu|gpu",
            "Workers on this node: a number, 'gpu' (one per visible GPU), 'cpu' (one "
            "per CPU) or 'auto' (GPUs if any, else the scheduler's slots, else one per "
            "CPU)")
      ->check(CLI::Validator(validate_nproc, "N|auto|cpu|gpu", "nproc"))
      ->capture_default_str();
  group.add_flag("-m,--module", options.module,
                 "Run PROGRAM as a Python module (python -u -m PROGRAM)");
  group.add_flag("--no-python,--no_python", options.no_python,
                 "Run PROGRAM as it is, even if it ends in .py");
  group.add_flag("--run-path,--run_path", options.run_path,
                 "Run PROGRAM as a Python script path (python -u PROGRAM)");
  add_value(group, "--run-id,--run_id", options.run_id, "ID",
            "Job identifier passed to workers as TORCHELASTIC_RUN_ID (default: random)")
      ->check(id_check);
}

void Parser::add_nodes(CLI::App& group) {
  add_value(group, "--scheduler", options.scheduler, "NAME",
            "Read the job from this scheduler instead of detecting it: slurm, lsf, pbs, "
            "sge, mpi, kubeflow, hostfile, local")
      ->check(CLI::Validator(scheduler_check, "NAME", "scheduler"));
  add_value(group, "--hostfile", options.hostfile, "FILE",
            "Nodes of the job, one per line (plain, 'host slots=N', 'host:N' or a Slurm "
            "hostlist); see docs/schedulers.md");
  add_value(group, "--nnodes", torchrun.nnodes, "N",
            "Number of nodes (N, or torchrun's N:N); checked against what the scheduler "
            "or hostfile says");
  add_value(group, "--node-rank,--node_rank", options.node_rank, "R",
            "This node's index, when neither the scheduler nor the host name tells")
      ->check(CLI::Range(0, 1 << 20));
  add_value(group, "--master-addr,--master_addr", options.master_addr, "HOST",
            "Address of rank 0's rendezvous store (default: MASTER_ADDR, else the first "
            "node, else 127.0.0.1)");
  add_value(group, "--master-port,--master_port", options.master_port, "PORT",
            "Port of the rendezvous store (default: MASTER_PORT, else derived from the job id, "
            "else a free port)")
      ->check(CLI::Range(1, 65535));
  add_value(group, "--local-addr,--local_addr", options.local_addr, "HOST",
            "This node's address; the master address when this node runs rank 0");
}

void Parser::add_remote_start(CLI::App& group) {
  add_value(group, "--launcher", options.launcher, "auto|ssh|mpirun|srun|local",
            "How the first node reaches the others: auto (srun in Slurm, mpirun in "
            "SGE/PBS/LSF, else ssh), ssh, mpirun, srun, or local (this node only)")
      ->check(one_of({"auto", "ssh", "mpirun", "srun", "local"}, "launcher"))
      ->capture_default_str();
  add_value(group, "--env", options.env_vars, "NAME[=VALUE]",
            "Pass NAME (its value here) or NAME=VALUE to the workers on other nodes; "
            "repeatable (PATH, LD_LIBRARY_PATH, CUDA_*, NCCL_*, OMP_*, ... always go)")
      ->allow_extra_args(false)
      ->check(CLI::Validator(env_check, "NAME[=VALUE]", "env"));
  add_value(group, "--ssh-config", options.ssh_config, "FILE",
            "ssh configuration file (ssh -F FILE)");
  add_value(group, "--ssh-fanout", options.ssh_fanout, "K",
            "With ssh, the most nodes one node starts itself (default 32); beyond that "
            "agents start agents, a tree whose start time grows with its depth")
      ->check(CLI::Range(1, 4096));
}

void Parser::add_restarts(CLI::App& group) {
  add_value(group, "--max-restarts,--max_restarts", options.max_restarts, "K",
            "Restart the whole job up to this many times after a worker fails")
      ->check(CLI::Range(0, 1000000))
      ->capture_default_str();
  add_value(group, "--restart-on", torchrun.restart_on, "any|LIST",
            "Which failures a restart may fix: any, or a comma list of 'signals' (a "
            "worker killed by a signal, a node lost), 'stall' and exit codes")
      ->capture_default_str();
  add_value(group, "--restart-scope", torchrun.restart_scope, "job|rank",
            "What a worker's failure restarts: every rank (job), or only the lost rank, "
            "in its place while the others go on (rank; one node only); each counts "
            "against --max-restarts")
      ->check(one_of({"job", "rank"}, "job|rank"))
      ->capture_default_str();
  group.add_flag("--restart-repeated", options.restart_on.allow_repeats,
                 "Restart even when a round fails as the one before it did and reached no "
                 "newer step (by default that ends the restarts)");
  add_value(group, "--shutdown-timeout,--shutdown_timeout", options.shutdown_timeout_s, "SECONDS",
            "Seconds between SIGTERM and SIGKILL when stopping workers")
      ->check(seconds_validator(0, 86400))
      ->capture_default_str();
  add_value(group, "--exit-timeout,--exit_timeout", options.exit_timeout_s, "SECONDS",
            "Once any rank has exited (even with 0), stop the others after this many "
            "seconds and fail (exit 124); off by default")
      ->check(seconds_validator(0, 31536000));
  add_value(group, "--stall-timeout,--stall_timeout", options.stall_timeout_s, "SECONDS",
            "When no rank's DDPRUN_PROGRESS_FILE advances for this many seconds, name "
            "the ranks behind, show every rank's stack, and fail the round (exit 124; "
            "--restart-on stall restarts it); programs that write no progress are never "
            "stalled. Off by default")
      ->check(seconds_validator(0.01, 31536000));
  group.add_flag("!--no-stacks,!--no_stacks", options.stacks,
                 "Do not take the stacks of workers that outlive the grace before they are "
                 "killed (eu-stack; Python frames through faulthandler, armed by a "
                 "sitecustomize on PYTHONPATH)");
}

void Parser::add_walltime(CLI::App& group) {
  add_value(group, "--deadline", torchrun.deadline, "TIME",
            "When the scheduler will end the job: unix seconds or local "
            "YYYY-MM-DDTHH:MM[:SS] (default: what Slurm, Grid Engine, PBS or LSF say)");
  add_value(group, "--time-limit", torchrun.time_limit, "DURATION",
            "The job's walltime from now: seconds or [[D-]HH:]MM:SS");
  add_value(group, "--drain-before", torchrun.drain_before, "DURATION",
            "Send the workers --drain-signal this long before the job's end, so they "
            "checkpoint and exit 75 (seconds or [[D-]HH:]MM:SS; default 300; 0: off)");
  add_value(group, "--drain-signal", torchrun.drain_signal, "SIGNAL",
            "The notice sent before the job's end (default SIGUSR1)");
  group.add_flag("--print-job-end", print_job_end,
                 "Print when the scheduler will end this job (unix seconds, then where ddprun "
                 "learnt it) and exit; 1 when it cannot tell. PROGRAM is optional");
  add_value(group, "--signals-to-handle,--signals_to_handle", torchrun.signals_to_handle, "SIGNALS",
            "Also catch these signals (e.g. SIGXCPU,SIGUSR1), pass them to the workers "
            "and stop the job; SIGUSR1 and SIGUSR2 are always passed on without a stop");
}

void Parser::add_output(CLI::App& group) {
  add_value(group, "--log-dir,--log_dir", options.log_dir, "DIR",
            "Also write each rank's stdout and stderr to files under this folder");
  add_value(group, "-r,--redirects", torchrun.redirects, "0|1|2|3|LR:N,...",
            "Keep these streams off the console (files only): 0 none, 1 stdout, 2 "
            "stderr, 3 both, or LOCAL_RANK:N,...");
  add_value(group, "-t,--tee", torchrun.tee, "0|1|2|3|LR:N,...",
            "Write these streams to files and the console (as -r); both need --log-dir "
            "or use a folder under TMPDIR");
  add_value(group, "--local-ranks-filter,--local_ranks_filter", torchrun.local_ranks_filter,
            "RANKS", "Show only these local ranks on the console, e.g. 0 or 0,3 (files keep all)");
  group.add_flag("--tag-output,--tag_output", options.tag_output,
                 "Prefix every output line with [host:rank]");
  group.add_flag("--fold-output,--fold_output", fold_output,
                 "Show the same line from several ranks once, tagged with the ranks ([0-7,9] "
                 "text), when they print it within --fold-window; the files keep every line. "
                 "Default: on when the console is a terminal and the job has 8 ranks or more");
  group.add_flag("--no-fold-output,--no_fold_output", no_fold_output,
                 "One console line per rank and line, whatever the console and the ranks");
  add_value(group, "--fold-window,--fold_window", options.fold_window_ms, "MS",
            "How long a line waits for the same line from other ranks (default 150)")
      ->check(CLI::Range(1, 10000));
  group.add_flag("-q,--quiet", options.quiet,
                 "Print no start summary and no per-rank table at the end (errors still)");
  add_value(group, "--report", options.report, "FILE",
            "Write the job's report to FILE as JSON (docs/report.md): every round, each "
            "rank's end, the root cause; replaced whole after every round and at the end");
}

void Parser::add_placement(CLI::App& group) {
  add_value(group, "--gpus-per-proc,--gpus_per_proc", options.gpus_per_proc, "K",
            "GPUs each worker owns (rank r on a node: GPUs K*r .. K*r+K-1, listed in "
            "DDPRUN_DEVICES); a node runs its GPUs / K workers unless --nproc-per-node "
            "gives a number")
      ->check(CLI::Range(1, 1024));
  group.add_flag("--virtual-local-rank,--virtual_local_rank", options.virtual_local_rank,
                 "Narrow each worker's CUDA_VISIBLE_DEVICES to its own GPU(s) and set "
                 "LOCAL_RANK to 0, as torchrun does (default: every worker sees all and picks "
                 "by LOCAL_RANK)");
  add_value(group, "--numa-binding,--numa_binding", torchrun.numa_binding,
            "node|socket|exclusive|core-complex|none",
            "Bind each worker to CPUs near its GPU, found by PCI bus id, inside the CPUs "
            "ddprun may use (torchrun's modes; default none)");
  add_value(group, "--cpu-bind,--cpu_bind", torchrun.cpu_bind, "cores|numa|none",
            "For CPU-only jobs, bind each worker to CPUs of its own: cores (the node's "
            "cores split evenly) or numa (ranks spread over NUMA nodes); default none");
}

void Parser::add_diagnosis(CLI::App& group) {
  group.add_flag("--dry-run,--dry_run", dry_run, "Print the launch plan; start nothing");
  add_value(group, "--format", options.format, "text|json", "Format of --dry-run output")
      ->transform(CLI::Validator(format_transform, "", "format"));
  group.add_flag("--check", check,
                 "Ask every node whether it can take part (reachable, same master address, "
                 "master port reachable, program found, clock, GPUs, /dev/shm, --log-dir and "
                 "--check-path writable); print a table, start nothing");
  add_value(group, "--check-path", options.check_paths, "DIR",
            "With --check: a folder the job writes (checkpoints, data, ...); every node "
            "says whether it can write there and how much room is left; repeatable")
      ->allow_extra_args(false);
  group.add_flag("--bandwidth", options.check_bandwidth,
                 "With --check: every node streams 64 MiB to the next in a ring, all at once "
                 "(as a ring all-reduce loads the links), on the port after the master port; "
                 "each link's MB/s is shown and a slow one named");
  group.add_flag("--doctor", doctor,
                 "Print what ddprun sees on this node (scheduler, nodes, GPUs, network, the "
                 "worker's LibTorch and BLAS, limits) and exit; PROGRAM is optional");
}

void Parser::add_job_handle(CLI::App& group) {
  static constexpr const char* kControl[4][2] = {
      {"--status",
       "Show a running job of yours on this host (the latest when no RUN_ID): each "
       "rank's host, state, step, last output line, and the restarts"},
      {"--stacks",
       "Show where every rank of a running job is now (Python and native frames), "
       "stopping nothing; the latest job when no RUN_ID"},
      {"--stop",
       "Stop a running job as SIGTERM to its ddprun would (the latest when no "
       "RUN_ID)"},
      {"--attach",
       "Follow the console of a job that SIGHUP detached from its terminal, "
       "until it ends; exits with the job's code (the latest when no RUN_ID)"}};
  for (int verb = 0; verb < 4; ++verb) {
    add_value(group, kControl[verb][0], control_runs[verb], "[RUN_ID]", kControl[verb][1])
        ->expected(0, 1)
        ->type_name("[RUN_ID]");
  }
}

void Parser::add_torchrun(CLI::App& group) {
  group.add_flag("--standalone", torchrun.standalone,
                 "One node, this machine, on a free port (torchrun's --standalone)");
  add_value(group, "--rdzv-backend,--rdzv_backend", options.rdzv_backend, "c10d|static",
            "torchrun's rendezvous backend; both mean rank 0's TCPStore here")
      ->capture_default_str();
  add_value(group, "--rdzv-endpoint,--rdzv_endpoint", torchrun.rdzv_endpoint, "HOST[:PORT]",
            "HOST[:PORT] of the rendezvous store, as --master-addr/--master-port; port 0 "
            "or none with c10d: a free port (c10d's default is 29400)");
  add_value(group, "--rdzv-conf,--rdzv_conf", torchrun.rdzv_conf, "KEY=VALUE,...",
            "torchrun's KEY=VALUE,... rendezvous settings; join_timeout (or timeout) "
            "bounds how long nodes may take to report");
  add_value(group, "--rdzv-id,--rdzv_id", torchrun.rdzv_id, "ID",
            "torchrun's name for --run-id; with --standalone a fresh one is used, as "
            "torchrun does")
      ->check(id_check);
  add_value(group, "--role", options.role, "NAME", "The workers' ROLE_NAME (default: 'default')");
  add_value(group, "--monitor-interval,--monitor_interval", monitor_interval_s, "SECONDS",
            "Accepted for torchrun; ddprun learns of every exit at once (no polling)")
      ->check(seconds_validator(0, 86400));
  add_value(group, "--start-method,--start_method", start_method, "spawn|fork|forkserver",
            "Accepted for torchrun; every worker is a fresh process")
      ->check(one_of({"spawn", "fork", "forkserver"}, "start method"));
  add_value(group, "--event-log-handler,--event_log_handler", torchrun.event_log_handler, "null",
            "Accepted for torchrun: only 'null'");
  add_value(group, "--duplicate-stdout-filters,--duplicate_stdout_filters",
            torchrun.duplicate_stdout_filters, "TEXT,...",
            "Also copy the workers' stdout lines that contain any of these strings to "
            "filtered_stdout.log in the round's log folder (torchrun 2.9's)");
  add_value(group, "--duplicate-stderr-filters,--duplicate_stderr_filters",
            torchrun.duplicate_stderr_filters, "TEXT,...",
            "The same for stderr lines, to filtered_stderr.log");
  group
      .add_option("--logs-specs,--logs_specs", torchrun.logs_specs,
                  "torchrun's Python plugin for logs: not supported")
      ->group("");
}

void Parser::add_agent() {
  app.add_flag("--agent", options.agent, "Started by a head ddprun")->group("");
  app.add_flag("--agent-stdin", options.agent_stdin, "The head talks on stdin")->group("");
  app.add_option("--agent-nodes", options.agent_nodes, "Nodes of the head's plan")->group("");
  app.add_option("--restart-count", options.restart_count, "The head's restart round")
      ->check(CLI::Range(0, 1000000))
      ->group("");
  app.add_option("--agent-subtree", options.agent_subtree_last, "Last node this agent starts")
      ->check(CLI::Range(0, 1 << 24))
      ->group("");
}

// torchrun's comma-separated filter list; an empty piece would match every line and is
// left out.
std::vector<std::string> split_filters(const std::string& list) {
  std::vector<std::string> filters;
  for (std::size_t start = 0; start <= list.size();) {
    const auto comma = std::min(list.find(',', start), list.size());
    if (comma > start) filters.push_back(list.substr(start, comma - start));
    start = comma + 1;
  }
  return filters;
}

CommandLine usage_error(const std::string& message) {
  CommandLine result;
  result.message = "ddprun: error: " + message + "\n";
  result.exit_code = kExitLauncherError;
  return result;
}

// What CLI11 cannot check alone: torchrun's compound values, and options that only make
// sense together. Throws UsageError.
void finish_options(Parser& parser) {
  Options& options = parser.options;
  TorchrunStrings& torchrun = parser.torchrun;
  const CLI::App& app = parser.app;
  // The mode: one flag at most chooses it.
  std::string chosen;
  const auto choose = [&](const std::string& flag, Mode mode) {
    if (!chosen.empty()) throw UsageError(chosen + " and " + flag + " exclude each other");
    chosen = flag;
    options.mode = mode;
  };
  if (parser.dry_run) choose("--dry-run", Mode::kDryRun);
  if (parser.check) choose("--check", Mode::kCheck);
  if (parser.doctor) choose("--doctor", Mode::kDoctor);
  if (parser.print_job_end) choose("--print-job-end", Mode::kPrintJobEnd);
  for (const ControlVerb verb :
       {ControlVerb::kStatus, ControlVerb::kStacks, ControlVerb::kStop, ControlVerb::kAttach}) {
    const std::string flag = "--" + std::string(control_verb_name(verb));
    if (app.count(flag) == 0) continue;
    choose(flag, Mode::kControl);
    options.control = verb;
    const auto& run = parser.control_runs[static_cast<int>(verb)];
    options.control_run = run.empty() ? std::string() : run.front();
  }
  if (torchrun.nnodes) options.nnodes = parse_nnodes(*torchrun.nnodes);
  const bool repeats = options.restart_on.allow_repeats;
  options.restart_on = parse_restart_on(torchrun.restart_on);
  options.restart_on.allow_repeats = repeats;
  if (torchrun.restart_scope == "rank") {
    options.restart_scope = RestartScope::kRank;
    if (options.agent || options.nnodes.value_or(1) > 1) {
      throw UsageError(
          "--restart-scope rank runs on a single node for now" +
              (options.agent ? std::string(", not under a head ddprun")
                             : "; --nnodes " + std::to_string(*options.nnodes) + " asks for more"),
          "leave out --restart-scope (job: every rank restarts) on more nodes");
    }
  }
  check_rendezvous_backend(options.rdzv_backend);
  options.rdzv_conf = parse_rendezvous_conf(torchrun.rdzv_conf);
  if (torchrun.rdzv_endpoint && !torchrun.standalone) {
    const Endpoint endpoint = parse_endpoint("--rdzv-endpoint", *torchrun.rdzv_endpoint);
    if (options.master_addr && *options.master_addr != endpoint.host) {
      throw UsageError("--rdzv-endpoint " + *torchrun.rdzv_endpoint + " and --master-addr " +
                       *options.master_addr + " name different hosts; give one of them");
    }
    options.master_addr = endpoint.host;
    // torchrun's c10d store listens on 29400 unless told otherwise.
    const int port = endpoint.port.value_or(options.rdzv_backend == "c10d" ? 29400 : 0);
    if (port == 0) {
      options.free_master_port = !options.master_port;
    } else {
      if (options.master_port && *options.master_port != port) {
        throw UsageError("--rdzv-endpoint " + *torchrun.rdzv_endpoint + " and --master-port " +
                         std::to_string(*options.master_port) + " name different ports");
      }
      options.master_port = port;
    }
  }
  if (torchrun.standalone) {
    // torchrun's --standalone: a store on this machine, on a free port, whatever else says.
    if (options.nnodes.value_or(1) != 1) {
      throw UsageError("--standalone runs one node; --nnodes " + std::to_string(*options.nnodes) +
                       " asks for more");
    }
    if (!options.scheduler) options.scheduler = "local";
    if (!options.master_addr) options.master_addr = "127.0.0.1";
    if (!options.master_port) options.free_master_port = true;
  }
  // torchrun replaces the rendezvous id with a fresh one under --standalone (a lone node
  // has nothing to meet); ddprun's own --run-id is kept.
  if (torchrun.rdzv_id && !torchrun.standalone && !options.run_id)
    options.run_id = torchrun.rdzv_id;
  if (torchrun.redirects)
    options.redirects = parse_stream_choice("--redirects", *torchrun.redirects);
  if (torchrun.tee) options.tee = parse_stream_choice("--tee", *torchrun.tee);
  if (torchrun.local_ranks_filter) {
    options.local_ranks_filter = parse_local_ranks_filter(*torchrun.local_ranks_filter);
  }
  if (parser.fold_output && parser.no_fold_output) {
    throw UsageError("--fold-output and --no-fold-output exclude each other");
  }
  if (parser.fold_output || parser.no_fold_output) options.fold_output = parser.fold_output;
  if (torchrun.duplicate_stdout_filters) {
    options.duplicate_stdout_filters = split_filters(*torchrun.duplicate_stdout_filters);
  }
  if (torchrun.duplicate_stderr_filters) {
    options.duplicate_stderr_filters = split_filters(*torchrun.duplicate_stderr_filters);
  }
  if (torchrun.signals_to_handle) {
    options.signals_to_handle = parse_signal_list(*torchrun.signals_to_handle);
  }
  if (torchrun.deadline && torchrun.time_limit) {
    throw UsageError("--deadline and --time-limit both give the job's end; give one");
  }
  if (torchrun.deadline) options.deadline_unix = parse_deadline(*torchrun.deadline);
  if (torchrun.time_limit) {
    options.time_limit_s = parse_duration("--time-limit", *torchrun.time_limit);
  }
  if (torchrun.drain_before) {
    options.drain_before_s = parse_duration("--drain-before", *torchrun.drain_before);
  }
  if (torchrun.drain_signal) {
    const auto signals = parse_signal_list(*torchrun.drain_signal);
    if (signals.size() != 1) throw UsageError("--drain-signal: give one signal");
    options.drain_signal = signals.front();
  }
  if (torchrun.event_log_handler != "null") {
    throw UsageError("--event-log-handler " + torchrun.event_log_handler +
                     ": torchrun's Python event handlers are not supported; only 'null'");
  }
  if (torchrun.logs_specs) {
    throw UsageError("--logs-specs " + *torchrun.logs_specs +
                         ": torchrun's Python log plugins are not supported",
                     "use --log-dir with --redirects/--tee, and --tag-output");
  }
  if (torchrun.numa_binding) {
    const auto mode = parse_numa_binding(*torchrun.numa_binding);
    if (!mode) {
      throw UsageError("--numa-binding " + *torchrun.numa_binding + ": not a binding mode",
                       "give node, socket, exclusive, core-complex or none");
    }
    options.bind = *mode;
  }
  if (torchrun.cpu_bind) {
    const auto mode = parse_cpu_bind(*torchrun.cpu_bind);
    if (!mode) {
      throw UsageError("--cpu-bind " + *torchrun.cpu_bind + ": not a binding mode",
                       "give cores, numa or none");
    }
    if (*mode != BindMode::kNone && options.bind != BindMode::kNone) {
      throw UsageError("--numa-binding and --cpu-bind cannot go together",
                       "--numa-binding binds near each worker's GPU, --cpu-bind splits the "
                       "CPUs without GPUs: give one");
    }
    if (*mode != BindMode::kNone) options.bind = *mode;
  }
  if (options.gpus_per_proc) {
    // Without a number of workers, the GPUs set it: GPUs / K on every node ("auto" and
    // "gpu" both mean that with --gpus-per-proc).
    if (app.count("--nproc-per-node") == 0) options.nproc_per_node = "auto";
    if (options.nproc_per_node == "cpu") {
      throw UsageError("--gpus-per-proc " + std::to_string(*options.gpus_per_proc) +
                           " and --nproc-per-node cpu cannot go together",
                       "give --nproc-per-node gpu, a number, or leave it out");
    }
  }
  if (options.check_bandwidth && options.mode != Mode::kCheck) {
    throw UsageError("--bandwidth measures the links during --check",
                     "run ddprun --check --bandwidth ...");
  }
  if (options.report && options.mode != Mode::kRun) {
    throw UsageError("--report writes the report of a job that runs",
                     "leave --report out with --dry-run, --check, --doctor, --print-job-end "
                     "and the job handle's options");
  }
  if (options.module && options.no_python) {
    throw UsageError("--module and --no-python cannot go together (as in torchrun)");
  }
  if (options.agent != options.agent_nodes.has_value()) {
    throw UsageError(
        "--agent and --agent-nodes go together (they are set by a head ddprun, not by hand)");
  }
}

}  // namespace

CommandLine parse_command_line(int argc, const char* const* argv, const Environment& env) {
  // Split at the first bare "--": what follows is the program and its arguments, even if
  // they look like options. (CLI11 would drop the "--" and lose that distinction.)
  const auto separator = std::find(argv + std::min(argc, 1), argv + argc, std::string_view("--"));
  const bool separated = separator != argv + argc;
  const std::vector<std::string> given(argv + std::min(argc, 1), separator);
  std::vector<std::string> after_separator(separated ? separator + 1 : separator, argv + argc);

  auto parser = std::make_unique<Parser>();
  const auto parse = [&](std::vector<std::string> args) {
    std::reverse(args.begin(), args.end());  // CLI11 takes a vector in reverse order
    parser->app.parse(args);
  };
  CommandLine result;
  try {
    parse(given);
    // PET_* values for the options the command line left out, placed before the user's
    // arguments; parsed again from a fresh parser so defaults stay defaults. Never for an
    // agent: its command line is the head's, already with the PET_* the head read, and
    // srun passes the whole environment on.
    std::vector<std::string> with_pet;
    const bool agent = parser->app.count("--agent") > 0;
    for (const PetVariable& pet : kPetVariables) {
      const auto value = lookup(env, pet.variable);
      if (agent || !value || parser->app.count(pet.option) > 0) continue;
      if (!pet.flag) {
        with_pet.push_back(std::string(pet.option) + "=" + *value);
      } else if (*value != "0" && !value->empty()) {
        with_pet.emplace_back(pet.option);
      }
    }
    if (!with_pet.empty()) {
      with_pet.insert(with_pet.end(), given.begin(), given.end());
      parser = std::make_unique<Parser>();
      parse(with_pet);
    }
  } catch (const CLI::CallForHelp&) {
    result.message = parser->app.help();
    return result;
  } catch (const CLI::CallForVersion&) {
    result.message = std::string("ddprun ") + kVersion + "\n";
    return result;
  } catch (const CLI::ParseError& e) {
    return usage_error(std::string(e.what()) + " (see ddprun --help)");
  }
  auto rest = parser->app.remaining();
  if (separated) {
    // A program named before the "--" keeps it as one of its own arguments, except right
    // after the program's name, where torchrun (argparse) drops it: `torchrun -m pkg.train
    // -- --depth=20` gives the module `--depth=20`.
    if (rest.size() > 1) rest.emplace_back("--");
    rest.insert(rest.end(), after_separator.begin(), after_separator.end());
  }
  Options& options = parser->options;
  const bool control = parser->app.count("--status") + parser->app.count("--stacks") +
                           parser->app.count("--stop") + parser->app.count("--attach") >
                       0;
  if (control && !rest.empty()) {
    return usage_error(
        "--status, --stacks, --stop and --attach take a run id, not a program "
        "(see ddprun --help)");
  }
  if (rest.empty() && !parser->doctor && !parser->print_job_end && !control) {
    return usage_error(
        "no program to launch; usage: ddprun [OPTIONS] [--] PROGRAM [ARGS...] (see ddprun "
        "--help)");
  }
  const bool looks_like_option =
      !rest.empty() && rest.front().size() > 1 && rest.front().front() == '-';
  if (looks_like_option && !(separated && parser->app.remaining().empty())) {
    return usage_error("unknown option '" + rest.front() +
                       "'; put '--' before the program if it starts with '-' (see ddprun "
                       "--help)");
  }
  try {
    finish_options(*parser);
  } catch (const UsageError& e) {
    return usage_error(e.what() + (e.hint().empty() ? std::string() : " (" + e.hint() + ")"));
  }
  options.program = std::move(rest);
  result.options = std::move(options);
  return result;
}

std::vector<std::vector<std::string>> help_options() {
  return shown_options(Parser().app);
}

}  // namespace ddprun
