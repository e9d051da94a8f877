#include "policy/gathering.h"

#include <csignal>
#include <utility>

#include "ddprun/common/signal_name.h"
#include "ddprun/contract/errors.h"
#include "policy/supervision.h"

namespace ddprun {
NodeEvent signal_node_event(int sig, bool stop, int node) {
  NodeEvent event;
  event.kind = stop ? NodeEvent::Kind::kStopped : NodeEvent::Kind::kNotice;
  event.node = node;
  event.signal = sig;
  event.code = stop ? 128 + sig : kExitPreempted;
  event.what = (stop ? "stopped by " : "a preemption notice, ") + signal_name(sig);
  return event;
}
std::optional<GatherEvent> signal_event(int sig, bool hangup_detaches,
                                        const std::vector<int>& extra_stops) {
  GatherEvent event;
  event.signal = sig;
  if (sig == SIGHUP && hangup_detaches) {
    event.kind = GatherEvent::Kind::kHangup;
  } else if (sig == SIGUSR1 || sig == SIGUSR2) {
    event.kind = GatherEvent::Kind::kNoticeSignal;
  } else if (sig != 0 && is_stop_signal(sig, extra_stops)) {
    event.kind = GatherEvent::Kind::kStopSignal;
  } else {
    return std::nullopt;
  }
  return event;
}

Gathering::Gathering(int nodes) : seats_(static_cast<std::size_t>(nodes), Seat::kAbsent) {
  seats_.at(0) = Seat::kIn;
  settle();
}

Gathering::Seat Gathering::seat(int node) const {
  return seats_.at(static_cast<std::size_t>(node));
}

void Gathering::begin() {
  hung_up_ = false;
  verdict_ = {};
  settle();
}

std::vector<int> Gathering::absent() const {
  std::vector<int> out;
  for (int node = 1; node < nodes(); ++node) {
    if (seat(node) != Seat::kIn) out.push_back(node);
  }
  return out;
}

void Gathering::settle() {
  verdict_.kind = absent().empty() ? GatherVerdict::Kind::kStart : GatherVerdict::Kind::kWait;
  verdict_.hung_up = hung_up_;
}

// A stop or a notice (here or on a node) while the nodes gather ends the job on every node,
// with no round: a stop with 128 + its signal, a notice drained (75: the job is requeued and
// resumes from its last checkpoint).
GatherVerdict Gathering::end_for(const NodeEvent& event, bool here) const {
  const std::string where = here ? "node 0" : "node " + std::to_string(event.node);
  const bool notice = event.kind == NodeEvent::Kind::kNotice;
  GatherVerdict end;
  end.kind = GatherVerdict::Kind::kEnd;
  end.code = notice ? kExitPreempted : event.code;
  end.why = where +
            (notice ? " got a preemption notice (" + signal_name(event.signal) + ")"
                    : " was " + event.what) +
            " while the nodes gathered";
  end.message = "ddprun: " + end.why +
                (notice ? "; no round starts, exit " + std::to_string(kExitPreempted) +
                              ": run the same command again to resume from the last checkpoint\n"
                        : "; stopped every node\n");
  return end;
}

GatherVerdict Gathering::on(const GatherEvent& event) {
  using Kind = GatherEvent::Kind;
  // The first end decides: a notice after a stop drains nothing, a stop after a notice
  // keeps the drained end.
  if (verdict_.kind == GatherVerdict::Kind::kEnd || verdict_.kind == GatherVerdict::Kind::kTimedOut)
    return verdict_;
  const auto node = static_cast<std::size_t>(event.node);
  switch (event.kind) {
    case Kind::kJoined:
      seats_.at(node) = Seat::kIn;  // a fresh ddprun owes nothing of an earlier round
      break;
    case Kind::kLeft:
      seats_.at(node) = Seat::kAbsent;  // never waited for as finishing: it may join again
      break;
    case Kind::kRoundStarted:
      if (seats_.at(node) == Seat::kIn) seats_.at(node) = Seat::kFinishing;
      break;
    case Kind::kReported:
      if (seats_.at(node) == Seat::kFinishing) seats_.at(node) = Seat::kIn;
      break;
    case Kind::kNodeEnded:
      if (event.event.kind == NodeEvent::Kind::kStopped ||
          event.event.kind == NodeEvent::Kind::kNotice) {
        verdict_ = end_for(event.event, false);
        return verdict_;
      }
      break;
    case Kind::kHangup:
      hung_up_ = true;  // a closed terminal: the job goes on
      break;
    case Kind::kNoticeSignal:
    case Kind::kStopSignal:
      verdict_ = end_for(signal_node_event(event.signal, event.kind == Kind::kStopSignal, 0), true);
      return verdict_;
    case Kind::kControlStop:
      verdict_ = end_for(signal_node_event(SIGTERM, true, 0), true);
      return verdict_;
    case Kind::kTimedOut:
      settle();
      if (verdict_.kind == GatherVerdict::Kind::kWait) {
        verdict_.kind = GatherVerdict::Kind::kTimedOut;
        verdict_.code = kExitLauncherError;
      }
      return verdict_;
  }
  settle();
  return verdict_;
}

}  // namespace ddprun
