#pragma once
// The command line's parser, inside cli/ only: CLI11 fills `Parser::options` and the strings
// of torchrun's compound values; finish_options then parses those and checks what CLI11
// cannot. Parser() (cli.cc) registers one --help section per option group
// (option_groups.cc); finish_options is in finish_options.cc.

#include <CLI/CLI.hpp>

#include <optional>
#include <string>
#include <vector>

#include "cli/options.h"

namespace ddprun {

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
  CLI::App app;
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

// What CLI11 cannot check alone: torchrun's compound values, and options that only make
// sense together, into parser.options. Throws UsageError.
void finish_options(Parser& parser);

}  // namespace ddprun
