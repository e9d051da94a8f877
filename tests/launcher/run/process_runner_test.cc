// The real runner with real processes: an ssh agent gets signals as messages on its stdin,
// and one that stops reading them is killed, never waited for; a node behind the
// launchers' rendezvous is an agent with no process, read from its connection.
#include "run/process_runner.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>

#include "ddprun/common/files.h"
#include "ddprun/common/unique_fd.h"
#include "ddprun/contract/errors.h"
#include "nodes/rendezvous.h"
#include "policy/supervision.h"
#include "report/control.h"
#include "run/process.h"
#include "run/round_joins.h"
#include "temp_dir.h"

namespace ddprun {
namespace {

TEST(ProcessRunner, AnAgentThatStopsReadingItsMessagesIsKilledNotWaitedFor) {
  ::alarm(60);  // the failure this guards against is a write that never returns
  SignalChannel signals;
  Guardian guardian;
  ProcessRunner runner(signals, guardian, ProcessRunnerConfig{});
  ChildSpec agent;
  agent.agent = true;
  agent.path = "/bin/sleep";
  agent.argv = {"sleep", "60"};  // never reads its stdin, like a stopped agent or ssh link
  agent.hello = "{}\n";
  runner.start(agent);
  // Far more than the 64 KiB pipe holds: every call must return at once, and once the pipe
  // is full the agent gets SIGKILL.
  for (int i = 0; i < 20000; ++i) runner.signal(0, SIGUSR1);
  const RunnerEvent event = runner.wait(RunnerClock::now() + std::chrono::seconds(30));
  ::alarm(0);
  ASSERT_EQ(event.kind, RunnerEvent::Kind::kExited);
  EXPECT_TRUE(WIFSIGNALED(event.wait_status) && WTERMSIG(event.wait_status) == SIGKILL)
      << "wait status " << event.wait_status;
}

// A worker whose output stays open a moment after it exits (here a grandchild in a session
// of its own holds it): the round ends when that output closes, not at the drain deadline
// (60 s here; it was the 2 s default that every such round waited out).
TEST(ProcessRunner, TheRoundEndsWhenTheLastOutputClosesNotAtTheDrainDeadline) {
  SignalChannel signals;
  Guardian guardian;
  ProcessRunner runner(signals, guardian, ProcessRunnerConfig{});
  ChildSpec worker;
  worker.rank = 0;
  worker.path = "/bin/sh";
  // The grandchild says it has left the worker's process group (which ddprun kills when
  // the worker exits) before the worker exits; then it keeps stdout 0.3 s longer.
  const support::TempDir dir;
  const std::string ready = dir.path() + "/ready";
  worker.argv = {"sh", "-c",
                 "setsid sh -c 'touch \"$0\"; sleep 0.3' \"" + ready + "\" & while [ ! -e \"" +
                     ready + "\" ]; do sleep 0.01; done; exit 0"};
  RoundPolicy policy;
  policy.drain_after_exit = std::chrono::seconds(60);
  const auto started = RunnerClock::now();
  const RoundResult result = run_round(runner, {worker}, policy);
  EXPECT_EQ(result.outcome, Outcome::kSucceeded);
  const auto took = RunnerClock::now() - started;
  EXPECT_GE(took, std::chrono::milliseconds(300));  // the output did stay open
  EXPECT_LT(took, std::chrono::seconds(30));
}

// A warm spare (ChildSet::start_standby): taken, it reads its message on stdin and its output
// is the new child's; one that ends by itself is reaped quietly and said once; one that cannot
// take its message at once is not used; one never taken is killed and reaped with the set.
TEST(ChildSet, AStandbyIsTakenWithItsMessageOrReapedQuietlyAndNeverLeftBehind) {
  SignalChannel signals;
  Guardian guardian;
  std::string out;
  std::optional<ChildExit> exited;
  ChildEvents events;
  events.output = [&](std::size_t, bool, std::string_view data) { out.append(data); };
  events.exited = [&](std::size_t, const ChildExit& exit) { exited = exit; };
  ChildSet children(signals, &guardian);
  const auto until = [&](const std::function<bool()>& done) {
    const auto deadline = SteadyClock::now() + std::chrono::seconds(20);
    while (!done() && SteadyClock::now() < deadline) children.wait_once(deadline, -1, events);
    return done();
  };
  EXPECT_FALSE(children.take_standby("x").has_value());  // none started
  children.start_standby({"/bin/sh", {"sh", "-c", "tr '\\000' '\\n'"}, {}});
  ASSERT_TRUE(children.standby_ready());
  const auto taken = children.take_standby(std::string("A=1\0B=2\0", 8));
  ASSERT_EQ(taken, std::optional<std::size_t>(0));  // the set's first child
  EXPECT_FALSE(children.standby_ready());
  ASSERT_TRUE(until([&] { return exited.has_value() && !children.output_open(); })) << out;
  EXPECT_EQ(out, "A=1\nB=2\n");
  EXPECT_EQ(exited->wait_status, 0);

  children.start_standby({"/bin/sh", {"sh", "-c", "exit 3"}, {}});
  ASSERT_TRUE(until([&] { return !children.standby_ready(); }));
  const auto end = children.take_standby_end();
  ASSERT_TRUE(end.has_value());
  EXPECT_TRUE(WIFEXITED(*end) && WEXITSTATUS(*end) == 3);
  EXPECT_FALSE(children.take_standby_end().has_value());  // said once
  EXPECT_FALSE(children.take_standby("x").has_value());

  // A spare that reads nothing yet (still loading, or hung) and a message larger than its pipe:
  // not used, and the loop never waits for it.
  children.start_standby({"/bin/sleep", {"sleep", "60"}, {}});
  const pid_t hung = *children.standby_pid();
  const auto before = SteadyClock::now();
  EXPECT_FALSE(children.take_standby(std::string(2 * ChildSet::kStandbyPipeBytes, 'x')));
  EXPECT_LT(SteadyClock::now() - before, std::chrono::seconds(5));
  EXPECT_FALSE(children.standby_ready());
  EXPECT_NE(::kill(hung, 0), 0);  // killed and reaped

  pid_t left = 0;
  {
    ChildSet other(signals, &guardian);
    other.start_standby({"/bin/sleep", {"sleep", "60"}, {}});
    ASSERT_TRUE(other.standby_pid().has_value());
    left = *other.standby_pid();
    EXPECT_EQ(::kill(left, 0), 0);
  }
  EXPECT_NE(::kill(left, 0), 0);  // killed and reaped with its set
}

// The far end of a node's connection, as that node's ddprun holds it.
struct Connection {
  UniqueFd ours;    // node 0's end: the child
  UniqueFd theirs;  // the node's end
  Connection() {
    int fds[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
    ours = UniqueFd(fds[0]);
    theirs = UniqueFd(fds[1]);
  }
  void say(const std::string& text) const {
    ASSERT_EQ(::send(theirs.get(), text.data(), text.size(), 0), static_cast<ssize_t>(text.size()));
  }
  std::string heard() const {  // what node 0 sent so far
    char buffer[4096];
    const ssize_t got = ::recv(theirs.get(), buffer, sizeof buffer, MSG_DONTWAIT);
    return got > 0 ? std::string(buffer, static_cast<std::size_t>(got)) : std::string();
  }
};

// Node 1 behind `socket`, in the round: `gathering` hears of its exit report.
ChildSpec node_behind(JoinedPeer& peer, int socket, Gathering& gathering) {
  peer.join.node_rank = 1;
  gathering.on(GatherEvent::of(GatherEvent::Kind::kJoined, 1));
  gathering.on(GatherEvent::of(GatherEvent::Kind::kRoundStarted, 1));
  ChildSpec node;
  node.agent = true;
  node.node_rank = 1;
  node.hello = format_round_start({0, 29500, 1});
  node.connection = socket;
  node.connection_line_end = [&peer, &gathering](std::string& line) {
    return peer_round_line(peer, line, gathering);
  };
  node.connection_max_line = 1 << 16;
  node.control_nodes = 1;
  return node;
}

TEST(ProcessRunner, ANodeBehindAConnectionReportsAtOnceAndEndsWithItsExitReport) {
  SignalChannel signals;
  Guardian guardian;
  ProcessRunner runner(signals, guardian, ProcessRunnerConfig{});
  const Connection link;
  JoinedPeer peer;
  Gathering gathering(2);
  EXPECT_EQ(runner.start(node_behind(peer, link.ours.get(), gathering)), 0);  // no process
  EXPECT_EQ(link.heard(), format_round_start({0, 29500, 1}));
  runner.signal(0, SIGTERM);  // as a message: the node stops its own workers
  EXPECT_EQ(link.heard(), "{\"signal\":15}\n");
  NodeEvent failed;
  failed.node = 1;
  failed.code = 3;
  failed.what = "rank 1 exit code 3";
  // Its failure, its exit report, and what it says after the round (node 0's to read
  // between rounds): the round reads up to the exit report and never past it.
  link.say(node_event_line(failed) + format_exit_report(3) + "{\"later\":1}\n");
  RunnerEvent event = runner.wait(RunnerClock::now() + std::chrono::seconds(10));
  ASSERT_EQ(event.kind, RunnerEvent::Kind::kNodeEvent);
  EXPECT_EQ(event.node_event.what, "rank 1 exit code 3");
  event = runner.wait(RunnerClock::now() + std::chrono::seconds(10));
  ASSERT_EQ(event.kind, RunnerEvent::Kind::kExited);
  EXPECT_TRUE(WIFEXITED(event.wait_status) && WEXITSTATUS(event.wait_status) == 3);
  EXPECT_FALSE(gathering.finishing(1));  // the next round need not wait for this one's report
  char rest[64] = {};
  EXPECT_EQ(::recv(link.ours.get(), rest, sizeof rest, MSG_DONTWAIT), 12);
  EXPECT_EQ(std::string(rest), "{\"later\":1}\n");
}

TEST(ProcessRunner, ANodeWhoseConnectionEndsIsLostAndOneGivenUpOnIsToldToKillItsWorkers) {
  SignalChannel signals;
  Guardian guardian;
  ProcessRunner runner(signals, guardian, ProcessRunnerConfig{});
  Connection lost;
  const Connection hung;
  JoinedPeer lost_peer;
  JoinedPeer hung_peer;
  Gathering lost_gathering(2);
  Gathering hung_gathering(2);
  runner.start(node_behind(lost_peer, lost.ours.get(), lost_gathering));
  runner.start(node_behind(hung_peer, hung.ours.get(), hung_gathering));
  lost.theirs.reset();  // its ddprun is gone
  RunnerEvent event = runner.wait(RunnerClock::now() + std::chrono::seconds(10));
  ASSERT_EQ(event.kind, RunnerEvent::Kind::kExited);
  EXPECT_EQ(event.child, 0u);
  EXPECT_TRUE(WIFEXITED(event.wait_status) && WEXITSTATUS(event.wait_status) == 255);
  (void)hung.heard();         // the round's start
  runner.signal(1, SIGKILL);  // the grace is over: given up at once, and told
  event = runner.wait(RunnerClock::now() + std::chrono::seconds(10));
  ASSERT_EQ(event.kind, RunnerEvent::Kind::kExited);
  EXPECT_EQ(event.child, 1u);
  EXPECT_TRUE(WIFSIGNALED(event.wait_status) && WTERMSIG(event.wait_status) == SIGKILL);
  EXPECT_EQ(hung.heard(), "{\"signal\":9}\n");
  EXPECT_TRUE(hung_gathering.finishing(1));  // its report is still to come, before the next round
  EXPECT_FALSE(runner.output_open());
}

// The heartbeat (net.h), shortened: every 50 ms, lost after 600 ms of silence.
constexpr Heartbeat kQuickHeartbeat{std::chrono::milliseconds(50), std::chrono::milliseconds(600)};

// How many heartbeats (empty lines) `text` holds after its first line.
long heartbeats_in(const std::string& text) {
  const auto first = text.find('\n');
  if (first == std::string::npos) return 0;
  const std::string rest = text.substr(first + 1);
  return std::count(rest.begin(), rest.end(), '\n');
}

// A runner with the quick heartbeat, as node 0's with nodes behind connections.
struct QuickRunner {
  static ProcessRunnerConfig config() {
    ProcessRunnerConfig quick;
    quick.heartbeat = kQuickHeartbeat;
    return quick;
  }
  SignalChannel signals;
  Guardian guardian;
  ProcessRunner runner{signals, guardian, config()};
};

// A node whose ddprun is stopped (SIGSTOP) keeps its connection open and its kernel
// answering: only its silence shows it. One that sends heartbeats and nothing else stays
// in the round; each is sent node 0's heartbeats.
TEST(ProcessRunner, ANodeThatSendsNothingIsLostAndOneThatSendsHeartbeatsIsNot) {
  QuickRunner quick;
  ProcessRunner& runner = quick.runner;
  const Connection stopped;
  const Connection alive;
  JoinedPeer stopped_peer;
  JoinedPeer alive_peer;
  Gathering gathering(2);
  runner.start(node_behind(stopped_peer, stopped.ours.get(), gathering));
  runner.start(node_behind(alive_peer, alive.ours.get(), gathering));
  const auto started = RunnerClock::now();
  std::optional<RunnerEvent> lost;
  std::string heard_by_alive;
  while (!lost && RunnerClock::now() < started + std::chrono::seconds(10)) {
    alive.say("\n");
    heard_by_alive += alive.heard();
    const RunnerEvent event = runner.wait(RunnerClock::now() + std::chrono::milliseconds(100));
    if (event.kind == RunnerEvent::Kind::kExited) lost = event;
  }
  ASSERT_TRUE(lost) << "the silent node was never given up";
  EXPECT_EQ(lost->child, 0u);
  EXPECT_TRUE(WIFEXITED(lost->wait_status) && WEXITSTATUS(lost->wait_status) == 255);
  EXPECT_GE(RunnerClock::now() - started, kQuickHeartbeat.silent_after);
  // The node that beats is still in the round, a second later too.
  const auto until = RunnerClock::now() + std::chrono::seconds(1);
  while (RunnerClock::now() < until) {
    alive.say("\n");
    heard_by_alive += alive.heard();
    const RunnerEvent event = runner.wait(RunnerClock::now() + std::chrono::milliseconds(100));
    EXPECT_NE(event.kind, RunnerEvent::Kind::kExited) << "child " << event.child;
  }
  EXPECT_GE(heartbeats_in(stopped.heard()), 5);
  EXPECT_GE(heartbeats_in(heard_by_alive), 10);
}

// Where a lost node's ddprun joins again, for the runner alone: a pipe stands for the
// rendezvous's listener, and each byte written to it is one join of node 1, behind `link`.
class PipeJoins final : public RoundJoins {
 public:
  PipeJoins(int socket, JoinedPeer& peer, Gathering& gathering)
      : socket_(socket), peer_(peer), gathering_(gathering) {
    int fds[2];
    EXPECT_EQ(::pipe2(fds, O_CLOEXEC | O_NONBLOCK), 0);
    read_end_ = UniqueFd(fds[0]);
    write_end_ = UniqueFd(fds[1]);
  }
  void join() const { ASSERT_EQ(::write(write_end_.get(), "j", 1), 1); }
  void await(int node) override { awaited.push_back(node); }
  void forget(int node) override { forgotten.push_back(node); }
  void watch(std::vector<int>& fds) const override { fds.push_back(read_end_.get()); }
  std::optional<RunnerClock::time_point> due() const override { return std::nullopt; }
  std::vector<ChildSpec> take(int fd) override {
    char byte = 0;
    if (fd != read_end_.get() || ::read(fd, &byte, 1) != 1) return {};
    ChildSpec joined = node_behind(peer_, socket_, gathering_);
    joined.host = "node9";
    joined.hello = format_round_start({0, 29500, 1, true});
    return {joined};
  }
  std::vector<int> awaited;
  std::vector<int> forgotten;

