// ProcessRunner's answers to the job's handle (report/control.h): --status and --stacks
// served from the loop (this node's ranks, and each agent's node asked on its stdin), the
// stacks taken (for those answers and for the policy),
// --stop, and the detach on SIGHUP that --attach follows; the head's messages (read_head).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "ddprun/common/files.h"
#include "ddprun/contract/errors.h"
#include "report/control.h"
#include "report/stacks.h"
#include "run/agent_messages.h"
#include "run/process_runner.h"
#include "run/stack_capture.h"

namespace ddprun {

namespace {

constexpr auto kStatusAnswerLimit = std::chrono::milliseconds(3000);
// An agent's stacks come within CaptureLimits (stack_capture.h: at most about 6 s).
constexpr auto kStacksAnswerLimit = std::chrono::milliseconds(10000);

// The state letter of /proc/PID/stat ('R', 'S', 'T', ...); '?' when unreadable.
char proc_state(pid_t pid) {
  const std::string stat = read_any_file_head("/proc/" + std::to_string(pid) + "/stat", 512);
  const auto close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() ? stat[close + 2] : '?';
}

}  // namespace

std::vector<StackCapture> ProcessRunner::capture_stacks(const std::vector<std::size_t>& children) {
  return take_stacks(children, /*keep=*/true);
}

std::vector<StackCapture> ProcessRunner::take_stacks(const std::vector<std::size_t>& children,
                                                     bool keep) {
  std::vector<StackTarget> targets;
  for (const std::size_t child : children) {
    targets.push_back({children_->pid(child), specs_.at(child).python_stack_file});
  }
  // A stop signal meanwhile (a second Ctrl-C) ends the capture: the user wants out.
  const auto on_signal = [this](int sig) {
    events_.signal(sig);  // a SIGHUP that detaches is done there, and ends nothing
    if (sig == SIGHUP && config_.detach_on_hangup) return false;
    return sig != SIGUSR1 && sig != SIGUSR2;
  };
  // Up to seconds without the loop: the other nodes hear this one before and after.
  send_heartbeats();
  std::vector<StackCapture> captures =
      ddprun::capture_stacks(signals_, targets, config_.eu_stack, {}, on_signal);
  send_heartbeats();
  children_->reap_now(events_);  // the capture's loop read the SIGCHLD of any that ended
  for (std::size_t i = 0; keep && i < children.size(); ++i) {
    const std::string& log = specs_.at(children[i]).stacks_log;
    if (log.empty()) continue;
    try {
      ::unlink(log.c_str());  // an earlier capture of this round (a stall's)
      write_new_file(log, format_stack_file(captures[i]));
    } catch (const std::exception& e) {
      captures[i].problem += (captures[i].problem.empty() ? "" : "; ") + std::string(e.what());
    }
  }
  return captures;
}

std::vector<RankStatus> ProcessRunner::local_status(bool stacks) {
  std::vector<RankStatus> ranks;
  std::vector<std::size_t> running;
  std::vector<std::size_t> rows;  // child of each row
  for (std::size_t i = 0; i < specs_.size(); ++i) {
    const Child& child = specs_[i];
    if (child.agent) continue;
    RankStatus& rank = ranks.emplace_back();
    rank.rank = child.rank;
    rank.node_rank = child.node_rank;
    rank.host = child.host;
    rank.pid = children_->pid(i);
    rank.state =
        rank_state(child.exited, child.wait_status, child.exited ? '?' : proc_state(rank.pid));
    rank.step = progress(i);
    rank.last_line = relay_->last_line(i);
    if (!child.exited) running.push_back(i);
    rows.push_back(i);
  }
  if (!stacks) return ranks;
  std::vector<StackCapture> captures = take_stacks(running, /*keep=*/false);
  for (std::size_t k = 0; k < rows.size(); ++k) {
    const auto taken = std::find(running.begin(), running.end(), rows[k]);
    if (taken != running.end()) {
      ranks[k].stacks = std::move(captures[static_cast<std::size_t>(taken - running.begin())]);
    }
    ranks[k].trace = trace(rows[k]);
  }
  return ranks;
}

std::vector<RankStatus> ProcessRunner::ask_agents(ControlVerb verb,
                                                  std::vector<std::string>& notes) {
  request_id_ += 1;
  answers_.clear();
  bool unasked = false;
  const int expected = tell_agents(agent_control_message(verb, request_id_), unasked);
  if (unasked) {
    notes.push_back(
        "the ranks of nodes started by mpirun are not shown (mpirun passes no "
        "input to them)");
  }
  // Events meanwhile (exits, output) are handled and queued as always; a signal ends the
  // wait, as it ends a console drain.
  const std::size_t events_before = pending_.size();
  const auto deadline =
      now() + (verb == ControlVerb::kStacks ? kStacksAnswerLimit : kStatusAnswerLimit);
  while (static_cast<int>(answers_.size()) < expected && now() < deadline &&
         pending_.size() == events_before) {
    wait_once(deadline);
  }
  std::vector<RankStatus> ranks;
  for (AgentAnswer& answer : answers_) {
    for (RankStatus& rank : answer.ranks) ranks.push_back(std::move(rank));
  }
  if (static_cast<int>(answers_.size()) < expected) {
    notes.push_back(std::to_string(expected - static_cast<int>(answers_.size())) + " of " +
                    std::to_string(expected) + " other nodes did not answer in time");
  }
  answers_.clear();
  return ranks;
}

int ProcessRunner::tell_agents(const std::string& message, bool& unasked) {
  int nodes = 0;
  for (std::size_t i = 0; i < specs_.size(); ++i) {
    const Child& child = specs_[i];
    if (!child.agent || child.exited) continue;
    if (child.control_nodes == 0 || !children_->takes_messages(i)) {
      unasked = true;
    } else if (children_->send(i, message)) {
      nodes += child.control_nodes;
    }
  }
  return nodes;
}

void ProcessRunner::answer_head(ControlVerb verb, int id) {
  if (verb != ControlVerb::kStatus && verb != ControlVerb::kStacks) return;
  // The agents this one started answer for their own nodes, on the same way up.
  bool unasked = false;
  tell_agents(agent_control_message(verb, id), unasked);
  const std::string answer = agent_answer_line(id, local_status(verb == ControlVerb::kStacks));
  if (config_.head_events_fd >= 0) {
    // A node's ddprun: to node 0's relay, never waiting (a large --stacks answer goes on
    // as node 0 reads it).
    (void)head_outbox_.send(config_.head_events_fd, answer);
  } else {
    console_->message(answer);
  }
}

void ProcessRunner::serve_control() {
  auto request = config_.control->accept();
  if (!request) return;
  const int peer = request->connection.get();
  serving_ = true;
  switch (request->verb) {
    case ControlVerb::kStatus:
    case ControlVerb::kStacks: {
      const bool stacks = request->verb == ControlVerb::kStacks;
      JobStatus status = job_status();
      status.ranks = local_status(stacks);
      for (RankStatus& rank : ask_agents(request->verb, status.notes)) {
        status.ranks.push_back(std::move(rank));
      }
      std::stable_sort(status.ranks.begin(), status.ranks.end(),
                       [](const RankStatus& a, const RankStatus& b) { return a.rank < b.rank; });
      send_text(peer, stacks ? format_stacks_answer(status) : format_status(status));
      break;
    }
    case ControlVerb::kStop: {
      send_text(peer, "ddprun: run " + config_.run_id + ": stopping, as on SIGTERM\n");
      events_.signal(SIGTERM);
      break;
    }
    case ControlVerb::kAttach:
      if (!detached_) {
        send_text(peer, "error: run " + config_.run_id +
                            " is not detached: its console is still where it was started\n");
      } else if (send_text(peer, "console " + console_path_ + "\n")) {
        attached_.push_back(std::move(request->connection));
      }
      break;
  }
  serving_ = false;
}

JobStatus ProcessRunner::job_status() const {
  JobStatus status;
  status.run_id = config_.run_id;
  status.pid = ::getpid();
  status.restarts = restarts_spent_ + round_replacements_;
  status.max_restarts = config_.max_restarts;
  status.up_seconds = std::chrono::duration<double>(now() - started_at_).count();
  if (detached_) status.console_file = console_path_;
  return status;
}

bool ProcessRunner::serve_between_rounds(int round, const std::string& gathering) {
  auto request = config_.control != nullptr ? config_.control->accept() : std::nullopt;
  if (!request) return false;
  const int peer = request->connection.get();
  switch (request->verb) {
    case ControlVerb::kStatus:
    case ControlVerb::kStacks: {
      JobStatus status = job_status();
      status.notes.push_back("no rank runs now: the nodes gather before round " +
                             std::to_string(round) + "; " + gathering);
      send_text(peer, format_status(status));
      return false;
    }
    case ControlVerb::kStop:
      send_text(peer, "ddprun: run " + config_.run_id + ": stopping, as on SIGTERM\n");
      return true;
    case ControlVerb::kAttach:
      send_text(peer, "error: run " + config_.run_id +
                          " is between rounds (the nodes gather): attach once a round runs\n");
      return false;
  }
  return false;
}

void ProcessRunner::detach() {
  if (detached_) return;
  detached_ = true;
  // A new file in a folder of ddprun's own: nothing planted there is written to or
  // waited on (a FIFO).
  UniqueFd file;
  std::string why;
  try {
    const std::string path = private_path(config_.console_file);
    ::unlink(path.c_str());  // a file of an earlier ddprun of this run id and pid
    file = UniqueFd(
        ::open(path.c_str(),
               O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0600));
    if (file.valid()) {
      console_path_ = path;
    } else {
      why = path + ": " + std::strerror(errno);
    }
  } catch (const std::exception& e) {
    why = e.what();
  }
  if (file.valid()) {
    ::dup2(file.get(), config_.relay.console_stdout);
    ::dup2(file.get(), config_.relay.console_stderr);
  } else {
    // Nowhere to write: the console's output is dropped rather than sent to a dead terminal.
    UniqueFd null(::open("/dev/null", O_WRONLY | O_CLOEXEC));
    ::dup2(null.get(), config_.relay.console_stdout);
    ::dup2(null.get(), config_.relay.console_stderr);
  }
  console_->retarget();
  console_->message("ddprun: SIGHUP: detached from the terminal; the job goes on" +
                    (file.valid() ? "; its console is in " + console_path_ + " (ddprun --attach " +
                                        config_.run_id + " follows it)"
                                  : " (no console file: " + why + ")") +
                    "\n");
}

void ProcessRunner::release_attached(int exit_code) {
  messages_.flush();
  drain_console(config_.console_stall);
  for (const UniqueFd& peer : attached_)
    send_text(peer.get(), "exit " + std::to_string(exit_code) + "\n");
  attached_.clear();
}

void ProcessRunner::read_head() {
  char buffer[4096];
  const ssize_t got = ::read(config_.head_fd, buffer, sizeof buffer);
  if (got < 0 && (errno == EINTR || errno == EAGAIN)) return;
  if (got > 0) head_beat_.heard_at = RunnerClock::now();
  if (got <= 0) {
    config_.head_fd = -1;
    RunnerEvent event;
    event.kind = RunnerEvent::Kind::kHeadLost;
    pending_.push_back(event);
    return;
  }
  for (const auto& line : head_lines_.feed({buffer, static_cast<std::size_t>(got)})) {
    if (line.empty()) continue;  // a heartbeat
    try {
      const AgentMessage message = parse_agent_message(line);
      if (message.signal_number != 0) {
        RunnerEvent event;
        event.kind = RunnerEvent::Kind::kSignal;
        event.signal_number = message.signal_number;
        event.from_head = true;
        event.cause = message.cause;
        pending_.push_back(event);
      } else if (message.control) {
        answer_head(*message.control, message.control_id);
      } else if (message.membership) {
        take_membership(*message.membership);
      }
    } catch (const Error&) {
      // Not from a head ddprun: ignored; the connection's end still counts.
    }
  }
}

namespace {

// Whether `next` differs from `before` only in ranks that finished: nothing a worker waits
// for, and at the job's end every node's ranks finish (at 1,000 nodes, 1,000 messages of
// the whole membership to each node, were each one sent).
bool only_finished(const std::optional<Membership>& before, const Membership& next) {
  if (!before || before->recoveries != next.recoveries ||
      before->ranks.size() != next.ranks.size()) {
    return false;
  }
  for (std::size_t i = 0; i < next.ranks.size(); ++i) {
    const Membership::Member& was = before->ranks[i];
    const Membership::Member& is = next.ranks[i];
    if (was.rank != is.rank) return false;
    if ((was.state != is.state || was.pid != is.pid) && is.state != Membership::State::kDone) {
      return false;
    }
  }
  return true;
}

}  // namespace

void ProcessRunner::publish_membership(const Membership& membership, bool whole, int node) {
  round_replacements_ = membership.recoveries;
  if (!membership.change.empty()) messages_ << "ddprun: " << membership.change << "\n";
  if (!under_head_) {
    if (whole) take_membership(membership);
    return;
  }
  // This node's part (an agent's agents report their own past it): the head merges every
  // node's and sends the whole back (read_head).
  if (config_.head_fd < 0) return;  // the head is gone: the round is stopping
  if (only_finished(membership_reported_, membership)) return;
  membership_reported_ = membership;
  const std::string line = membership_report_line({node, membership});
  if (config_.head_events_fd < 0) {
    console_->message(line);  // an ssh agent: with its answers, on its stderr
  } else {
    (void)head_outbox_.send(config_.head_events_fd, line);
  }
}

void ProcessRunner::take_membership(const Membership& given) {
  // From the head, the ranks still in their first process come without pids: this node's
  // own are what it reported.
  Membership membership = given;
  if (membership_reported_) {
    for (const Membership::Member& mine : membership_reported_->ranks) {
      if (mine.rank < 0 || static_cast<std::size_t>(mine.rank) >= membership.ranks.size()) continue;
      Membership::Member& member = membership.ranks[static_cast<std::size_t>(mine.rank)];
      if (member.state == Membership::State::kRunning && member.pid < 0) member.pid = mine.pid;
    }
  }
  if (!membership_file_.empty() && !membership_failed_) {
    try {
      replace_file(membership_file_, format_membership(membership));
    } catch (const std::system_error& e) {
      membership_failed_ = true;
      messages_ << "ddprun: error: cannot write the membership file: " << e.what()
                << "; the workers see no more changes this round\n";
    }
  }
  if (only_finished(membership_sent_, membership)) return;
  membership_sent_ = membership;
  const std::string message = agent_membership_message(membership);
  for (std::size_t i = 0; i < specs_.size(); ++i) {
    if (!specs_[i].agent || !children_->running(i) || !children_->takes_messages(i)) continue;
    if (!children_->send(i, message)) children_->kill(i, events_);
  }
}

}  // namespace ddprun
