#pragma once
// The launcher's one event loop: a set of children, each in its own process group with
// its stdout and stderr on pipes (or a connection to another node's ddprun, connect()),
// and one blocking poll() over the signalfd, those pipes and connections,
// one extra descriptor, the descriptors that have output waiting (the console) and a
// deadline. Child exits are reaped on SIGCHLD. Nothing polls on a timer, and nothing in
// the loop waits for a reader. Used by the job's process runner, --check and --doctor.

#include <sys/types.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ddprun/common/net.h"
#include "run/process.h"

namespace ddprun {

using SteadyClock = std::chrono::steady_clock;

// How a child ended.
struct ChildExit {
  int wait_status = 0;  // as from waitpid
  long max_rss_kb = 0;
  double run_seconds = 0;
};

// What the loop reports; each handler may be empty.
struct ChildEvents {
  // Bytes from a child's stdout or stderr; an empty `data` is the end of that stream.
  std::function<void(std::size_t child, bool is_stderr, std::string_view data)> output;
  std::function<void(std::size_t child, const ChildExit& exit)> exited;
  // A signal other than SIGCHLD, as read from the signalfd.
  std::function<void(int signal_number)> signal;
  // The extra descriptor given to wait_once is readable (or closed).
  std::function<void()> extra_ready;
  // Appends descriptors with output waiting, asked before each poll; `writable` is told
  // when one has room for more (or has failed).
  std::function<void(std::vector<int>& fds)> write_interest;
  std::function<void(int fd)> writable;
  // Appends more descriptors to watch for input (the control socket and its peers), asked
  // before each poll; `readable` is told when one is readable (or closed).
  std::function<void(std::vector<int>& fds)> read_interest;
  std::function<void(int fd)> readable;
};

class ChildSet {
 public:
  // `guardian`, when given, is told of every child's group so that a killed ddprun
  // leaves none behind. Both must outlive the set.
  explicit ChildSet(SignalChannel& signals, Guardian* guardian = nullptr)
      : signals_(signals), guardian_(guardian) {}
  // SIGKILLs the group of every child still running and reaps it: nothing is left behind.
  ~ChildSet();
  ChildSet(const ChildSet&) = delete;
  ChildSet& operator=(const ChildSet&) = delete;

  // Starts `spec` (its stdin and output descriptors are set here) and returns its index.
  // With `input`, its stdin is a pipe that starts with `input` and, with `keep_stdin`,
  // stays open for later messages (stdin_fd); otherwise stdin is /dev/null. With `beats`
  // (and a kept stdin), it is sent the heartbeat there too: an empty line each period (an
  // ssh agent, which takes its silence for a lost head).
  std::size_t start(SpawnSpec spec, const std::string& input = {}, bool keep_stdin = false,
                    bool beats = false);

  // A warm spare's stdin pipe holds this much: a rank's whole environment, taken at once.
  static constexpr int kStandbyPipeBytes = 1 << 20;
  // A warm spare (--warm-spare, docs/fault-tolerance.md): a process started like a child but
  // not one of the set until taken, with its stdin a pipe kept open; its output is not read
  // meanwhile (a spare says little before it is needed) and its end is reaped quietly. One at
  // a time: a second replaces the first.
  void start_standby(SpawnSpec spec);
  bool standby_ready() const { return standby_.has_value(); }  // started and still running
  std::optional<pid_t> standby_pid() const {
    return standby_ ? std::optional<pid_t>(standby_->pid) : std::nullopt;
  }
  // How the last spare ended by itself before it was taken (a wait status), once.
  std::optional<int> take_standby_end() { return std::exchange(standby_end_, std::nullopt); }
  // Makes the spare a child of the set (its index): `message` is written on its stdin, which
  // is then closed, and its output is read from here on. Never waits: nullopt when there is
  // none, or it could not take the whole message at once (it ended meanwhile, or the message
  // is larger than its pipe), and then it is killed.
  std::optional<std::size_t> take_standby(std::string_view message);

  // A child that is a connection, not a process: a node behind the launchers' rendezvous
  // (rendezvous.h), served from this loop with no process and no descriptor of its own.
  // `hello` is sent on `socket` first (not owned: it outlives the set, and is only ever
  // used without waiting). The socket is then read a line at a time, never past the line
  // that ends the child: `line_end` is asked about each line (it may rewrite it) and gives
  // the child's exit code, or nullopt to pass the line on as the child's stderr. A line
  // longer than `max_line`, or the connection's end, is exit 255. Both sides keep the
  // launchers' heartbeat (net.h): an empty line is sent every `every` for as long as this
  // set lives (the node waits for node 0's next word after its round too), empty lines
  // that come are not lines, and nothing for `silent_after` while read is exit 255: a
  // ddprun stopped or hung.
  using LineEnd = std::function<std::optional<int>(std::string& line)>;
  std::size_t connect(int socket, const std::string& hello, LineEnd line_end, std::size_t max_line);

  // A connection still to come: a lost node's ddprun that may join again during the round
  // (--restart-scope rank, per-node launchers). It is a child with no process and no socket
  // (pid 0) until attach() gives it one; at `until` it ends with exit 255, saying so as its
  // stderr, and kill() ends it at once as if killed.
  std::size_t await_connection(SteadyClock::time_point until);
  // Whether `child` is a connection still to come (await_connection), not yet attached or ended.
  bool awaiting(std::size_t child) const {
    const Child& c = children_.at(child);
    return c.await_until.has_value() && !c.exited;
  }
  // Ends the awaited `child` with `wait_status` (a stop or a notice: the round takes no join).
  void end_await(std::size_t child, int wait_status, const ChildEvents& events) {
    if (awaiting(child)) end_connection(child, wait_status, events);
  }
  // Makes the awaited `child` the connection `socket`, from here on as connect() says
  // (`hello` first, then read a line at a time). The child's time counts from its await.
  void attach(std::size_t child, int socket, const std::string& hello, LineEnd line_end,
              std::size_t max_line);

