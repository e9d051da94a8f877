#pragma once
// A Runner with no processes and a fake clock, for the job's policy tests: each child's
// behaviour is scripted (exit by itself after a while, how it answers signals), signals
// to ddprun are scheduled, and every signal the policy sends is recorded with its time.

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "run/runner.h"

namespace ddprun::testing {

using Ms = std::chrono::milliseconds;

// Wait statuses as the kernel encodes them.
inline int exited(int code) {
  return (code & 0xff) << 8;
}
inline int killed(int sig) {
  return sig & 0x7f;
}

struct FakeBehaviour {
  std::optional<Ms> exit_after;         // exits by itself this long after its start
  int exit_status = exited(0);          // ... with this wait status
  bool ignores_stop = false;            // SIGTERM, SIGINT, SIGHUP, SIGQUIT leave it running
  std::optional<int> status_on_notice;  // SIGUSR1/SIGUSR2: exits with this status at once
  // An agent (a ddprun on another node): a stop signal ends it with exit 128 + the signal,
  // as its workers' end, instead of killing it.
  bool exits_like_agent = false;
  std::deque<std::string> stderr_tail;
  std::optional<double> first_step_seconds;  // what first_steps() says of it
};

// Thrown when the policy waits with nothing left that could happen (a child that never
// exits and nobody to stop it): a real ddprun would wait for it forever.
struct WaitsForever : std::logic_error {
  WaitsForever() : std::logic_error("the policy waits forever: nothing can happen") {}
};

class FakeRunner : public Runner {
 public:
  struct Sent {
    int round;
    std::size_t child;
    int signal_number;
    Ms at;           // since the job's start
    long order = 0;  // among everything that happened (sent, exits, signals to ddprun)
  };
  // Something the runner reported to the policy: a child's exit, or a signal to ddprun
  // (0: the head was lost).
  struct Happened {
    int round;
    bool exit;
    std::size_t child;
    int status_or_signal;  // -1: agent `child` reported `reported`
    Ms at;
    long order;
    std::optional<NodeEvent> reported = std::nullopt;
  };
  // What the policy told its head (Runner::announce).
  struct Announced {
    int round;
    NodeEvent event;
    Ms at;
    long order;
  };

  // How child `child` of round `round` behaves (default: exits 0 after 1 ms).
  std::function<FakeBehaviour(int round, std::size_t child)> behaviour = [](int, std::size_t) {
    FakeBehaviour b;
    b.exit_after = Ms(1);
    return b;
  };
  // Starting this child (of any round) throws, as a failed fork would.
  std::optional<std::size_t> fail_start_of;

  // ddprun receives `sig` (or, with 0, loses its head) `at` after round `round` starts.
  void signal_at(int round, Ms at, int sig) { external_.push_back({round, at, sig}); }
  // Agent `child` reports `event` of its node `at` after round `round` starts.
  void report_at(int round, Ms at, std::size_t child, NodeEvent event) {
    external_.push_back({round, at, 0, false, child, std::move(event)});
  }
  // Agent `child` passes on node `node`'s part of the membership `at` after round `round`
  // starts.
  void report_membership_at(int round, Ms at, std::size_t child, int node, Membership part) {
    External e{round, at, 0};
    e.child = child;
    e.membership_node = node;
    e.membership = std::move(part);
    external_.push_back(std::move(e));
  }
  // The same from the child of that round started last on `host`, found when the part is
  // due (an agent started during the round, on a spare node); dropped when none runs then.
  void report_membership_from_host_at(int round, Ms at, std::string host, int node,
                                      Membership part) {
    External e{round, at, 0};
    e.child_host = std::move(host);
    e.membership_node = node;
    e.membership = std::move(part);
    external_.push_back(std::move(e));
  }
  // The head sends `sig` with `cause` (agent mode) `at` after round `round` starts.
  void head_signal_at(int round, Ms at, int sig, std::optional<NodeEvent> cause) {
    External e{round, at, sig};
    e.from_head = true;
    e.cause = std::move(cause);
    external_.push_back(std::move(e));
  }

  std::vector<Announced> announced;
  // Each node part the policy was given (report_membership_at): when, and its recoveries;
  // and the child each came from.
  std::vector<std::pair<Ms, int>> parts_heard;
  std::vector<std::size_t> parts_heard_from;
  std::vector<int> parts_heard_node;
  std::vector<std::optional<NodeEvent>> stop_causes;  // each round's last set_stop_cause

  std::vector<Sent> sent;                       // every signal the policy sent
  std::vector<Happened> happened;               // every event the policy was given
  std::vector<Ms> round_ends;                   // when each round ended
  std::vector<std::vector<ChildSpec>> started;  // the children of each round
  int rounds_ended = 0;

