#include "process_runner.h"

#include <unistd.h>

#include <cerrno>

#include "agents.h"
#include "ddprun/contract/errors.h"

namespace ddprun {

ProcessRunner::ProcessRunner(SignalChannel& signals, Guardian& guardian, ProcessRunnerConfig config)
    : signals_(signals), guardian_(guardian), config_(config) {
  start_fresh();
  events_.output = [this](std::size_t child, bool is_stderr, std::string_view data) {
    relay_->feed(child, is_stderr, data);
  };
  events_.exited = [this](std::size_t child, const ChildExit& exit) {
    RunnerEvent event;
    event.kind = RunnerEvent::Kind::kExited;
    event.child = child;
    event.wait_status = exit.wait_status;
    event.max_rss_kb = exit.max_rss_kb;
    event.run_seconds = exit.run_seconds;
    pending_.push_back(event);
  };
  events_.signal = [this](int sig) {
    RunnerEvent event;
    event.kind = RunnerEvent::Kind::kSignal;
    event.signal_number = sig;
    pending_.push_back(event);
  };
  events_.extra_ready = [this] { read_head(); };
}

void ProcessRunner::end_round() {
  start_fresh();
}

void ProcessRunner::start_fresh() {
  children_ = std::make_unique<ChildSet>(signals_, &guardian_);
  relay_ = std::make_unique<OutputRelay>(config_.relay);
  is_agent_.clear();
}

pid_t ProcessRunner::start(const ChildSpec& spec) {
  RelayTarget target;
  if (spec.agent) {
    // Agents tag and filter their own workers' lines.
  } else {
    if (config_.tag_output)
      target.prefix = "[" + spec.host + ":" + std::to_string(spec.rank) + "] ";
    target.stdout_to_console = spec.stdout_to_console;
    target.stderr_to_console = spec.stderr_to_console;
    if (!spec.stdout_log.empty()) target.stdout_log = open_log_file(spec.stdout_log);
    if (!spec.stderr_log.empty()) target.stderr_log = open_log_file(spec.stderr_log);
  }
  // A stale file from an earlier run is no report.
  if (!spec.error_file.empty()) ::unlink(spec.error_file.c_str());
  if (!spec.progress_file.empty()) ::unlink(spec.progress_file.c_str());
  SpawnSpec process{spec.path, spec.argv, spec.env};
  const std::size_t child =
      children_->start(std::move(process), spec.hello, /*keep_stdin=*/!spec.hello.empty());
  relay_->add(std::move(target));
  is_agent_.push_back(spec.agent);
  return children_->pid(child);
}

void ProcessRunner::signal(std::size_t child, int sig) {
  const pid_t pid = children_->pid(child);
  if (!is_agent_.at(child) || sig == SIGKILL) {
    signal_group(pid, sig);
  } else if (const int messages = children_->stdin_fd(child); messages >= 0) {
    // ssh delivers no signals: the agent gets them as messages; a dead link, SIGKILL.
    if (!write_all(messages, agent_signal_message(sig))) signal_group(pid, SIGKILL);
  } else {
    signal_process(pid, sig);  // srun and mpirun forward it to their tasks
  }
}

RunnerEvent ProcessRunner::wait(std::optional<RunnerClock::time_point> deadline) {
  while (pending_.empty()) {
    if (deadline && RunnerClock::now() >= *deadline) return RunnerEvent{};
    children_->wait_once(deadline, config_.head_fd, events_);
  }
  const RunnerEvent event = pending_.front();
  pending_.pop_front();
  return event;
}

void ProcessRunner::read_head() {
  char buffer[4096];
  const ssize_t got = ::read(config_.head_fd, buffer, sizeof buffer);
  if (got < 0 && (errno == EINTR || errno == EAGAIN)) return;
  if (got <= 0) {
    config_.head_fd = -1;
    RunnerEvent event;
    event.kind = RunnerEvent::Kind::kHeadLost;
    pending_.push_back(event);
    return;
  }
  for (const auto& line : head_lines_.feed({buffer, static_cast<std::size_t>(got)})) {
    try {
      if (const int sig = parse_agent_message(line).signal_number) {
        RunnerEvent event;
        event.kind = RunnerEvent::Kind::kSignal;
        event.signal_number = sig;
        pending_.push_back(event);
      }
    } catch (const Error&) {
      // Not from a head ddprun: ignored; the connection's end still counts.
    }
  }
}

}  // namespace ddprun