  // The connections' heartbeat (kLaunchersHeartbeat unless set; tests shorten it).
  void set_heartbeat(Heartbeat heartbeat) { watch_ = HeartbeatWatch(heartbeat); }
  // Sends every connection its heartbeat now: before and after something that holds up
  // the loop for seconds (taking stacks), so that the other side never waits out its bound.
  void send_heartbeats();

  // 0 for a connection.
  pid_t pid(std::size_t child) const { return children_.at(child).pid; }
  bool running(std::size_t child) const { return !children_.at(child).exited; }
  std::size_t running_count() const {
    return static_cast<std::size_t>(std::count_if(children_.begin(), children_.end(),
                                                  [](const Child& c) { return !c.exited; }));
  }
  bool output_open() const {  // some child's stdout or stderr is still open
    return std::any_of(children_.begin(), children_.end(),
                       [](const Child& c) { return c.out.valid() || c.err.valid() || c.reading; });
  }
  // Whether the child takes messages (send): its stdin was kept, or it is a connection.
  bool takes_messages(std::size_t child) const {
    const Child& c = children_.at(child);
    return c.stdin_pipe.valid() || (c.connection >= 0 && !c.exited);
  }
  // Sends `message` to a child that takes messages, never waiting: false when it could not
  // take all of it now (a full pipe: a reader that stopped) or is gone. A connection keeps
  // what its socket has no room for and sends it before anything else (LineOutbox), as
  // soon as the socket takes it; a connection whose socket still holds some when the set
  // ends is shut down, since the line's rest would never come.
  bool send(std::size_t child, std::string_view message);
  // SIGKILL to a process's whole group (its exit is reaped as any other); a connection is
  // given up at once: it is not read again and ends as if killed.
  void kill(std::size_t child, const ChildEvents& events);

  // Stops reading every open pipe, reporting the end of each stream (bounded drains).
  void close_output(const ChildEvents& events);

  // Blocks until something happens or `deadline` passes, then dispatches what did. A
  // negative `extra_fd` is not watched. Throws std::system_error if poll fails.
  void wait_once(std::optional<SteadyClock::time_point> deadline, int extra_fd,
                 const ChildEvents& events);

  // Reaps the children that have ended, as a SIGCHLD would: for when another loop read
  // the signalfd meanwhile (run_all_captured).
  void reap_now(const ChildEvents& events) { reap(events); }

 private:
  struct Child {
    pid_t pid = -1;  // 0: a connection (or one still to come)
    bool exited = false;
    SteadyClock::time_point started_at;
    UniqueFd out;
    UniqueFd err;
    UniqueFd stdin_pipe;
    // A connection: its socket (not owned), read while `reading`.
    int connection = -1;
    bool reading = false;
    std::string line;  // what came of the line not yet whole
    LineEnd line_end;
    std::size_t max_line = 0;
    PeerBeat beat;  // its heartbeat (a connection, or a process with `stdin_beats`)
    bool stdin_beats = false;
    LineOutbox outbox;  // what its socket had no room for yet
    // A connection still to come (await_connection): until when; reset once attached.
    std::optional<SteadyClock::time_point> await_until;
  };
  void reap(const ChildEvents& events);
  void reap_standby();
  // SIGKILLs `child`'s group and waits for it (the destructor, a replaced spare).
  void kill_and_wait(const Child& child);
  void pump(std::size_t child, bool is_stderr, const ChildEvents& events);
  void pump_connection(std::size_t child, const ChildEvents& events);
  // A connection's end: its streams close and it exits with `wait_status`.
  void end_connection(std::size_t child, int wait_status, const ChildEvents& events);
  // The next moment a connection (or a process with stdin_beats) is due a heartbeat or a
  // connection is silent too long; then, at it, sends the heartbeats due and ends the
  // connections silent too long.
  std::optional<SteadyClock::time_point> heartbeat_due() const;
  // The awaited connections whose time is up end (exit 255).
  void end_overdue_awaits(const ChildEvents& events);
  void keep_heartbeats(const ChildEvents& events);
  // Whether `child` is sent the heartbeat; sending it one now.
  static bool beats(const Child& child) {
    return child.connection >= 0 || (child.stdin_beats && !child.exited);
  }
  void beat(std::size_t child, SteadyClock::time_point now);

  SignalChannel& signals_;
  Guardian* guardian_;
  HeartbeatWatch watch_;
  std::vector<Child> children_;
  std::optional<Child> standby_;  // the warm spare, until taken
  std::optional<int> standby_end_;
  std::vector<char> buffer_ = std::vector<char>(64 * 1024);
};

// What a command printed and how it ended (run_all_captured).
struct CapturedRun {
  std::string out;
  std::string err;
  int wait_status = 0;
  bool timed_out = false;
};

// Runs every spec at once (stdin from a pipe holding `inputs[i]` when given, else
// /dev/null), collects their output, and returns when all have ended; a command still
// running after `timeout_ms` is killed with its group and marked timed_out. Signals
// that arrive meanwhile go to `on_signal`, when given; when it returns true, the commands
// still running are killed at once (marked timed_out). SIGCHLD is read here too: a caller
// with children of its own reaps them afterwards (ChildSet::reap_now).
std::vector<CapturedRun> run_all_captured(SignalChannel& signals, std::vector<SpawnSpec> specs,
                                          const std::vector<std::string>& inputs, int timeout_ms,
                                          const std::function<bool(int)>& on_signal = {});

}  // namespace ddprun