  Ms elapsed() const { return std::chrono::duration_cast<Ms>(now_ - kStart); }
  std::vector<Sent> sent_to(std::size_t child, int round = 0) const {
    std::vector<Sent> out;
    for (const Sent& s : sent) {
      if (s.child == child && s.round == round) out.push_back(s);
    }
    return out;
  }

  RunnerClock::time_point now() const override { return now_; }

  void announce(const NodeEvent& event) override {
    announced.push_back({round_, event, elapsed(), order_++});
  }
  // Every membership the policy published (--restart-scope rank), with its round.
  struct Published {
    int round;
    Membership membership;
    Ms at;
    bool whole;
  };
  std::vector<Published> memberships;
  void publish_membership(const Membership& membership, bool whole, int) override {
    memberships.push_back({round_, membership, elapsed(), whole});
  }
  std::vector<std::size_t> fewer_below;  // one_node_fewer_below's children, in order
  void one_node_fewer_below(std::size_t child) override { fewer_below.push_back(child); }
  void set_stop_cause(const NodeEvent& cause) override {
    stop_causes.resize(static_cast<std::size_t>(round_) + 1);
    stop_causes[static_cast<std::size_t>(round_)] = cause;
  }
  const NodeEvent* stop_cause() const {
    const auto r = static_cast<std::size_t>(round_);
    return r < stop_causes.size() && stop_causes[r] ? &*stop_causes[r] : nullptr;
  }

  pid_t start(const ChildSpec& spec) override {
    if (started.size() <= static_cast<std::size_t>(round_)) {
      started.resize(static_cast<std::size_t>(round_) + 1);
      round_start_ = now_;
    }
    const std::size_t index = children_.size();
    if (fail_start_of == index) throw std::system_error(EAGAIN, std::generic_category(), "fork");
    started[static_cast<std::size_t>(round_)].push_back(spec);
    Child& child = children_.emplace_back();
    child.behaviour = behaviour(round_, index);
    if (child.behaviour.exit_after) {
      child.exit_at = now_ + *child.behaviour.exit_after;
      child.exit_status = child.behaviour.exit_status;
    }
    return static_cast<pid_t>(1000 + index);
  }

  void signal(std::size_t index, int sig) override {
    Child& child = children_.at(index);
    if (!child.alive) throw std::logic_error("the policy signalled a child that had exited");
    sent.push_back({round_, index, sig, elapsed(), order_++});
    const bool stop = sig == SIGTERM || sig == SIGINT || sig == SIGHUP || sig == SIGQUIT;
    if (sig == SIGKILL || (stop && !child.behaviour.ignores_stop)) {
      child.exit_at = now_;
      // An agent exits with the code of the cause it was given, else 128 + the signal.
      const NodeEvent* cause = stop_cause();
      child.exit_status = !child.behaviour.exits_like_agent || sig == SIGKILL ? killed(sig)
                          : cause != nullptr                                  ? exited(cause->code)
                                                                              : exited(128 + sig);
    } else if ((sig == SIGUSR1 || sig == SIGUSR2) && child.behaviour.status_on_notice) {
      child.exit_at = now_;
      child.exit_status = *child.behaviour.status_on_notice;
    }
  }

  // A policy that only wakes for its own periodic checks (--stall-timeout) with nothing
  // else left to happen would go on for ever: past this much fake time, wait() throws
  // WaitsForever as well.
  Ms waits_forever_after{3600 * 1000};

  RunnerEvent wait(std::optional<RunnerClock::time_point> deadline) override {
    if (now_ - kStart > waits_forever_after) throw WaitsForever();
    // The earliest of: a child's exit, an external signal of this round.
    std::optional<RunnerClock::time_point> next;
    std::optional<std::size_t> exiting;
    std::optional<std::size_t> external;
    for (std::size_t i = 0; i < children_.size(); ++i) {
      const Child& child = children_[i];
      if (child.alive && child.exit_at && (!next || *child.exit_at < *next)) {
        next = child.exit_at;
        exiting = i;
      }
    }
    for (std::size_t i = 0; i < external_.size(); ++i) {
      const External& e = external_[i];
      if (e.round != round_ || e.delivered) continue;
      const auto at = round_start_ + e.at;
      if (!next || at < *next) {
        next = at;
        exiting.reset();
        external = i;
      }
    }
    if (!next || (deadline && *deadline < *next)) {
      if (!deadline) throw WaitsForever();
      now_ = std::max(now_, *deadline);
      return RunnerEvent{};
    }
    now_ = std::max(now_, *next);
    RunnerEvent event;
    if (exiting) {
      Child& child = children_[*exiting];
      child.alive = false;
      event.kind = RunnerEvent::Kind::kExited;
      event.child = *exiting;
      event.wait_status = child.exit_status;
      happened.push_back({round_, true, *exiting, child.exit_status, elapsed(), order_++});
      return event;
    }
    External& e = external_[*external];
    e.delivered = true;
    if (e.membership) {
      if (!e.child_host.empty()) {
        const auto& specs = started.at(static_cast<std::size_t>(round_));
        const auto last = std::find_if(specs.rbegin(), specs.rend(),
                                       [&](const ChildSpec& s) { return s.host == e.child_host; });
        if (last == specs.rend()) return wait(deadline);  // not started (yet)
        e.child = static_cast<std::size_t>(specs.rend() - last) - 1;
      }
      if (!children_.at(e.child).alive) return wait(deadline);  // an agent that has ended
      parts_heard.emplace_back(elapsed(), e.membership->recoveries);
      parts_heard_from.push_back(e.child);
      parts_heard_node.push_back(e.membership_node);
      event.kind = RunnerEvent::Kind::kMembership;
      event.child = e.child;
      event.membership = *e.membership;
      event.node = e.membership_node;
      return event;
    }
    if (e.reported) {
      if (!children_.at(e.child).alive) return wait(deadline);  // an agent that has ended
      happened.push_back({round_, false, e.child, -1, elapsed(), order_++, e.reported});
      event.kind = RunnerEvent::Kind::kNodeEvent;
      event.child = e.child;
      event.node_event = *e.reported;
      return event;
    }
    happened.push_back({round_, false, 0, e.signal_number, elapsed(), order_++});
    event.kind = e.signal_number == 0 ? RunnerEvent::Kind::kHeadLost : RunnerEvent::Kind::kSignal;
    event.signal_number = e.signal_number;
    event.from_head = e.from_head;
    event.cause = e.cause;
    return event;
  }

