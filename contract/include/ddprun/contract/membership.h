#pragma once
// Who is in the round under --restart-scope rank: the launcher writes it whole to the round's
// DDPRUN_MEMBERSHIP_FILE at every change (format_membership), the workers read it
// (parse_membership) to learn which rank was lost and when its replacement runs
// (docs/environment.md, "The membership file"). Pure.

#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun {

struct Membership {
  enum class State {
    kRunning,   // its first process runs
    kLost,      // it failed; no replacement runs (yet, or ever: the round is ending)
    kReplaced,  // a replacement runs, with `pid`
    kDone,      // it exited 0
  };
  struct Member {
    int rank = 0;
    State state = State::kRunning;
    pid_t pid = -1;  // the process that runs (or ran last) as this rank
  };
  long version = 0;           // 1 for the round's first; one more at every change
  int recoveries = 0;         // replacements started this round
  std::vector<Member> ranks;  // in rank order
  // What changed, for people ("rank 1 (pid 42) killed by SIGKILL; ..."); empty at the
  // round's start and for a rank that finished. Not in the file.
  std::string change;
};

// "running", "lost", "replaced", "done".
const char* membership_state_name(Membership::State state);

// The file's text: one JSON object, one rank a line, e.g.
//   {"version": 2, "recoveries": 1, "ranks": [
//    {"rank": 0, "state": "running", "pid": 4101},
//    {"rank": 1, "state": "replaced", "pid": 4188}
//   ]}
std::string format_membership(const Membership& membership);

// The membership in `text`, or nullopt when it is not a whole membership file (a version of
// at least 1, and ranks 0..N-1 in order, each with a known state). Never throws.
std::optional<Membership> parse_membership(std::string_view text);
// The same for a part of the ranks (one node's, as it reports them to its head): ranks in
// increasing order, any of them.
std::optional<Membership> parse_membership_part(std::string_view text);

}  // namespace ddprun
