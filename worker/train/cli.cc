#include "cli.h"

#include <CLI/CLI.hpp>

#include "ddprun/contract/errors.h"

namespace ddprun::worker {

std::optional<CommandLine> parse_command_line(const std::vector<std::string>& args,
                                              std::string& help_out) {
  CommandLine cl;
  CLI::App app{"ddp-train: data-parallel training with LibTorch (start it with ddprun)",
               "ddp-train"};
  app.add_option("--config", cl.config_path, "Training configuration (JSON, docs/config.md)")
      ->required();
  app.add_option("--epochs", cl.epochs, "Override /train/epochs")->check(CLI::PositiveNumber);
  app.add_option("--max-steps", cl.max_steps, "Override /train/max_steps (0: no limit)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--batch-size", cl.batch_size_per_rank, "Override /train/batch_size_per_rank")
      ->check(CLI::PositiveNumber);
  app.add_option("--checkpoint-dir", cl.checkpoint_dir, "Override /checkpoint/dir");
  app.add_option("--checkpoint-interval", cl.checkpoint_interval,
                 "Override /checkpoint/interval_steps")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--metrics-file", cl.metrics_file, "Override /metrics/file");
  app.add_option(
         "--metrics-every", cl.metrics_every,
         "Override /metrics/every_steps: also a metrics line every N steps (0: per epoch only)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--final-params", cl.final_params_file, "Override /diagnostics/final_params_file");
  app.add_option("--init-method", cl.init_method,
                 "Override /runtime/init_method: env://, tcp://HOST:PORT or file:///PATH");
  app.add_option("--threads", cl.threads, "Override /runtime/threads")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("-q,--quiet", cl.quiet, "No progress reports (per-epoch lines stay)");
  app.add_option("--log-every", cl.log_every,
                 "Override /progress/log_every: steps between progress lines when output is "
                 "not a terminal (0: none)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--check-replicas", cl.check_replicas,
               "Fail unless all ranks hold identical parameters after every step");

  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 parses from the back
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    help_out = app.help();
    return std::nullopt;
  } catch (const CLI::ParseError& e) {
    throw ddprun::UsageError(e.what(), "see ddp-train --help");
  }
  return cl;
}

Config load_config(const CommandLine& cl) {
  Config c = load_config(cl.config_path);
  if (cl.epochs) c.train.epochs = *cl.epochs;
  if (cl.max_steps) c.train.max_steps = *cl.max_steps;
  if (cl.batch_size_per_rank) c.train.batch_size_per_rank = *cl.batch_size_per_rank;
  if (cl.checkpoint_dir) c.checkpoint.dir = *cl.checkpoint_dir;
  if (cl.checkpoint_interval) c.checkpoint.interval_steps = *cl.checkpoint_interval;
  if (cl.metrics_file) c.metrics.file = *cl.metrics_file;
  if (cl.metrics_every) c.metrics.every_steps = *cl.metrics_every;
  if (cl.final_params_file) c.diagnostics.final_params_file = *cl.final_params_file;
  if (cl.threads) c.runtime.threads = *cl.threads;
  if (cl.init_method) c.runtime.init_method = *cl.init_method;
  if (cl.check_replicas) c.diagnostics.check_replicas = true;
  if (cl.quiet) c.progress.quiet = true;
  if (cl.log_every) c.progress.log_every = *cl.log_every;
  validate_config(c, cl.config_path + " (with command-line overrides)");
  return c;
}

}  // namespace ddprun::worker