 private:
  int socket_;
  JoinedPeer& peer_;
  Gathering& gathering_;
  UniqueFd read_end_;
  UniqueFd write_end_;
};

// A child that awaits a lost node's ddprun has no process (pid 0: nothing is signalled or
// reaped for it); the join that comes is attached to it, told it replaces the node, and read
// as any node behind a connection; one that does not come ends it with 255 at its time; a
// stop ends the wait at once.
TEST(ProcessRunner, ALostNodeAwaitedInTheRoundIsTheConnectionThatJoinsForIt) {
  QuickRunner quick;
  ProcessRunner& runner = quick.runner;
  const Connection link;
  JoinedPeer peer;
  Gathering gathering(2);
  PipeJoins joins(link.ours.get(), peer, gathering);
  runner.set_round_joins(&joins);
  ChildSpec awaited;
  awaited.agent = true;
  awaited.node_rank = 1;
  awaited.host = "node2";
  awaited.control_nodes = 1;
  awaited.join_by = RunnerClock::now() + std::chrono::seconds(30);
  EXPECT_EQ(runner.start(awaited), 0);
  EXPECT_EQ(joins.awaited, std::vector<int>{1});
  // A notice: no one to tell yet (and nothing sent to pid 0's group); the wait ends, drained.
  runner.signal(0, SIGUSR1);
  RunnerEvent event = runner.wait(RunnerClock::now() + std::chrono::milliseconds(200));
  ASSERT_EQ(event.kind, RunnerEvent::Kind::kExited);
  EXPECT_TRUE(WIFEXITED(event.wait_status) && WEXITSTATUS(event.wait_status) == kExitPreempted);
  EXPECT_EQ(joins.forgotten, std::vector<int>{1});
  awaited.join_by = RunnerClock::now() + std::chrono::seconds(30);
  runner.start(awaited);  // child 1: a stop ends it as the node's ddprun would have ended
  runner.signal(1, SIGTERM);
  event = runner.wait(RunnerClock::now() + std::chrono::milliseconds(200));
  ASSERT_EQ(event.kind, RunnerEvent::Kind::kExited);
  EXPECT_TRUE(WIFEXITED(event.wait_status) && WEXITSTATUS(event.wait_status) == 128 + SIGTERM);
  EXPECT_EQ(joins.forgotten, (std::vector<int>{1, 1}));

  // Awaited again: this time it joins, and its lines are read until its exit report.
  awaited.join_by = RunnerClock::now() + std::chrono::seconds(30);
  runner.start(awaited);
  event = runner.wait(RunnerClock::now() + std::chrono::milliseconds(100));
  EXPECT_EQ(event.kind, RunnerEvent::Kind::kDeadline);  // nothing joined: it waits
  joins.join();
  event = runner.wait(RunnerClock::now() + std::chrono::seconds(10));
  ASSERT_EQ(event.kind, RunnerEvent::Kind::kJoined);  // the rank table names its host
  EXPECT_EQ(event.child, 2u);
  EXPECT_EQ(event.host, "node9");
  std::string start = link.heard();
  ASSERT_NE(start.find('\n'), std::string::npos);
  EXPECT_EQ(start.substr(0, start.find('\n') + 1), format_round_start({0, 29500, 1, true}));
  link.say(format_exit_report(0));
  event = runner.wait(RunnerClock::now() + std::chrono::seconds(10));
  ASSERT_EQ(event.kind, RunnerEvent::Kind::kExited);
  EXPECT_EQ(event.child, 2u);
  EXPECT_TRUE(WIFEXITED(event.wait_status) && WEXITSTATUS(event.wait_status) == 0);
  EXPECT_EQ(joins.forgotten, (std::vector<int>{1, 1}));  // taken: nothing more to forget

  // Awaited once more, for 300 ms: no join comes, and it ends as a node lost.
  awaited.join_by = RunnerClock::now() + std::chrono::milliseconds(300);
  runner.start(awaited);
  const auto began = RunnerClock::now();
  event = runner.wait(RunnerClock::now() + std::chrono::seconds(10));
  ASSERT_EQ(event.kind, RunnerEvent::Kind::kExited);
  EXPECT_EQ(event.child, 3u);
  EXPECT_TRUE(WIFEXITED(event.wait_status) && WEXITSTATUS(event.wait_status) == 255);
  EXPECT_GE(RunnerClock::now() - began, std::chrono::milliseconds(250));
  EXPECT_EQ(joins.forgotten, (std::vector<int>{1, 1, 1}));
  joins.join();  // a join after the wait ended attaches to nothing
  event = runner.wait(RunnerClock::now() + std::chrono::milliseconds(100));
  EXPECT_EQ(event.kind, RunnerEvent::Kind::kDeadline);
  EXPECT_FALSE(runner.output_open());
}

// A child that awaits a join needs someone to take it: without, its start is a bug.
TEST(ProcessRunner, AJoinAwaitedWithNoRoundJoinsIsRefused) {
  QuickRunner quick;
  ChildSpec awaited;
  awaited.agent = true;
  awaited.node_rank = 1;
  awaited.join_by = RunnerClock::now() + std::chrono::seconds(1);
  EXPECT_THROW(quick.runner.start(awaited), std::logic_error);
}

// A whole job suspended and resumed (Slurm's suspend, Ctrl-Z): node 0 itself was stopped
// far past the silence bound, and its nodes too. Once resumed it does not judge their
// silence at once (they have not run yet either): they get a fresh bound, and a node that
// stays silent through it is still lost.
TEST(ProcessRunner, ARunnerThatWasStoppedItselfGivesItsNodesAFreshBound) {
  QuickRunner quick;
  ProcessRunner& runner = quick.runner;
  const Connection node;
  JoinedPeer peer;
  Gathering gathering(2);
  runner.start(node_behind(peer, node.ours.get(), gathering));
  (void)runner.wait(RunnerClock::now() + std::chrono::milliseconds(100));
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));  // "stopped": no loop
  const auto resumed = RunnerClock::now();
  RunnerEvent event = runner.wait(RunnerClock::now() + std::chrono::milliseconds(200));
  EXPECT_NE(event.kind, RunnerEvent::Kind::kExited) << "judged at once after the resume";
  while (event.kind != RunnerEvent::Kind::kExited &&
         RunnerClock::now() < resumed + std::chrono::seconds(10)) {
    event = runner.wait(RunnerClock::now() + std::chrono::milliseconds(100));
  }
  ASSERT_EQ(event.kind, RunnerEvent::Kind::kExited);
  EXPECT_TRUE(WIFEXITED(event.wait_status) && WEXITSTATUS(event.wait_status) == 255);
  EXPECT_GE(RunnerClock::now() - resumed, kQuickHeartbeat.silent_after);
}

// An ssh agent is sent the heartbeat on its stdin after its hello (a cut link leaves its
// stdin open: only the head's silence shows it); an agent without it (srun's) is sent none.
TEST(ProcessRunner, AnSshAgentIsSentTheHeartbeatOnItsStdin) {
  QuickRunner quick;
  ProcessRunner& runner = quick.runner;
  const support::TempDir dir;
  for (const bool beats : {true, false}) {
    ChildSpec agent;
    agent.agent = true;
    agent.node_rank = 1;
    agent.path = "/bin/sh";
    const std::string file = dir.path() + (beats ? "/beats" : "/none");
    // Each byte as it comes; after the hello and 6 beats it ends by itself.
    agent.argv = {"sh", "-c", "exec dd bs=1 count=12 status=none of=\"$0\"", file};
    agent.hello = "hello\n";
    agent.heartbeat_on_stdin = beats;
    runner.start(agent);
  }
  std::optional<RunnerEvent> ended;
  const auto until = RunnerClock::now() + std::chrono::seconds(2);
  while (!ended && RunnerClock::now() < until) {
    const RunnerEvent event = runner.wait(RunnerClock::now() + std::chrono::milliseconds(100));
    if (event.kind == RunnerEvent::Kind::kExited) ended = event;
  }
  ASSERT_TRUE(ended) << "no 6 heartbeats in 2 s (one each 50 ms)";
  EXPECT_EQ(ended->child, 0u);
  EXPECT_TRUE(WIFEXITED(ended->wait_status) && WEXITSTATUS(ended->wait_status) == 0);
  EXPECT_EQ(read_file(dir.path() + "/beats"), "hello\n\n\n\n\n\n\n");
  EXPECT_EQ(read_file(dir.path() + "/none"), "hello\n") << "srun's agents: no beats";
  runner.signal(1, SIGKILL);
  while (runner.wait(RunnerClock::now() + std::chrono::milliseconds(100)).kind !=
         RunnerEvent::Kind::kExited) {
  }
}

// An ssh agent whose head sends nothing on its stdin (the link cut, the head stopped) takes
// it for a lost head; one whose head beats does not, and sends nothing back (ssh's own
// keepalive watches that way). An agent not told that its head beats (srun's) waits on.
TEST(ProcessRunner, AnSshAgentWhoseHeadSendsNothingTakesItForLost) {
  SignalChannel signals;
  Guardian guardian;
  for (const int head : {0, 1, 2}) {  // silent; beating; silent, to an agent not told
    const Connection link;            // `theirs` is the head's end here
    ProcessRunnerConfig config;
    config.heartbeat = kQuickHeartbeat;
    config.head_fd = link.ours.get();
    config.head_beats_on_stdin = head != 2;
    ProcessRunner runner(signals, guardian, config);
    const auto until = RunnerClock::now() + std::chrono::milliseconds(1500);
    std::optional<RunnerEvent> lost;
    while (!lost && RunnerClock::now() < until) {
      if (head == 1) link.say("\n");
      const RunnerEvent event = runner.wait(RunnerClock::now() + std::chrono::milliseconds(100));
      if (event.kind == RunnerEvent::Kind::kHeadLost) lost = event;
    }
    EXPECT_EQ(lost.has_value(), head == 0) << "head " << head;
    EXPECT_EQ(link.heard(), "") << "head " << head;
  }
}

// On a node behind the rendezvous: a node 0 that sends nothing (its ddprun stopped) is a
// lost head, and its connection is shut so that the wait for its next word ends too; one
// that sends heartbeats is not. This node sends its own all along.
TEST(ProcessRunner, AHeadThatSendsNothingIsLostAndItsConnectionShut) {
  SignalChannel signals;
  Guardian guardian;
  for (const bool head_beats : {true, false}) {
    const Connection head;  // `theirs` is node 0's end here
    ProcessRunnerConfig config;
    config.heartbeat = kQuickHeartbeat;
    config.head_fd = head.ours.get();
    config.head_events_fd = head.ours.get();
    ProcessRunner runner(signals, guardian, config);
    const auto until = RunnerClock::now() + std::chrono::milliseconds(1500);
    std::optional<RunnerEvent> lost;
    while (!lost && RunnerClock::now() < until) {
      if (head_beats) head.say("\n");
      const RunnerEvent event = runner.wait(RunnerClock::now() + std::chrono::milliseconds(100));
      if (event.kind == RunnerEvent::Kind::kHeadLost) lost = event;
    }
    EXPECT_EQ(lost.has_value(), !head_beats) << "head_beats " << head_beats;
    const std::string sent = "x\n" + head.heard();  // heartbeats only: no first line
    EXPECT_GE(heartbeats_in(sent), 5) << "head_beats " << head_beats;
    if (!head_beats) {
      char byte = 0;
      EXPECT_EQ(::recv(head.theirs.get(), &byte, 1, MSG_DONTWAIT), 0);  // shut: its end
    }
  }
}

// A node's line that node 0's full connection takes only in part (node 0 reads nothing
// for a while): its rest goes out as node 0 reads again, before any heartbeat, which never
// lands inside it (a torn line reads as garbage on node 0).
TEST(ProcessRunner, ALineToTheHeadIsNeverTornByAHeartbeat) {
  SignalChannel signals;
  Guardian guardian;
  const Connection head;  // `theirs` is node 0's end here
  ProcessRunnerConfig config;
  config.heartbeat = kQuickHeartbeat;
  config.head_fd = head.ours.get();
  config.head_events_fd = head.ours.get();
  ProcessRunner runner(signals, guardian, config);
  NodeEvent event;
  event.kind = NodeEvent::Kind::kSetupFailed;
  event.node = 1;
  event.code = 1;
  event.what = std::string(4 << 20, 'w');  // more than the socket holds
  const std::string line = node_event_line(event);
  runner.announce(event);
  std::string sent;
  const auto read_all = [&] {
    for (std::string more = head.heard(); !more.empty(); more = head.heard()) sent += more;
  };
  // Node 0 reads nothing for a while, as heartbeats come due.
  const auto reads_again = RunnerClock::now() + std::chrono::milliseconds(300);
  while (RunnerClock::now() < reads_again) {
    head.say("\n");
    (void)runner.wait(RunnerClock::now() + std::chrono::milliseconds(50));
  }
  const auto until = RunnerClock::now() + std::chrono::seconds(10);
  while (sent.find(line) == std::string::npos && RunnerClock::now() < until) {
    head.say("\n");
    read_all();
    (void)runner.wait(RunnerClock::now() + std::chrono::milliseconds(20));
  }
  const auto after = RunnerClock::now() + std::chrono::milliseconds(200);
  while (RunnerClock::now() < after) {  // the heartbeats go on after it
    head.say("\n");
    (void)runner.wait(RunnerClock::now() + std::chrono::milliseconds(20));
  }
  read_all();
  std::vector<std::string> lines;
  for (std::size_t at = 0, end = 0; (end = sent.find('\n', at)) != std::string::npos;
       at = end + 1) {
    if (end > at) lines.push_back(sent.substr(at, end - at));
  }
  ASSERT_EQ(lines.size(), 1u) << "the line was torn, or never came whole";
  EXPECT_EQ(lines[0] + "\n", line);
  EXPECT_GE(heartbeats_in(sent.substr(sent.find(line))), 2);
}

// A node's round is over and its exit report sent; its console does not read, so the
// final drain waits. Node 0's next round start, sent meanwhile, stays on the connection
// for the rendezvous to read: the drain does not take it for a message of the round.
TEST(ProcessRunner, TheNextRoundsStartIsLeftUnreadWhileTheConsoleDrains) {
  SignalChannel signals;
  Guardian guardian;
  const support::TempDir dir;
  int console[2];
  ASSERT_EQ(::pipe(console), 0);
  const UniqueFd console_read(console[0]);
  const UniqueFd console_write(console[1]);
  ::fcntl(console[1], F_SETFL, ::fcntl(console[1], F_GETFL) | O_NONBLOCK);
  const std::string block(4096, 'x');
  while (::write(console[1], block.data(), block.size()) > 0) {
  }                       // a console that reads nothing: full
  const Connection head;  // `theirs` is node 0's end here
  ProcessRunnerConfig config;
  config.relay.console_stdout = console[1];
  config.relay.console_stderr = console[1];
  config.console_final_stall = std::chrono::milliseconds(300);
  config.head_fd = head.ours.get();
  config.head_events_fd = head.ours.get();
  config.tmp_dir = dir.path();
  ProcessRunner runner(signals, guardian, config);
  runner.messages() << "ddprun: the round's last lines, waiting for the console\n" << std::flush;
  const std::string start = format_round_start({1, 29600, 1});
  head.say(start);
  runner.stop_reading_head();
  const std::string spilled = runner.finish_console("spill.txt");
  EXPECT_FALSE(spilled.empty());  // the drain did wait, then gave up
  char unread[256] = {};
  const ssize_t got = ::recv(head.ours.get(), unread, sizeof unread, MSG_PEEK | MSG_DONTWAIT);
  EXPECT_EQ(std::string(unread, static_cast<std::size_t>(std::max<ssize_t>(got, 0))), start);
}

}  // namespace
}  // namespace ddprun
