#include "run/process_runner.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <stdexcept>

#include "ddprun/common/files.h"
#include "ddprun/contract/errors.h"
#include "plan/rank_environment.h"
#include "report/labels.h"
#include "report/report.h"
#include "report/stacks.h"
#include "run/agent_messages.h"
#include "run/restart_policy.h"
#include "run/stack_capture.h"

namespace ddprun {
ProcessRunner::ProcessRunner(SignalChannel& signals, Guardian& guardian, ProcessRunnerConfig config)
    : signals_(signals),
      guardian_(guardian),
      config_(config),
      console_(std::make_unique<Console>(config.relay.console_stdout, config.relay.console_stderr)),
      message_buffer_(*console_),
      messages_(&message_buffer_),
      under_head_(config.head_fd >= 0) {
  start_fresh();
  console_->set_before_message([this] { relay_->release_all_folded(); });
  events_.output = [this](std::size_t child, bool is_stderr, std::string_view data) {
    relay_->feed(child, is_stderr, data);
  };
  events_.exited = [this](std::size_t child, const ChildExit& exit) {
    // A node awaited in vain (its time up, or the round stopping): no join is taken for it.
    const auto awaited = std::find_if(awaiting_.begin(), awaiting_.end(),
                                      [child](const auto& entry) { return entry.second == child; });
    if (awaited != awaiting_.end()) {
      if (joins_ != nullptr) joins_->forget(awaited->first);
      awaiting_.erase(awaited);
    }
    specs_.at(child).exited = true;
    specs_.at(child).wait_status = exit.wait_status;
    RunnerEvent event;
    event.kind = RunnerEvent::Kind::kExited;
    event.child = child;
    event.wait_status = exit.wait_status;
    event.max_rss_kb = exit.max_rss_kb;
    event.run_seconds = exit.run_seconds;
    pending_.push_back(event);
  };
  events_.signal = [this](int sig) {
    if (sig == SIGHUP && config_.detach_on_hangup) {
      detach();
      return;
    }
    if (sig != SIGUSR1 && sig != SIGUSR2 && own_signal_ == 0) own_signal_ = sig;
    RunnerEvent event;
    event.kind = RunnerEvent::Kind::kSignal;
    event.signal_number = sig;
    pending_.push_back(event);
  };
  events_.extra_ready = [this] { read_head(); };
  events_.write_interest = [this](std::vector<int>& fds) {
    console_->add_write_interest(fds);
    if (head_outbox_.unsent() > 0) fds.push_back(config_.head_events_fd);
  };
  events_.writable = [this](int fd) {
    if (fd == config_.head_events_fd && head_outbox_.unsent() > 0) {
      (void)head_outbox_.send(fd, {});  // the rest of a line node 0 had no room for
    } else {
      console_->on_writable(fd);
    }
  };
  events_.read_interest = [this](std::vector<int>& fds) {
    if (config_.control != nullptr && config_.control->fd() >= 0 && !serving_) {
      fds.push_back(config_.control->fd());
    }
    for (const UniqueFd& peer : attached_) fds.push_back(peer.get());
    if (first_steps_ && first_steps_->fd() >= 0) fds.push_back(first_steps_->fd());
    join_fds_.clear();
    if (joins_ != nullptr) joins_->watch(join_fds_);  // joins, spares: the round's own
    fds.insert(fds.end(), join_fds_.begin(), join_fds_.end());
  };
  events_.readable = [this](int fd) {
    if (first_steps_ && fd == first_steps_->fd()) {
      if (first_steps_->on_readable(RunnerClock::now())) show_first_steps();
      return;
    }
    if (config_.control != nullptr && fd == config_.control->fd()) {
      serve_control();
      return;
    }
    if (std::find(join_fds_.begin(), join_fds_.end(), fd) != join_fds_.end()) {
      take_joins(fd);
      return;
    }
    // An attached console said something or left: it only ever listens, so it is let go.
    std::erase_if(attached_, [fd](const UniqueFd& peer) { return peer.get() == fd; });
  };
}

ProcessRunner::~ProcessRunner() {
  try {
    messages_.flush();
    drain_console(config_.console_stall);
    console_->give_up();
  } catch (...) {
    // Leaving: what the console did not take is lost, and nothing else is.
  }
}

void ProcessRunner::show_first_steps() {
  std::vector<int> ranks;
  std::vector<std::string> hosts;
  // The children watched: a replacement started since (--restart-scope rank) is not.
  const auto& seconds = first_steps_->seconds();
  for (std::size_t i = 0; i < seconds.size() && i < specs_.size(); ++i) {
    ranks.push_back(specs_[i].rank);
    hosts.push_back(specs_[i].host);
  }
  if (config_.show_first_steps) console_->message(format_first_steps(seconds, ranks, hosts));
}

std::vector<std::optional<double>> ProcessRunner::first_steps() const {
  return first_steps_ ? first_steps_->seconds() : std::vector<std::optional<double>>{};
}

void ProcessRunner::end_round() {
  first_round_ = false;
  membership_file_.clear();
  membership_failed_ = false;
  membership_reported_.reset();
  membership_sent_.reset();
  first_steps_.reset();
  stop_cause_.reset();
  drain_console(config_.console_stall);
  const auto dropped = console_->take_dropped();
  if (dropped.lines > 0) {
    console_->message(
        format_console_dropped(dropped.lines, dropped.logged_lines, console_->log_folder()));
  }
  start_fresh();
}

std::string ProcessRunner::finish_console(const std::string& spill_path) {
  drain_console(config_.console_final_stall);
  if (!console_->waiting()) return {};
  const std::string rest = console_->take_unwritten();
  const auto lines = std::count(rest.begin(), rest.end(), '\n');
  std::string notice;
  std::string path;
  try {
    path = private_path(spill_path);
    write_new_file(path, rest);
    notice = "ddprun: the console took nothing for " +
             std::to_string(config_.console_final_stall.count() / 1000) +
             " s after the job ended: its last " + std::to_string(lines) + " lines are in " + path +
             "\n";
  } catch (const std::exception& e) {
    notice = "ddprun: the console took nothing for " +
             std::to_string(config_.console_final_stall.count() / 1000) +
             " s after the job ended; its last " + std::to_string(lines) +
             " lines are lost: " + e.what() + "\n";
  }
  console_->message(notice);
  drain_console(std::chrono::milliseconds(1000));
  console_->give_up();
  return path;
}

std::string ProcessRunner::private_path(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  if (private_dir_.empty()) {
    private_dir_ = !config_.private_dir.empty()
                       ? config_.private_dir
                       : make_temp_directory(config_.tmp_dir + "/ddprun-" + config_.run_id + "-");
  }
  return private_dir_ + "/" + name;
}

void ProcessRunner::drain_console(std::chrono::milliseconds stall) {
  relay_->release_all_folded();
  messages_.flush();
  // A signal (or the head's message) that comes meanwhile ends the drain and stays queued
  // for the policy.
  const std::size_t events_before = pending_.size();
  const auto started = RunnerClock::now();
  auto moved_at = started;
  while (console_->waiting() && pending_.size() == events_before) {
    const auto deadline = std::min(moved_at + stall, started + config_.console_drain_limit);
    if (RunnerClock::now() >= deadline) break;
    const auto written = console_->bytes_written();
    wait_once(deadline);
    if (console_->bytes_written() != written) moved_at = RunnerClock::now();
  }
}

void ProcessRunner::start_fresh() {
  awaiting_.clear();
  join_fds_.clear();
  children_ = std::make_unique<ChildSet>(signals_, &guardian_);
  children_->set_heartbeat(config_.heartbeat);
  relay_ = std::make_unique<OutputRelay>(config_.relay, *console_);
  relay_->set_answer_handler([this](std::size_t child, std::string_view line) {
    if (auto event = parse_node_event_line(line)) {
      RunnerEvent reported;
      reported.kind = RunnerEvent::Kind::kNodeEvent;
      reported.child = child;
      reported.node_event = std::move(*event);
      pending_.push_back(std::move(reported));
      return;
    }
    if (auto report = parse_membership_report_line(line)) {
      RunnerEvent reported;
      reported.kind = RunnerEvent::Kind::kMembership;
      reported.child = child;
      reported.node = report->node;
      reported.membership = std::move(report->part);
      pending_.push_back(std::move(reported));
      return;
    }
    auto answer = parse_agent_answer(line);
    if (answer && answer->id == request_id_ && serving_) answers_.push_back(std::move(*answer));
  });
  specs_.clear();
  spare_spec_.reset();
  spare_due_.reset();
  spares_failed_ = false;
}

std::optional<std::size_t> ProcessRunner::take_spare(const ChildSpec& spec) {
  const bool replacement = std::any_of(specs_.begin(), specs_.end(), [&](const Child& c) {
    return !c.agent && c.rank == spec.rank;
  });
  if (!replacement || !children_->standby_ready()) return std::nullopt;
  const auto child = children_->take_standby(spare_assignment(spec.env));
  if (!child) return std::nullopt;
  if (!spec.cpus.empty()) (void)set_process_cpus(children_->pid(*child), spec.cpus);
  spare_due_ = RunnerClock::now() + config_.spare_delay;  // the recovery first
  // Said after the round's own line on the loss (at the next wait).
  char age[32];
  std::snprintf(age, sizeof age, "%.1f s",
                std::chrono::duration<double>(RunnerClock::now() - spare_started_at_).count());
  spare_note_ = "ddprun: rank " + std::to_string(spec.rank) +
                "'s replacement is the warm spare, started " + age + " before\n";
  return child;
}

void ProcessRunner::keep_spare() {
  messages_ << std::exchange(spare_note_, {});
  if (!spare_spec_ || spares_failed_) return;
  if (const auto ended = children_->take_standby_end()) {
    spares_failed_ = true;
    messages_ << "ddprun: the warm spare ended before it was needed ("
              << describe_wait_status(*ended)
              << "); a lost rank's replacement starts as a new process this round\n";
    return;
  }
  if (children_->standby_ready() || (spare_due_ && RunnerClock::now() < *spare_due_)) return;
  spare_due_.reset();
  try {
    children_->start_standby(*spare_spec_);
    spare_started_at_ = RunnerClock::now();
  } catch (const std::exception& e) {
    spares_failed_ = true;
    messages_ << "ddprun: cannot start the warm spare: " << e.what() << "\n";
  }
}

pid_t ProcessRunner::start(const ChildSpec& spec) {
  if (specs_.empty()) round_started_at_ = RunnerClock::now();
  RelayTarget target;
  if (spec.agent) {
    // Agents tag and filter their own workers' lines. The head takes its agents' answers
    // to control requests; an agent passes those of the agents it started on to its head.
    target.answers = config_.head_fd < 0;
  } else {
    target.worker = true;
    target.rank = spec.rank;
    target.label = "[" + spec.host + ":" + std::to_string(spec.rank) + "] ";
    if (config_.tag_output) target.prefix = target.label;
    if (!spec.filtered_stdout_log.empty()) relay_->open_filtered(false, spec.filtered_stdout_log);
    if (!spec.filtered_stderr_log.empty()) relay_->open_filtered(true, spec.filtered_stderr_log);
    target.stdout_to_console = spec.stdout_to_console;
    target.stderr_to_console = spec.stderr_to_console;
    // A log of an earlier run in a reused --log-dir goes on (append); nothing through a link.
    if (!spec.stdout_log.empty()) target.stdout_log = open_own_file_for_append(spec.stdout_log);
    if (!spec.stderr_log.empty()) target.stderr_log = open_own_file_for_append(spec.stderr_log);
    target.stdout_log_path = spec.stdout_log;
    target.stderr_log_path = spec.stderr_log;
    const std::string& log = spec.stdout_log.empty() ? spec.stderr_log : spec.stdout_log;
    if (const auto slash = log.rfind('/'); slash != std::string::npos) {
      console_->set_log_folder(log.substr(0, slash));
    }
  }
  // A stale file from an earlier run is no report.
  if (!spec.error_file.empty()) ::unlink(spec.error_file.c_str());
  if (!spec.progress_file.empty()) ::unlink(spec.progress_file.c_str());
  if (!spec.python_stack_file.empty()) ::unlink(spec.python_stack_file.c_str());
  if (!spec.stacks_log.empty()) ::unlink(spec.stacks_log.c_str());
  if (!spec.trace_file.empty()) ::unlink(spec.trace_file.c_str());
  if (membership_file_.empty() && !spec.membership_file.empty()) {
    membership_file_ = spec.membership_file;
    ::unlink(membership_file_.c_str());  // an earlier run's is no membership of this one
  }
  std::size_t child = 0;
  if (spec.join_by) {
    if (joins_ == nullptr) throw std::logic_error("a child awaits a join, but none is taken");
    child = children_->await_connection(*spec.join_by);
    awaiting_[spec.node_rank] = child;
    joins_->await(spec.node_rank);
  } else if (spec.connection >= 0) {
    child = children_->connect(spec.connection, spec.hello, spec.connection_line_end,
                               spec.connection_max_line);
  } else if (const auto spare = config_.warm_spare ? take_spare(spec) : std::nullopt) {
    child = *spare;
  } else {
    SpawnSpec process{spec.path, spec.argv, spec.env};
    process.cpus = spec.cpus;
    child = children_->start(std::move(process), spec.hello, /*keep_stdin=*/!spec.hello.empty(),
                             spec.heartbeat_on_stdin);
    if (config_.warm_spare && !spec.agent && !spare_spec_) {
      spare_spec_ = SpawnSpec{spec.path, spec.argv, spare_environment(spec.env)};
    }
  }
  relay_->add(std::move(target));
  specs_.push_back({spec.agent, spec.rank, spec.node_rank, spec.host, spec.control_nodes,
                    spec.python_stack_file, spec.stacks_log, spec.progress_file, spec.trace_file,
                    spec.error_file});
  return children_->pid(child);
}

std::optional<long long> ProcessRunner::progress(std::size_t child) {
  const std::string& path = specs_.at(child).progress_file;
  if (path.empty()) return std::nullopt;
  return parse_progress(read_file_head(path, 64));
}

Runner::RankFiles ProcessRunner::rank_files(std::size_t child) {
  const std::string& path = specs_.at(child).error_file;
  return {path.empty() ? std::string() : read_file_head(path), progress(child)};
}

std::optional<TraceSnapshot> ProcessRunner::trace(std::size_t child) {
  auto file = read_trace(specs_.at(child).trace_file);
  if (!file) return std::nullopt;
  return TraceSnapshot{*file, std::chrono::duration_cast<std::chrono::nanoseconds>(
                                  std::chrono::system_clock::now().time_since_epoch())
                                  .count()};
}

void ProcessRunner::take_joins(int fd) {
  for (const ChildSpec& joined : joins_->take(fd)) {
    const auto awaited = awaiting_.find(joined.node_rank);
    if (awaited == awaiting_.end() || !children_->awaiting(awaited->second)) continue;
    const std::size_t child = awaited->second;
    awaiting_.erase(awaited);
    children_->attach(child, joined.connection, joined.hello, joined.connection_line_end,
                      joined.connection_max_line);
    Child& kept = specs_.at(child);
    messages_ << "ddprun: node " << joined.node_rank << " (" << joined.host
              << ") joined again: its ranks go on there (was " << kept.host << ")\n";
    kept.host = joined.host;
    RunnerEvent event;
    event.kind = RunnerEvent::Kind::kJoined;
    event.child = child;
    event.host = joined.host;
    pending_.push_back(std::move(event));
  }
}

void ProcessRunner::signal(std::size_t child, int sig) {
  const pid_t pid = children_->pid(child);
  if (children_->awaiting(child)) {
    // No node behind it yet: a stop or a notice ends the wait, as the node's ddprun would have
    // ended (a notice: drained, with nothing to save; a stop: 128 + it; SIGKILL: killed).
    const bool notice = sig == SIGUSR1 || sig == SIGUSR2;
    children_->end_await(
        child, sig == SIGKILL ? SIGKILL : (notice ? kExitPreempted : 128 + sig) << 8, events_);
    return;
  }
  if (sig == SIGKILL) {
    // A node behind a connection is told to end its workers at once; its round then ends
    // without node 0 (which reads its late exit report before the next round).
    if (pid == 0) (void)children_->send(child, agent_signal_message(SIGKILL, nullptr));
    children_->kill(child, events_);
  } else if (!specs_.at(child).agent) {
    // The worker's main process alone: its handler may still need its children (a
    // DataLoader's workers for an emergency checkpoint). The rest of its group goes with
    // it when it exits (ChildSet::reap), or gets SIGKILL at the grace's end.
    signal_process(pid, sig);
  } else if (children_->takes_messages(child)) {
    // ssh delivers no signals: the agent gets them as messages. Never waiting for them:
    // a pipe that is full (an agent or its link that stopped reading) or broken is a dead
    // link, and a dead link gets SIGKILL (the agent's node then stops its workers).
    const bool stop = sig != SIGUSR1 && sig != SIGUSR2;
    const NodeEvent* cause = stop && stop_cause_ ? &*stop_cause_ : nullptr;
    if (!children_->send(child, agent_signal_message(sig, cause))) children_->kill(child, events_);
  } else {
    signal_process(pid, sig);  // srun and mpirun forward it to their tasks
  }
}

void ProcessRunner::announce(const NodeEvent& event) {
  if (config_.head_fd < 0) return;  // no head to tell
  const std::string line = node_event_line(event);
  if (config_.head_events_fd < 0) {
    console_->message(line);  // an ssh agent: with its answers, on its stderr
    return;
  }
  // A connection that takes no bytes is a lost head, which the head's end shows anyway.
  (void)head_outbox_.send(config_.head_events_fd, line);
}

void ProcessRunner::wait_once(std::optional<RunnerClock::time_point> deadline) {
  // The fold's next release is a deadline of the loop's own: no timer, no polling.
  if (const auto fold = relay_->fold_deadline(); fold && (!deadline || *fold < *deadline)) {
    deadline = fold;
  }
  // The first-step watch is armed a moment into the first round: a job that is over by then
  // never pays for inotify (closing one waits for the kernel's grace period, ~8 ms).
  const bool watch = first_round_ && (config_.show_first_steps || config_.record_first_steps) &&
                     !first_steps_ && !specs_.empty() && !first_steps_armed_;
  const auto arm_at = round_started_at_ + kFirstStepWatchAfter;
  if (watch && RunnerClock::now() >= arm_at) {
    first_steps_armed_ = true;
    std::vector<std::string> files;
    for (const Child& child : specs_) files.push_back(child.agent ? "" : child.progress_file);
    first_steps_.emplace(files, round_started_at_, RunnerClock::now());
    if (first_steps_->done()) show_first_steps();  // every step came before the watch
  } else if (watch && (!deadline || arm_at < *deadline)) {
    deadline = arm_at;
  }
  if (head_heartbeat_on()) {
    const auto due = head_watch_.due(head_beat_, config_.head_fd >= 0);
    if (!deadline || due < *deadline) deadline = due;
  }
  std::optional<RunnerClock::time_point> joins_due;
  if (joins_ != nullptr) joins_due = joins_->due();
  if (joins_due && (!deadline || *joins_due < *deadline)) deadline = joins_due;
  children_->wait_once(deadline, config_.head_fd, events_);
  if (joins_due && RunnerClock::now() >= *joins_due) take_joins(-1);
  keep_head_heartbeat();
  relay_->release_folded(RunnerClock::now());
}

void ProcessRunner::send_heartbeats() {
  children_->send_heartbeats();
  if (!head_heartbeat_on() || config_.head_events_fd < 0) return;
  (void)head_outbox_.beat(config_.head_events_fd);
  head_watch_.sent(head_beat_, RunnerClock::now());
}

void ProcessRunner::keep_head_heartbeat() {
  if (!head_heartbeat_on()) return;
  const auto now = RunnerClock::now();
  head_watch_.turn(now);
  if (config_.head_fd >= 0 && head_watch_.silent(head_beat_, now)) {
    // On a socket the kernel would have ended a connection to a host that is gone; an ssh
    // agent's stdin stays open through a cut link.
    console_->message(
        "ddprun: node 0's ddprun sent nothing in " + config_.heartbeat.silence() +
        (config_.head_events_fd >= 0
             ? ", though its host answers (it is stopped, by SIGSTOP or a debugger, or hung)\n"
             : " (the link to it is down, or it is stopped or hung)\n"));
    ::shutdown(config_.head_fd, SHUT_RDWR);
    config_.head_fd = -1;
    RunnerEvent event;
    event.kind = RunnerEvent::Kind::kHeadLost;
    pending_.push_back(event);
    return;
  }
  if (head_watch_.beat_due(head_beat_, now)) {
    // Never waiting: a node 0 that reads nothing has a full socket, and is silent itself.
    // An ssh agent sends none: ssh's keepalive watches the way up.
    if (config_.head_events_fd >= 0) (void)head_outbox_.beat(config_.head_events_fd);
    head_watch_.sent(head_beat_, now);
  }
}

RunnerEvent ProcessRunner::wait(std::optional<RunnerClock::time_point> deadline) {
  const bool output_was_open = children_->output_open();
  while (pending_.empty()) {
    if (deadline && RunnerClock::now() >= *deadline) return RunnerEvent{};
    keep_spare();
    auto wake = deadline;
    if (spare_due_ && !spares_failed_ && (!wake || *spare_due_ < *wake)) wake = spare_due_;
    wait_once(wake);
    // The last output closing is news too: after the last exit it ends the round, which
    // must not wait out the drain deadline (seen: 2 s when a pipe's end came after its
    // child's exit).
    if (pending_.empty() && output_was_open && !children_->output_open()) return RunnerEvent{};
  }
  const RunnerEvent event = pending_.front();
  pending_.pop_front();
  return event;
}

}  // namespace ddprun
