#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>

#include "ddprun/contract/errors.h"
#include "ddprun/contract/version.h"
#include "options.h"
#include "schedulers.h"

namespace ddprun {
namespace {

constexpr const char* kExamples = R"(
Examples:
  ddprun --nproc-per-node 2 -- build/bin/ddp-train --config configs/fashion_mlp.json
  ddprun --nproc-per-node 4 --tag-output python3 train.py --epochs 3   # a torchrun script
  ddprun --nproc-per-node gpu --log-dir logs --tee 3 ./my_worker
  ddprun --nproc-per-node 8 --dry-run --format json ./my_worker

Each worker gets torchrun's environment (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT, ...); see docs/environment.md. Exit codes: docs/exit-codes.md.
)";

std::string validate_nproc(const std::string& value) {
  if (value == "auto" || value == "cpu" || value == "gpu") return {};
  std::size_t used = 0;
  long parsed = 0;
  try {
    parsed = std::stol(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != value.size() || parsed < 1 || parsed > 65536) {
    return "expected a positive integer or one of auto, cpu, gpu; got '" + value + "'";
  }
  return {};
}

}  // namespace

CommandLine parse_command_line(int argc, const char* const* argv) {
  CLI::App app{
      "ddprun: launch and supervise a distributed (DDP) training job.\n"
      "Usage: ddprun [OPTIONS] [--] PROGRAM [ARGS...]",
      "ddprun"};
  app.footer(kExamples);
  app.prefix_command();  // everything from PROGRAM on belongs to the worker
  app.set_version_flag("--version", std::string("ddprun ") + kVersion);

  Options options;
  app.add_option("--nproc-per-node,--nproc_per_node", options.nproc_per_node,
                 "Workers on this node: a number, 'gpu' (one per visible GPU), 'cpu' (one "
                 "per CPU) or 'auto' (GPUs if any, else 1)")
      ->check(CLI::Validator(validate_nproc, "N|auto|cpu|gpu", "nproc"))
      ->capture_default_str();
  app.add_option("--scheduler", options.scheduler,
                 "Read the job from this scheduler instead of detecting it: slurm, lsf, pbs, "
                 "sge, mpi, kubeflow, hostfile, local")
      ->check(CLI::Validator(
          [](const std::string& value) -> std::string {
            for (const auto name : scheduler_names()) {
              if (name == value) return {};
            }
            return "expected one of slurm, lsf, pbs, sge, mpi, kubeflow, hostfile, local; got '" +
                   value + "'";
          },
          "NAME", "scheduler"));
  app.add_option("--hostfile", options.hostfile,
                 "Nodes of the job, one per line (plain, 'host slots=N', 'host:N' or a Slurm "
                 "hostlist); see docs/schedulers.md");
  app.add_option("--nnodes", options.nnodes,
                 "Number of nodes; checked against what the scheduler or hostfile says")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--node-rank,--node_rank", options.node_rank,
                 "This node's index, when neither the scheduler nor the host name tells")
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--master-addr,--master_addr", options.master_addr,
                 "Address of rank 0's rendezvous store (default: MASTER_ADDR, else the first node, "
                 "else 127.0.0.1)");
  app.add_option(
         "--master-port,--master_port", options.master_port,
         "Port of the rendezvous store (default: MASTER_PORT, else derived from the job id, "
         "else a free port)")
      ->check(CLI::Range(1, 65535));
  app.add_option("--run-id,--run_id,--rdzv-id,--rdzv_id", options.run_id,
                 "Job identifier passed to workers as TORCHELASTIC_RUN_ID (default: random)")
      ->check([](const std::string& value) -> std::string {
        if (value.empty() || value.size() > 128) return "must be 1 to 128 characters";
        for (char c : value) {
          if (std::isalnum(static_cast<unsigned char>(c)) == 0 && c != '-' && c != '_' &&
              c != '.') {
            return "may contain only letters, digits, '-', '_' and '.'";
          }
        }
        return {};
      });
  app.add_option("--max-restarts,--max_restarts", options.max_restarts,
                 "Restart the whole job up to this many times after a worker fails")
      ->check(CLI::Range(0, 1000000))
      ->capture_default_str();
  app.add_option("--shutdown-timeout,--shutdown_timeout", options.shutdown_timeout_s,
                 "Seconds between SIGTERM and SIGKILL when stopping workers")
      ->check(CLI::Validator(
          [](const std::string& value) -> std::string {
            double seconds = 0;
            try {
              seconds = std::stod(value);
            } catch (const std::exception&) {
              return "expected a number of seconds; got '" + value + "'";
            }
            if (!std::isfinite(seconds) || seconds < 0 || seconds > 86400) {
              return "expected 0 to 86400 seconds; got '" + value + "'";
            }
            return {};
          },
          "SECONDS", "seconds"))
      ->capture_default_str();
  app.add_option("--log-dir,--log_dir", options.log_dir,
                 "Write each rank's stdout and stderr to files under this folder");
  app.add_option("--tee", options.tee,
                 "With --log-dir, also show on the console: 0 nothing, 1 stdout, 2 stderr, "
                 "3 both")
      ->check(CLI::Range(0, 3));
  app.add_flag("--tag-output,--tag_output", options.tag_output,
               "Prefix every output line with [host:rank]");
  app.add_flag("-q,--quiet", options.quiet,
               "Print no start summary and no per-rank table at the end (errors still)");
  bool standalone = false;
  app.add_flag("--standalone", standalone,
               "Accepted for torchrun compatibility (one node is the default)");
  app.add_flag("--dry-run,--dry_run", options.dry_run, "Print the launch plan; start nothing");
  app.add_flag("--check", options.check,
               "Ask every node whether it can take part (reachable, same master address, "
               "master port reachable, program found); print a table, start nothing");
  app.add_flag("--doctor", options.doctor,
               "Print what ddprun sees on this node (scheduler, nodes, GPUs, network, the "
               "worker's LibTorch and BLAS, limits) and exit; PROGRAM is optional");
  app.add_option("--format", options.format, "Format of --dry-run output: text or json")
      ->transform(CLI::CheckedTransformer(std::map<std::string, PlanFormat>{
          {"text", PlanFormat::kText}, {"json", PlanFormat::kJson}}));
  app.add_option("--launcher", options.launcher,
                 "How the first node reaches the others: auto (srun in Slurm, mpirun in "
                 "SGE/PBS/LSF, else ssh), ssh, mpirun, srun, or local (this node only)")
      ->check(CLI::IsMember({"auto", "ssh", "mpirun", "srun", "local"}))
      ->capture_default_str();
  app.add_option("--env", options.env_vars,
                 "Pass NAME (its value here) or NAME=VALUE to the workers on other nodes; "
                 "repeatable (PATH, LD_LIBRARY_PATH, CUDA_*, NCCL_*, OMP_*, ... always go)")
      ->allow_extra_args(false)
      ->check(CLI::Validator(
          [](const std::string& value) -> std::string {
            const std::string name = value.substr(0, value.find('='));
            const bool valid =
                !name.empty() && std::isdigit(static_cast<unsigned char>(name.front())) == 0 &&
                std::all_of(name.begin(), name.end(), [](char c) {
                  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_';
                });
            return valid ? std::string() : "'" + name + "' is not a variable name";
          },
          "NAME[=VALUE]", "env"));
  app.add_option("--ssh-config", options.ssh_config, "ssh configuration file (ssh -F FILE)");
  app.add_flag("--agent", options.agent, "Started by a head ddprun")->group("");
  app.add_flag("--agent-stdin", options.agent_stdin, "The head talks on stdin")->group("");
  app.add_option("--agent-nodes", options.agent_nodes, "Nodes of the head's plan")->group("");
  app.add_option("--restart-count", options.restart_count, "The head's restart round")
      ->check(CLI::Range(0, 1000000))
      ->group("");

  // Split at the first bare "--": what follows is the program and its arguments, even if
  // they look like options. (CLI11 would drop the "--" and lose that distinction.)
  const auto separator = std::find(argv + std::min(argc, 1), argv + argc, std::string_view("--"));
  const bool separated = separator != argv + argc;
  std::vector<std::string> ours(argv + std::min(argc, 1), separator);
  std::reverse(ours.begin(), ours.end());  // CLI11 takes a vector in reverse order
  std::vector<std::string> after_separator(separated ? separator + 1 : separator, argv + argc);

  CommandLine result;
  try {
    app.parse(ours);
  } catch (const CLI::CallForHelp&) {
    result.message = app.help();
    return result;
  } catch (const CLI::CallForVersion&) {
    result.message = std::string("ddprun ") + kVersion + "\n";
    return result;
  } catch (const CLI::ParseError& e) {
    result.message = std::string("ddprun: error: ") + e.what() + " (see ddprun --help)\n";
    result.exit_code = kExitLauncherError;
    return result;
  }
  auto rest = app.remaining();
  if (separated) {
    // A program named before the "--" keeps the "--" as one of its own arguments.
    if (!rest.empty()) rest.emplace_back("--");
    rest.insert(rest.end(), after_separator.begin(), after_separator.end());
  }
  if (rest.empty() && !options.doctor) {
    result.message =
        "ddprun: error: no program to launch; usage: ddprun [OPTIONS] [--] PROGRAM [ARGS...] "
        "(see ddprun --help)\n";
    result.exit_code = kExitLauncherError;
    return result;
  }
  const bool looks_like_option =
      !rest.empty() && rest.front().size() > 1 && rest.front().front() == '-';
  if (looks_like_option && !(separated && app.remaining().empty())) {
    result.message = "ddprun: error: unknown option '" + rest.front() +
                     "'; put '--' before the program if it starts with '-' (see ddprun "
                     "--help)\n";
    result.exit_code = kExitLauncherError;
    return result;
  }
  if (app.count("--tee") > 0 && !options.log_dir) {
    result.message =
        "ddprun: error: --tee needs --log-dir (without it, all output goes to "
        "the console)\n";
    result.exit_code = kExitLauncherError;
    return result;
  }
  if (options.agent != options.agent_nodes.has_value()) {
    result.message =
        "ddprun: error: --agent and --agent-nodes go together (they are set by a "
        "head ddprun, not by hand)\n";
    result.exit_code = kExitLauncherError;
    return result;
  }
  options.program = std::move(rest);
  result.options = std::move(options);
  return result;
}

}  // namespace ddprun
