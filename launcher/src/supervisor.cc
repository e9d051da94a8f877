#include "supervisor.h"

#include <poll.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <nlohmann/json.hpp>
#include <system_error>

#include "env_contract.h"
#include "line_buffer.h"
#include "signal_names.h"

namespace ddprun {
namespace {

using Clock = std::chrono::steady_clock;

// After the last worker exits, output still in flight is drained for at most this long
// (a grandchild that escaped its process group may hold a pipe open forever).
constexpr std::chrono::milliseconds kDrainAfterExit{2000};
constexpr std::size_t kReadChunk = 64 * 1024;

struct Stream {
  UniqueFd pipe;
  UniqueFd log;
  LineSplitter splitter;
  bool to_console = true;
  bool is_stderr = false;
  std::size_t owner = 0;  // index of its worker
};

struct Worker {
  RankResult result;
  Stream out;
  Stream err;
  TailLines tail{20};
  Clock::time_point started_at;
};

bool is_stop_signal(int sig) {
  return sig == SIGINT || sig == SIGTERM || sig == SIGHUP || sig == SIGQUIT;
}

class Round {
 public:
  Round(SignalChannel& signals, Guardian& guardian, const SupervisorConfig& config)
      : signals_(signals), guardian_(guardian), config_(config) {}

  RoundResult run(const LaunchPlan& plan, const std::string& program_path, const Environment& env) {
    make_directories(plan.attempt_dir);
    const NodePlan& node = plan.nodes.at(static_cast<std::size_t>(plan.this_node));
    workers_.reserve(static_cast<std::size_t>(node.nproc));
    try {
      for (int local = 0; local < node.nproc; ++local) {
        spawn(plan, plan.ranks.at(static_cast<std::size_t>(node.first_rank + local)), program_path,
              env);
      }
    } catch (...) {
      begin_stop(SIGKILL);
      wait_for_all();
      throw;
    }
    wait_for_all();
    return finish();
  }

 private:
  void spawn(const LaunchPlan& plan, const RankPlan& rank, const std::string& program_path,
             const Environment& env) {
    Worker& worker = workers_.emplace_back();
    worker.tail = TailLines(config_.tail_lines);
    worker.result.rank = rank.rank;
    worker.result.local_rank = rank.local_rank;
    worker.result.host = rank.host;
    worker.result.error_file = rank.error_file;
    ::unlink(rank.error_file.c_str());  // a stale file from an earlier run is no report
    Pipe out = make_pipe();
    Pipe err = make_pipe();
    if (!rank.stdout_log.empty()) worker.out.log = open_log_file(rank.stdout_log);
    if (!rank.stderr_log.empty()) worker.err.log = open_log_file(rank.stderr_log);
    worker.out.to_console = config_.stdout_to_console;
    worker.err.to_console = config_.stderr_to_console;
    worker.err.is_stderr = true;
    worker.out.owner = worker.err.owner = workers_.size() - 1;
    prefix_.push_back(config_.tag_output ? "[" + rank.host + ":" + std::to_string(rank.rank) + "] "
                                         : std::string());

    SpawnSpec spec;
    spec.path = program_path;
    spec.argv = plan.program;
    spec.env = merge_environment(env, rank.env);
    spec.stdout_fd = out.write_end.get();
    spec.stderr_fd = err.write_end.get();
    worker.started_at = Clock::now();
    worker.result.pid = spawn_process(spec, signals_.original_mask());
    worker.result.started = true;
    guardian_.watch(worker.result.pid);
    worker.out.pipe = std::move(out.read_end);
    worker.err.pipe = std::move(err.read_end);
    // Our copies of the write ends close here, so EOF means the worker's side is done.
  }

  std::size_t live_workers() const {
    std::size_t live = 0;
    for (const auto& worker : workers_) live += worker.result.started && !worker.result.exited;
    return live;
  }

  void signal_live(int sig) {
    for (const auto& worker : workers_) {
      if (worker.result.started && !worker.result.exited) signal_group(worker.result.pid, sig);
    }
  }

  // Sends `sig` to every live worker; unless it is SIGKILL, SIGKILL follows after the grace.
  void begin_stop(int sig) {
    signal_live(sig);
    if (sig == SIGKILL) {
      kill_deadline_.reset();
      killed_ = true;
    } else if (!kill_deadline_ && !killed_) {
      kill_deadline_ = Clock::now() + config_.shutdown_grace;
    }
  }

