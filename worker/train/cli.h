#pragma once
// ddp-train's command line. No LibTorch.

#include <optional>
#include <string>
#include <vector>

#include "config.h"

namespace ddprun::worker {

// What the command line asked for: a config file and overrides of some of its keys.
struct CommandLine {
  std::string config_path;
  std::optional<int> epochs;
  std::optional<std::int64_t> max_steps;
  std::optional<std::int64_t> batch_size_per_rank;
  std::optional<std::string> checkpoint_dir;
  std::optional<std::int64_t> checkpoint_interval;
  std::optional<std::string> metrics_file;
  std::optional<std::int64_t> metrics_every;
  std::optional<std::string> final_params_file;
  std::optional<int> threads;
  std::optional<std::string> init_method;
  bool check_replicas = false;
  bool quiet = false;
  std::optional<std::int64_t> log_every;
};

// Parses the arguments after the program name. Returns nullopt after printing help to
// `help_out` (--help). Throws ddprun::UsageError for unknown options or bad values.
std::optional<CommandLine> parse_command_line(const std::vector<std::string>& args,
                                              std::string& help_out);

// Loads the config file and applies the overrides, then validates. Throws
// ddprun::ConfigError.
Config load_config(const CommandLine& command_line);

}  // namespace ddprun::worker
