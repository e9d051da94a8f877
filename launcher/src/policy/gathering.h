#pragma once
// Node 0's decisions while the other nodes gather before a round (rendezvous.h): which
// nodes are in, which still owe the exit report of a round node 0 gave up on, and what ends
// the wait: every node in (the round starts), or the job's end (a stop or a notice here or
// on a node, ddprun --stop, the join timeout). Pure: RendezvousHost and gather_nodes read the
// sockets, the signals and the clock and give it events; the sequence exploration
// (tests/launcher/policy/gather_sequences_test.cc) gives it the same events with rounds
// between them.

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "report/round_result.h"

namespace ddprun {

struct GatherEvent {
  enum class Kind {
    kJoined,        // `node` joined (again: a ddprun restarted; its old connection is gone)
    kLeft,          // `node`'s connection ended, or it was silent past the heartbeat's bound
    kRoundStarted,  // a round started on `node`: it owes that round's exit report
    kReported,      // `node` sent its round's exit report
    kNodeEnded,     // `node` said it was stopped or got a notice (`event`)
    kStopSignal,    // ddprun got `signal`, a stop
    kNoticeSignal,  // ddprun got `signal`, a preemption notice
    kHangup,        // ddprun got SIGHUP, which detaches (--detach-on-hangup): the job goes on
    kControlStop,   // ddprun --stop reached the job's handle
    kTimedOut,      // the join timeout passed
  };
  Kind kind = Kind::kJoined;
  int node = 0;
  int signal = 0;
  NodeEvent event;

  static GatherEvent of(Kind kind, int node = 0) { return {kind, node, 0, {}}; }
  static GatherEvent ended(int node, NodeEvent event) {
    return {Kind::kNodeEnded, node, 0, std::move(event)};
  }
};

struct GatherVerdict {
  enum class Kind {
    kWait,      // nodes are awaited (absent(): which)
    kStart,     // every node is in: the round starts
    kEnd,       // the job ends before the round: every node exits `code`, told `why`
    kTimedOut,  // the join timeout passed with absent() still awaited
  };
  Kind kind = Kind::kWait;
  int code = 0;
  std::string why;       // kEnd: what every node is told ("node 1 was stopped by SIGTERM ...")
  std::string message;   // kEnd: what node 0 prints
  bool hung_up = false;  // kStart: a SIGHUP that detaches came meanwhile (raise it again)
};

// What ddprun's signal `sig` is to the gather: a stop (is_stop_signal with `extra_stops`),
// a notice, a SIGHUP that detaches (`hangup_detaches`); nullopt: nothing.
std::optional<GatherEvent> signal_event(int sig, bool hangup_detaches,
                                        const std::vector<int>& extra_stops);

// What node `node` tells the others when its ddprun gets `sig` outside a round: it was
// stopped (`stop`: code 128 + sig) or got a notice (75).
NodeEvent signal_node_event(int sig, bool stop, int node);

class Gathering {
 public:
  // `nodes` in all (node 0 is this one, always in).
  explicit Gathering(int nodes);

  // A new gather (before the next round): the verdicts start over, the nodes are kept.
  void begin();
  GatherVerdict on(const GatherEvent& event);
  // The verdict with nothing new: kStart once every node is in and none owes a report.
  GatherVerdict verdict() const { return verdict_; }

  bool joined(int node) const { return seat(node) != Seat::kAbsent; }
  bool finishing(int node) const { return seat(node) == Seat::kFinishing; }
  // The nodes awaited: absent, or still finishing a round.
  std::vector<int> absent() const;
  int nodes() const noexcept { return static_cast<int>(seats_.size()); }

 private:
  enum class Seat { kAbsent, kIn, kFinishing };
  Seat seat(int node) const;
  GatherVerdict end_for(const NodeEvent& event, bool here) const;
  void settle();

  std::vector<Seat> seats_;  // by node rank; 0 is this node, always in
  bool hung_up_ = false;
  GatherVerdict verdict_;
};

}  // namespace ddprun