  void wait_for_all() {
    std::vector<pollfd> fds;
    std::vector<Stream*> streams;
    for (;;) {
      if (live_workers() == 0 && !drain_deadline_) drain_deadline_ = Clock::now() + kDrainAfterExit;
      fds.clear();
      streams.clear();
      fds.push_back({signals_.fd(), POLLIN, 0});
      for (auto& worker : workers_) {
        for (Stream* stream : {&worker.out, &worker.err}) {
          if (!stream->pipe.valid()) continue;
          fds.push_back({stream->pipe.get(), POLLIN, 0});
          streams.push_back(stream);
        }
      }
      if (live_workers() == 0 && streams.empty()) return;

      const auto now = Clock::now();
      if (kill_deadline_ && now >= *kill_deadline_) {
        begin_stop(SIGKILL);
        continue;
      }
      if (drain_deadline_ && now >= *drain_deadline_) {
        for (Stream* stream : streams) close_stream(*stream);
        continue;
      }
      int timeout_ms = -1;
      for (const auto& deadline : {kill_deadline_, drain_deadline_}) {
        if (!deadline) continue;
        const auto left = std::chrono::ceil<std::chrono::milliseconds>(*deadline - now).count();
        const int left_ms = static_cast<int>(std::max<long long>(0, left));
        timeout_ms = timeout_ms < 0 ? left_ms : std::min(timeout_ms, left_ms);
      }
      const int ready = ::poll(fds.data(), fds.size(), timeout_ms);
      if (ready < 0) {
        if (errno == EINTR) continue;
        throw std::system_error(errno, std::generic_category(), "poll");
      }
      if (fds[0].revents != 0) handle_signals();
      for (std::size_t i = 1; i < fds.size(); ++i) {
        if (fds[i].revents != 0) pump(*streams[i - 1]);
      }
    }
  }

  void handle_signals() {
    while (const int sig = signals_.read_signal()) {
      if (sig == SIGCHLD) {
        reap();
      } else if (is_stop_signal(sig)) {
        if (stop_signal_ != 0 && sig == SIGINT) {
          begin_stop(SIGKILL);  // a second Ctrl-C: no more grace
        } else {
          if (stop_signal_ == 0) stop_signal_ = sig;
          begin_stop(sig);
        }
      } else {
        signal_live(sig);  // SIGUSR1/SIGUSR2: preemption notices, the workers decide
      }
    }
  }

  void reap() {
    for (std::size_t i = 0; i < workers_.size(); ++i) {
      Worker& worker = workers_[i];
      if (!worker.result.started || worker.result.exited) continue;
      int status = 0;
      rusage usage{};
      pid_t pid = 0;
      do {
        pid = ::wait4(worker.result.pid, &status, WNOHANG, &usage);
      } while (pid < 0 && errno == EINTR);
      if (pid != worker.result.pid) continue;
      worker.result.exited = true;
      worker.result.wait_status = status;
      worker.result.max_rss_kb = usage.ru_maxrss;
      worker.result.run_seconds =
          std::chrono::duration<double>(Clock::now() - worker.started_at).count();
      // Whatever the worker left behind in its group goes with it.
      signal_group(worker.result.pid, SIGKILL);
      guardian_.forget(worker.result.pid);
      const bool failed = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
      if (failed && !first_failure_ && stop_signal_ == 0) {
        first_failure_ = i;
        begin_stop(SIGTERM);
      }
    }
  }

  void pump(Stream& stream) {
    char buffer[kReadChunk];
    const ssize_t got = ::read(stream.pipe.get(), buffer, sizeof buffer);
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) return;
    if (got <= 0) {
      close_stream(stream);
      return;
    }
    const std::string_view data(buffer, static_cast<std::size_t>(got));
    if (stream.log.valid()) write_all(stream.log.get(), data);
    emit(stream, stream.splitter.feed(data));
    if (config_.console_is_tty && stream.to_console) {
      if (auto redraw = stream.splitter.take_redraw()) {
        // An empty redraw (only "erase line") clears the line for what comes next.
        const bool clear_only = redraw->empty() || *redraw == "\033[K";
        out_buffer_ = "\r" + (clear_only ? std::string() : prefix_[stream.owner]) + *redraw;
        write_all(stream.is_stderr ? config_.console_stderr : config_.console_stdout, out_buffer_);
      }
    }
  }

  void close_stream(Stream& stream) {
    emit(stream, stream.splitter.finish());
    stream.pipe.reset();
  }

