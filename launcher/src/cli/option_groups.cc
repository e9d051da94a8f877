// Parser's option groups (parser.h): one --help section each, in the order --help shows
// them, and the checks CLI11 runs on their values.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cctype>
#include <cstdio>

#include "cli/parser.h"
#include "ddprun/common/parse_int.h"
#include "plan/torchrun_values.h"
#include "schedulers.h"

namespace ddprun {
namespace {

std::string validate_nproc(const std::string& value) {
  if (value == "auto" || value == "cpu" || value == "gpu") return {};
  if (value == "xpu") return "xpu: ddprun counts CUDA GPUs only; give a number of workers";
  const auto parsed = parse_int(value);
  if (!parsed || *parsed < 1 || *parsed > 65536) {
    return "expected a positive integer or one of auto, cpu, gpu; got '" + value + "'";
  }
  return {};
}

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

}  // namespace

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
            "in its place while the others go on (rank); each counts "
            "against --max-restarts")
      ->check(one_of({"job", "rank"}, "job|rank"))
      ->capture_default_str();
  group.add_flag("--warm-spare", options.warm_spare,
                 "With --restart-scope rank: keep one spare worker started, which a lost "
                 "rank's replacement becomes at once (programs that read DDPRUN_SPARE, as "
                 "ddp-train does; docs/environment.md)");
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
                 "With --check: every node streams rounds of 32 MiB to the next in a ring, all "
                 "at once (as a ring all-reduce loads the links), on the port after the master "
                 "port; each link's fastest round is shown and a slow link named");
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
  app.add_flag("--agent-replaces", options.agent_replaces, "Ranks of a lost node, on a spare")
      ->group("");
  app.add_flag("--head-beats", options.agent_head_beats, "The head beats on stdin")->group("");
}

}  // namespace ddprun
