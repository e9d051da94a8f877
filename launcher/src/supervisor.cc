#include "supervisor.h"

#include <poll.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <nlohmann/json.hpp>
#include <system_error>

#include "ddprun/errors.h"
#include "env_contract.h"
#include "line_buffer.h"
#include "remote.h"
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
  UniqueFd messages;  // an ssh agent's stdin: signals go there as messages
};

bool is_stop_signal(int sig) {
  return sig == SIGINT || sig == SIGTERM || sig == SIGHUP || sig == SIGQUIT;
}

class Round {
 public:
  Round(SignalChannel& signals, Guardian& guardian, const SupervisorConfig& config)
      : signals_(signals), guardian_(guardian), config_(config) {}

  RoundResult run(const LaunchPlan& plan, const std::string& program_path, const Environment& env,
                  const RoundSpec& spec) {
    if (spec.local_workers) make_directories(plan.attempt_dir);
    const NodePlan& node = plan.nodes.at(static_cast<std::size_t>(plan.this_node));
    workers_.reserve(static_cast<std::size_t>(node.nproc) + spec.agents.size());
    head_fd_ = spec.head_fd;
    try {
      for (int local = 0; spec.local_workers && local < node.nproc; ++local) {
        spawn(plan, plan.ranks.at(static_cast<std::size_t>(node.first_rank + local)), program_path,
              env);
      }
      for (const AgentLaunch& agent : spec.agents) spawn_agent(agent);
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
    if (!rank.stdout_log.empty()) worker.out.log = open_log_file(rank.stdout_log);
    if (!rank.stderr_log.empty()) worker.err.log = open_log_file(rank.stderr_log);
    worker.out.to_console = config_.stdout_to_console;
    worker.err.to_console = config_.stderr_to_console;
    prefix_.push_back(config_.tag_output ? "[" + rank.host + ":" + std::to_string(rank.rank) + "] "
                                         : std::string());
    SpawnSpec spec;
    spec.path = program_path;
    spec.argv = plan.program;
    spec.env = merge_environment(env, rank_environment(plan, rank));
    start_child(worker, spec, {});
  }

  void spawn_agent(const AgentLaunch& agent) {
    Worker& worker = workers_.emplace_back();
    worker.tail = TailLines(config_.tail_lines);
    worker.result.agent = true;
    worker.result.node_rank = agent.node_rank;
    worker.result.rank = -1;
    worker.result.host = agent.host;
    worker.out.to_console = worker.err.to_console = true;  // agents tag and filter their own
    prefix_.emplace_back();
    SpawnSpec spec;
    spec.path = agent.path;
    spec.argv = agent.argv;
    spec.env = agent.env;
    start_child(worker, spec, agent.hello);
  }

  // Starts `worker` (the last one added) with its output on fresh pipes and, when `hello`
  // is not empty, a pipe on its stdin that begins with `hello` and carries signals after.
  void start_child(Worker& worker, SpawnSpec& spec, const std::string& hello) {
    Pipe out = make_pipe();
    Pipe err = make_pipe();
    Pipe in = hello.empty() ? Pipe{} : make_pipe(/*nonblocking_read=*/false);
    worker.err.is_stderr = true;
    worker.out.owner = worker.err.owner = workers_.size() - 1;
    spec.stdout_fd = out.write_end.get();
    spec.stderr_fd = err.write_end.get();
    spec.stdin_fd = in.read_end.valid() ? in.read_end.get() : -1;
    worker.started_at = Clock::now();
    worker.result.pid = spawn_process(spec, signals_.original_mask());
    worker.result.started = true;
    guardian_.watch(worker.result.pid);
    worker.out.pipe = std::move(out.read_end);
    worker.err.pipe = std::move(err.read_end);
    // Our copies of the write ends close here, so EOF means the child's side is done.
    if (!hello.empty()) {
      worker.messages = std::move(in.write_end);
      write_all(worker.messages.get(), hello);
    }
  }

  // Signals a live child: a worker's whole group; an ssh agent by message (SIGKILL drops
  // the connection instead, which its agent takes as "stop now"); srun or mpirun itself,
  // which forward signals to their tasks.
  void signal_child(const Worker& worker, int sig) {
    if (!worker.result.agent || sig == SIGKILL) {
      signal_group(worker.result.pid, sig);
    } else if (worker.messages.valid()) {
      if (!write_all(worker.messages.get(), agent_signal_message(sig))) {
        signal_group(worker.result.pid, SIGKILL);
      }
    } else {
      ::kill(worker.result.pid, sig);
    }
  }

  std::size_t live_workers() const {
    std::size_t live = 0;
    for (const auto& worker : workers_) live += worker.result.started && !worker.result.exited;
    return live;
  }

  void signal_live(int sig) {
    for (const auto& worker : workers_) {
      if (worker.result.started && !worker.result.exited) signal_child(worker, sig);
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
      fds.push_back({head_fd_, POLLIN, 0});  // a negative fd is ignored by poll
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
      if (fds[1].revents != 0) read_head();
      for (std::size_t i = 2; i < fds.size(); ++i) {
        if (fds[i].revents != 0) pump(*streams[i - 2]);
      }
    }
  }

  void handle_signals() {
    while (const int sig = signals_.read_signal()) {
      if (sig == SIGCHLD) {
        reap();
      } else {
        on_signal(sig);
      }
    }
  }

  // Messages from the head (agent mode): signals to act on as if received; EOF means the
  // head, or the connection to it, is gone, and this node's workers must not outlive it.
  void read_head() {
    char buffer[4096];
    const ssize_t got = ::read(head_fd_, buffer, sizeof buffer);
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) return;
    if (got <= 0) {
      head_fd_ = -1;
      lost_head_ = true;
      if (stop_signal_ == 0 && !first_failure_) {
        stop_signal_ = SIGHUP;
        begin_stop(SIGTERM);
      }
      return;
    }
    for (const auto& line : head_lines_.feed({buffer, static_cast<std::size_t>(got)})) {
      try {
        if (const int sig = parse_agent_message(line).signal_number) on_signal(sig);
      } catch (const Error&) {
        // Not from a head ddprun: ignored, the connection's end still counts.
      }
    }
  }