  void emit(const Stream& stream, const std::vector<std::string>& lines) {
    if (lines.empty()) return;
    const std::size_t index = stream.owner;
    Worker& worker = workers_[index];
    if (stream.is_stderr) {
      for (const auto& line : lines) worker.tail.add(line);
    }
    if (!stream.to_console) return;
    // One write per batch of whole lines: lines of different ranks never mix.
    out_buffer_.clear();
    for (const auto& line : lines) {
      const auto cr = config_.console_is_tty ? line.rfind('\r') : std::string::npos;
      if (cr == std::string::npos) {
        out_buffer_ += prefix_[index];
        out_buffer_ += line;
      } else {
        // The end of a line redrawn in place: back to its start, prefix, last version.
        out_buffer_ += '\r';
        out_buffer_ += prefix_[index];
        out_buffer_.append(line, cr + 1);
      }
      out_buffer_ += '\n';
    }
    write_all(stream.is_stderr ? config_.console_stderr : config_.console_stdout, out_buffer_);
  }

  RoundResult finish() {
    RoundResult result;
    for (auto& worker : workers_) {
      worker.result.stderr_tail = worker.tail.lines();
      result.ranks.push_back(std::move(worker.result));
    }
    if (first_failure_) {
      result.outcome = Outcome::kWorkerFailed;
      result.first_failure = first_failure_;
    } else if (stop_signal_ != 0) {
      result.outcome = Outcome::kStopped;
      result.stop_signal = stop_signal_;
    }
    return result;
  }

  SignalChannel& signals_;
  Guardian& guardian_;
  const SupervisorConfig& config_;
  std::vector<Worker> workers_;
  std::vector<std::string> prefix_;
  std::string out_buffer_;
  bool killed_ = false;
  int stop_signal_ = 0;
  std::optional<std::size_t> first_failure_;
  std::optional<Clock::time_point> kill_deadline_;
  std::optional<Clock::time_point> drain_deadline_;
};

}  // namespace

RoundResult Supervisor::run(const LaunchPlan& plan, const std::string& program_path,
                            const Environment& env) {
  Round round(signals_, guardian_, config_);
  return round.run(plan, program_path, env);
}

int exit_code_for(const RoundResult& result) {
  switch (result.outcome) {
    case Outcome::kSucceeded:
      return 0;
    case Outcome::kStopped:
      return 128 + result.stop_signal;
    case Outcome::kWorkerFailed: {
      const int status = result.ranks.at(*result.first_failure).wait_status;
      if (WIFEXITED(status)) return WEXITSTATUS(status);
      if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
      return 1;
    }
  }
  return 1;
}

std::string describe_wait_status(int wait_status) {
  if (WIFEXITED(wait_status)) return "exit code " + std::to_string(WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) {
    return "signal " + signal_name(WTERMSIG(wait_status)) +
           (WCOREDUMP(wait_status) ? " (core dumped)" : "");
  }
  return "unknown status " + std::to_string(wait_status);
}

std::string error_label(bool colour) {
  return colour ? "ddprun: \033[1;31merror:\033[0m " : "ddprun: error: ";
}

bool colour_wanted(int fd, const Environment& env) {
  const auto no_colour = lookup(env, "NO_COLOR");
  if (no_colour && !no_colour->empty()) return false;
  if (lookup(env, "TERM").value_or("") == "dumb") return false;
  return ::isatty(fd) == 1;
}

std::string format_failure_report(const RankResult& failed, const std::string& error_file_text,
                                  bool colour) {
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%.2f", failed.run_seconds);
  std::string report = error_label(colour) + "rank " + std::to_string(failed.rank) +
                       " (local rank " + std::to_string(failed.local_rank) + " on " + failed.host +
                       ", pid " + std::to_string(failed.pid) +
                       ") failed first: " + describe_wait_status(failed.wait_status) + " after " +
                       seconds + " s\n";
  if (!error_file_text.empty()) {
    // torchelastic's error file: {"message": {"message": "...", "extraInfo": {...}}}, or
    // {"message": "..."}.
    const auto doc = nlohmann::json::parse(error_file_text, nullptr, false);
    std::string message;
    if (!doc.is_discarded() && doc.is_object() && doc.contains("message")) {
      const auto& inner = doc["message"];
      if (inner.is_string()) message = inner.get<std::string>();
      if (inner.is_object() && inner.contains("message") && inner["message"].is_string()) {
        message = inner["message"].get<std::string>();
      }
    }
    if (!message.empty()) report += "ddprun: its error file says: " + message + "\n";
  }
  if (!failed.stderr_tail.empty()) {
    report += "ddprun: last " + std::to_string(failed.stderr_tail.size()) + " lines of rank " +
              std::to_string(failed.rank) + "'s stderr:\n";
    for (const auto& line : failed.stderr_tail) report += "  | " + line + "\n";
  }
  return report;
}

}  // namespace ddprun
