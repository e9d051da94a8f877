#pragma once
// --fold-output: the same line from several ranks, within a short window, becomes one
// console line tagged with the rank set ("[0-7,9] text"). Pure: fed (time, source, line)
// and asked what to print now and when to be asked again; no clock, no I/O, so every
// sequence of arrivals can be tested without processes.
//
// The rules (docs/launching.md#folded-output):
// - A line opens a group, or joins the oldest held group of the same stream and text that
//   opened after the last group its source joined (so each source's lines keep their order,
//   and a source that prints a line twice is in two groups).
// - Groups go out in the order they opened. The oldest goes out when its window (from its
//   first line) has passed, or as soon as no other source can still join it: each has
//   joined it, has moved on to a later group, or has closed that stream. Lines that differ
//   therefore wait only while another rank may still print the same, never past the window.
// - A group of one source prints as that source would alone (its own prefix and form); of
//   several, as "[RANKS] text" with the ranks in compact range notation.
// Not thread-safe.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ddprun {

// Where --fold-output is on without being asked: a console that is a terminal (a person
// reads it; pipes and files keep one line per rank for the scripts that read them) and a
// job of this many ranks or more (one GPU node's worth; fewer repeat little).
inline constexpr int kFoldFromRanks = 8;

// "0-7,9": ascending ranks, runs of three or more as a range ("0,1" stays a list).
std::string format_rank_ranges(std::vector<int> ranks);

// What must match for two ranks' lines to fold. PyTorch's "[rank3]:" in front is left out
// (the rank differs on every rank). A line of LibTorch's or glog's logging, "[W1128
// 05:39:13.342912942 Utils.hpp:137] Warning: ..." (c10) or "W1128 05:39:13.575000 3247964
// /x/api.py:897] ..." (glog, with the thread id), matches by its level, place and message:
// the time and the thread id differ on every rank too. Any other line matches as it is.
std::string fold_match_text(std::string_view line);
// The line a group of several ranks shows: its first line without a leading "[rankN]:" and
// one space after it (the group lists the ranks).
std::string_view without_rank_tag(std::string_view line);

class OutputFold {
 public:
  using Clock = std::chrono::steady_clock;
  // The default window: see docs/launching.md#folded-output for why 150 ms.
  static constexpr std::chrono::milliseconds kDefaultWindow{150};
  // Held lines past this many bytes are let out early, oldest first: memory stays bounded
  // whatever the ranks print.
  static constexpr std::size_t kMaxHeldBytes = std::size_t{4} << 20;

  // A console write: `text` holds `lines` whole lines, each ending in '\n'.
  struct Out {
    bool is_stderr = false;
    std::string text;
    std::size_t lines = 0;
    bool logged = false;  // every line of it is also in a log file
  };

  explicit OutputFold(std::chrono::milliseconds window = kDefaultWindow,
                      std::size_t max_held_bytes = kMaxHeldBytes)
      : window_(window), max_held_bytes_(max_held_bytes) {}

  // A new source (numbered from 0 in the order added) with its rank, and which of its
  // streams will bring lines (one that reaches no console brings none).
  void add_source(int rank, bool stdout_open, bool stderr_open);

  // A line of `source` without its newline. `alone` is how it prints when no other source
  // joins it (prefix, text, '\n'); `text` is what must match. A line that must not fold
  // (a terminal's redrawn line) is given with `foldable` false: it keeps its place in the
  // order and joins nothing. `logged`: a log file has the line too.
  void add(Clock::time_point now, std::size_t source, bool is_stderr, std::string text,
           std::string alone, bool logged, bool foldable = true);
  // The source's stream ended (or stopped reaching the console): it joins nothing more.
  void close(Clock::time_point now, std::size_t source, bool is_stderr);
  // Lets out the groups whose time has come by `now`.
  void release_due(Clock::time_point now);
  // Lets out every held group, in order: at a round's end, before ddprun's own messages,
  // and before a line redrawn in place.
  void release_all();

  // What to write now, in order; empties the list.
  std::vector<Out> take();
  // When release_due has something to do next; none while nothing is held.
  std::optional<Clock::time_point> next_deadline() const;
  bool holding() const noexcept { return !groups_.empty(); }

 private:
  struct Group {
    std::uint64_t seq = 0;
    bool is_stderr = false;
    bool foldable = true;
    bool logged = true;
    std::string text;   // the first source's line
    std::string match;  // fold_match_text(text)
    std::string alone;  // the first source's own form, for a group of one
    std::vector<int> ranks;
    Clock::time_point deadline;
  };
  struct Source {
    int rank = 0;
    bool open[2] = {true, true};  // stdout, stderr
    std::uint64_t last_seq = 0;   // the last group it joined or opened; 0: none
  };
  bool could_join(const Source& source, const Group& group) const;
  bool closed(const Group& group) const;
  void release_front();
  void release_ready(std::optional<Clock::time_point> now);
  static std::string key(bool is_stderr, std::string_view match);

  std::chrono::milliseconds window_;
  std::size_t max_held_bytes_;
  std::vector<Source> sources_;
  std::deque<Group> groups_;  // held, oldest first; seq ascending
  // The seqs of the held foldable groups by stream and text, ascending.
  std::unordered_map<std::string, std::deque<std::uint64_t>> open_;
  std::uint64_t next_seq_ = 1;
  std::size_t held_bytes_ = 0;
  std::vector<Out> out_;
};

}  // namespace ddprun