  void on_signal(int sig) {
    if (!is_stop_signal(sig)) {
      signal_live(sig);  // SIGUSR1/SIGUSR2: preemption notices, the workers decide
    } else if (stop_signal_ != 0 && sig == SIGINT) {
      begin_stop(SIGKILL);  // a second Ctrl-C: no more grace
    } else {
      if (stop_signal_ == 0) stop_signal_ = sig;
      begin_stop(sig);
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
      // A preempted worker is done, not failed: its peers agreed to stop at the same step
      // and are saving the same checkpoint, so they must not be interrupted.
      const bool preempted = WIFEXITED(status) && WEXITSTATUS(status) == kExitPreempted;
      preempted_ = preempted_ || preempted;
      const bool failed = !(WIFEXITED(status) && WEXITSTATUS(status) == 0) && !preempted;
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
    const bool all_ended_cleanly = std::all_of(workers_.begin(), workers_.end(), [](auto& w) {
      const int status = w.result.wait_status;
      return w.result.exited && WIFEXITED(status) &&
             (WEXITSTATUS(status) == 0 || WEXITSTATUS(status) == kExitPreempted);
    });
    if (first_failure_) {
      result.outcome = Outcome::kWorkerFailed;
      result.first_failure = first_failure_;
    } else if (preempted_ && all_ended_cleanly) {
      result.outcome = Outcome::kPreempted;
      result.stop_signal = stop_signal_;
    } else if (stop_signal_ != 0) {
      result.outcome = Outcome::kStopped;
      result.stop_signal = stop_signal_;
    }
    result.lost_head = lost_head_;
    return result;
  }

  SignalChannel& signals_;
  Guardian& guardian_;
  const SupervisorConfig& config_;
  std::vector<Worker> workers_;
  std::vector<std::string> prefix_;
  std::string out_buffer_;
  int head_fd_ = -1;
  LineSplitter head_lines_;
  bool lost_head_ = false;
  bool preempted_ = false;
  bool killed_ = false;
  int stop_signal_ = 0;
  std::optional<std::size_t> first_failure_;
  std::optional<Clock::time_point> kill_deadline_;
  std::optional<Clock::time_point> drain_deadline_;
};

}  // namespace

RoundResult Supervisor::run(const LaunchPlan& plan, const std::string& program_path,
                            const Environment& env, const RoundSpec& spec) {
  Round round(signals_, guardian_, config_);
  return round.run(plan, program_path, env, spec);
}

int exit_code_for(const RoundResult& result) {
  switch (result.outcome) {
    case Outcome::kSucceeded:
      return 0;
    case Outcome::kStopped:
      return 128 + result.stop_signal;
    case Outcome::kPreempted:
      return kExitPreempted;
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

std::string child_label(const RankResult& child) {
  if (!child.agent) return "rank " + std::to_string(child.rank);
  if (child.node_rank < 0) return "the agents' launcher";
  return "node " + std::to_string(child.node_rank);
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
  const std::string who = child_label(failed);
  std::string report =
      error_label(colour) + who + " (" +
      (failed.agent ? std::string() : "local rank " + std::to_string(failed.local_rank) + " on ") +
      failed.host + ", pid " + std::to_string(failed.pid) +
      ") failed first: " + describe_wait_status(failed.wait_status) + " after " + seconds + " s\n";
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
    report += "ddprun: last " + std::to_string(failed.stderr_tail.size()) + " lines of " + who +
              "'s stderr:\n";
    for (const auto& line : failed.stderr_tail) report += "  | " + line + "\n";
  }
  return report;
}

}  // namespace ddprun
