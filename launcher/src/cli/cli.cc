#include <CLI/CLI.hpp>

#include <algorithm>
#include <memory>
#include <string_view>

#include "cli/help_formatter.h"
#include "cli/options.h"
#include "cli/parser.h"
#include "ddprun/contract/errors.h"
#include "ddprun/contract/version.h"

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

CommandLine usage_error(const std::string& message) {
  CommandLine result;
  result.message = "ddprun: error: " + message + "\n";
  result.exit_code = kExitLauncherError;
  return result;
}

}  // namespace

Parser::Parser() : app(kDescription, "ddprun") {
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
