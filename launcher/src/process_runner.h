#pragma once
// The real Runner: children as processes (child_set.h), their output relayed to the
// console and log files (output_relay.h), ddprun's signals from the signalfd, and, on an
// agent, the head's messages on a descriptor.

#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "child_set.h"
#include "output_relay.h"
#include "runner.h"

namespace ddprun {

struct ProcessRunnerConfig {
  RelayConfig relay;
  bool tag_output = false;  // prefix workers' console lines with "[host:rank] "
  int head_fd = -1;         // agent mode: messages from the head; EOF = the head is gone
};

class ProcessRunner : public Runner {
 public:
  // `signals` and `guardian` must outlive the runner.
  ProcessRunner(SignalChannel& signals, Guardian& guardian, ProcessRunnerConfig config);

  RunnerClock::time_point now() const override { return RunnerClock::now(); }
  pid_t start(const ChildSpec& spec) override;
  void signal(std::size_t child, int signal_number) override;
  RunnerEvent wait(std::optional<RunnerClock::time_point> deadline) override;
  bool output_open() const override { return children_->output_open(); }
  void close_output() override { children_->close_output(events_); }
  std::deque<std::string> stderr_tail(std::size_t child) const override {
    return relay_->stderr_tail(child);
  }
  void end_round() override;

 private:
  void start_fresh();  // a new child set and relay: children number from 0 again
  void read_head();

  SignalChannel& signals_;
  Guardian& guardian_;
  ProcessRunnerConfig config_;
  std::unique_ptr<ChildSet> children_;
  std::unique_ptr<OutputRelay> relay_;
  std::vector<bool> is_agent_;
  std::deque<RunnerEvent> pending_;
  ChildEvents events_;
  LineSplitter head_lines_;
};

}  // namespace ddprun