  // The step child `child` of round `round` has written by `at` (since the round's start);
  // by default none. Every read is counted in `progress_reads`.
  std::function<std::optional<long long>(int round, std::size_t child, Ms at)> progress_at =
      [](int, std::size_t, Ms) { return std::nullopt; };
  long progress_reads = 0;
  std::optional<TraceSnapshot> trace(std::size_t) override { return std::nullopt; }
  std::optional<long long> progress(std::size_t child) override {
    if (!children_.at(child).alive) throw std::logic_error("progress of an exited child");
    ++progress_reads;
    return progress_at(round_, child, std::chrono::duration_cast<Ms>(now_ - round_start_));
  }

  // Every capture the policy asked for: (round, children, when).
  struct Capture {
    int round;
    std::vector<std::size_t> children;
    Ms at;
  };
  std::vector<Capture> captures;
  std::vector<StackCapture> capture_stacks(const std::vector<std::size_t>& children) override {
    for (const std::size_t child : children) {
      if (!children_.at(child).alive) throw std::logic_error("a capture of an exited child");
    }
    captures.push_back({round_, children, elapsed()});
    std::vector<StackCapture> out;
    for (const std::size_t child : children) {
      StackCapture capture;
      capture.python = "Current thread 0x1 (most recent call first):\n  File \"t.py\", line " +
                       std::to_string(child) + " in step\n";
      out.push_back(capture);
    }
    return out;
  }

  bool output_open() const override { return false; }
  void close_output() override {}
  // What each worker leaves in its error and progress files, by round and child: nothing
  // unless set (no file is read).
  std::function<RankFiles(int round, std::size_t child)> files;
  RankFiles rank_files(std::size_t child) override {
    return files ? files(round_, child) : RankFiles{};
  }
  std::deque<std::string> stderr_tail(std::size_t child) const override {
    return children_.at(child).behaviour.stderr_tail;
  }
  std::vector<std::optional<double>> first_steps() const override {
    std::vector<std::optional<double>> seconds;
    for (const Child& child : children_) seconds.push_back(child.behaviour.first_step_seconds);
    return seconds;
  }
  void end_round() override {
    for (const Child& child : children_) {
      if (child.alive) throw std::logic_error("a round ended with a child still running");
    }
    children_.clear();
    round_ends.push_back(elapsed());
    ++round_;
    ++rounds_ended;
  }

 private:
  struct Child {
    FakeBehaviour behaviour;
    bool alive = true;
    std::optional<RunnerClock::time_point> exit_at;
    int exit_status = 0;
  };
  struct External {
    int round;
    Ms at;
    int signal_number;
    bool delivered = false;
    std::size_t child = 0;                             // with `reported`
    std::optional<NodeEvent> reported = std::nullopt;  // an agent's report, not a signal
    bool from_head = false;
    std::optional<NodeEvent> cause = std::nullopt;        // with from_head
    std::optional<Membership> membership = std::nullopt;  // a node's part (rank scope)
    int membership_node = 0;
    std::string child_host = std::string();  // with `membership`: from this host's last child
  };
  static constexpr RunnerClock::time_point kStart{};
  RunnerClock::time_point now_ = kStart;
  RunnerClock::time_point round_start_ = kStart;
  int round_ = 0;
  long order_ = 0;
  std::vector<Child> children_;
  std::vector<External> external_;
};

}  // namespace ddprun::testing
