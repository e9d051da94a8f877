#pragma once
// The real Runner: children as processes (child_set.h), their output relayed to the
// console and log files (output_relay.h), ddprun's signals from the signalfd, and, on an
// agent, the head's messages on a descriptor. The console never holds up the loop: what
// it cannot take waits (bounded) and is drained at the end of each round.

#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string_view>
#include <vector>

#include "output/output_relay.h"
#include "report/control.h"
#include "run/child_set.h"
#include "run/control_socket.h"
#include "run/first_steps.h"
#include "run/round_joins.h"
#include "run/runner.h"

namespace ddprun {

struct ProcessRunnerConfig {
  RelayConfig relay;
  bool tag_output = false;  // prefix workers' console lines with "[host:rank] "
  int head_fd = -1;         // agent mode: messages from the head; EOF = the head is gone
  // Agent mode: where this node's events go (announce), when not with its answers on the
  // console (an ssh agent's stderr): a per-node ddprun's connection to node 0.
  int head_events_fd = -1;
  // The launchers' heartbeat (net.h) on the connections of nodes behind the rendezvous
  // (ChildSet::connect) and, on such a node, on its connection to node 0 (head_events_fd
  // set): a node 0 that sends nothing for its `silent_after` is a lost head. Tests shorten it.
  Heartbeat heartbeat = kLaunchersHeartbeat;
  // An ssh agent whose head sends the heartbeat on its stdin (head_fd): its silence is a
  // lost head too (ChildSpec::heartbeat_on_stdin); none goes back.
  bool head_beats_on_stdin = false;
  // The console drain at a round's end (and at exit) goes on while bytes move: it gives up
  // after `console_stall` in which the console took nothing, or after `console_drain_limit`
  // in all; a signal or a message from the head ends it too.
  std::chrono::milliseconds console_stall{2000};
  std::chrono::milliseconds console_drain_limit{60000};
  // At the job's end the last lines matter most (a traceback): the drain waits this long
  // for a console that takes nothing before it spills the rest to a file.
  std::chrono::milliseconds console_final_stall{5000};
  std::string eu_stack;  // eu-stack's path for stack captures; empty: not installed
  // The job's control socket (control_socket.h), served from the loop; null: none. An
  // agent answers its head's control requests whatever this is.
  ControlServer* control = nullptr;
  // The first round's line saying when every worker reported its first step (first_steps.h).
  bool show_first_steps = false;
  // Watch the first round's first steps for the job's report, shown or not.
  bool record_first_steps = false;
  std::string run_id;    // for status answers
  int max_restarts = 0;  // for status answers
  // SIGHUP detaches from the terminal (docs/launching.md): ddprun's stdout and stderr go
  // on into `console_file` (a name in the private folder below; created new, 0600), which
  // --attach follows. Otherwise SIGHUP is passed to the policy as a stop signal.
  bool detach_on_hangup = false;
  std::string console_file;
  // ddprun's private folder for the console file and spills (the control folder, checked);
  // empty: a fresh one is made under `tmp_dir` (mkdtemp) when one is first needed.
  std::string private_dir;
  std::string tmp_dir = "/tmp";
  // --warm-spare (--restart-scope rank): a spare worker is kept started (once the round's
  // workers are, and `spare_delay` after each use, so that it never slows a recovery), and
  // a lost rank's replacement is that spare given the rank's environment
  // (ChildSet::start_standby) instead of a new process.
  bool warm_spare = false;
  std::chrono::milliseconds spare_delay{2000};
};

class ProcessRunner : public Runner {
 public:
  // `signals` and `guardian` must outlive the runner.
  ProcessRunner(SignalChannel& signals, Guardian& guardian, ProcessRunnerConfig config);
  // Drains the console (drain_console) when output still waits.
  ~ProcessRunner() override;
  ProcessRunner(const ProcessRunner&) = delete;
  ProcessRunner& operator=(const ProcessRunner&) = delete;

  RunnerClock::time_point now() const override { return RunnerClock::now(); }
  pid_t start(const ChildSpec& spec) override;
  void signal(std::size_t child, int signal_number) override;
  void announce(const NodeEvent& event) override;
  void set_stop_cause(const NodeEvent& cause) override { stop_cause_ = cause; }
  void publish_membership(const Membership& membership, bool whole, int node) override;
  void one_node_fewer_below(std::size_t child) override {
    if (specs_.at(child).control_nodes > 1) --specs_.at(child).control_nodes;
  }
  RunnerEvent wait(std::optional<RunnerClock::time_point> deadline) override;
  bool output_open() const override { return children_->output_open(); }
  void close_output() override { children_->close_output(events_); }
  std::vector<StackCapture> capture_stacks(const std::vector<std::size_t>& children) override;
  std::optional<long long> progress(std::size_t child) override;
  RankFiles rank_files(std::size_t child) override;
  std::optional<TraceSnapshot> trace(std::size_t child) override;
  std::deque<std::string> stderr_tail(std::size_t child) const override {
    return relay_->stderr_tail(child);
  }
  // Drains the console (keeping what it could not write for later), then says how many
  // lines of the round it left out.
  void end_round() override;
  std::vector<std::optional<double>> first_steps() const override;

  // ddprun's own messages (rank table, reports): they go to stderr through the console, in
  // order with the workers' lines and without waiting for a console that is not reading.
  std::ostream& messages() { return messages_; }
  // At the job's end: writes what waits for the console while it takes bytes, with
  // `console_final_stall` as the stall; what it still cannot take then is written to a new
  // file `spill_path` (a bare name: in the private folder, private_path) and a line names
  // it, so that no last line is lost without a word.
  // Returns the spill's path, or empty when nothing was spilled. Call before exit.
  std::string finish_console(const std::string& spill_path);
  // The first signal other than a notice that ddprun itself received (not one its head
  // sent as a message), or 0.
  int own_stop_signal() const noexcept { return own_signal_; }
  // The restarts spent when the round starts (as its run line counts them), for status
  // answers; the round's own replacements (--restart-scope rank) are added as they come.
  void set_restarts_spent(int spent) noexcept {
    restarts_spent_ = spent;
    round_replacements_ = 0;
  }
  // The control socket (-1: none): readable when a request waits.
  int control_fd() const noexcept {
    return config_.control != nullptr ? config_.control->fd() : -1;
  }
  // Between rounds, while the nodes gather (no round runs): answers one waiting request,
  // saying `gathering` (who joined, who is awaited) for --status and --stacks. Returns true
  // when it was --stop: the caller stops the job as on SIGTERM.
  bool serve_between_rounds(int round, const std::string& gathering);
  // On a node behind the rendezvous, once its exit report is sent: node 0's next words
  // (the next round's start) are the rendezvous's to read, not this runner's, while the
  // console drains; the heartbeat to node 0 goes on.
  void stop_reading_head() noexcept { config_.head_fd = -1; }
  // On such a node: sends `lines` to node 0 after whatever still waits for room in the
  // connection (LineOutbox), waiting until it is all taken (the round's exit report), or
  // until node 0 takes nothing for the heartbeat's silence: false then, and the wait for
  // the next round finds node 0 lost.
  bool tell_head(std::string_view lines) {
    return head_outbox_.send_waiting(config_.head_events_fd, lines,
                                     kLaunchersHeartbeat.silent_after);
  }
  // Whether SIGHUP has detached ddprun from its terminal.
  bool detached() const noexcept { return detached_; }
  // Tells every attached console (--attach) the job's exit code and lets it go.
  void release_attached(int exit_code);
  // Node 0 of per-node launchers under --restart-scope rank: where a lost node's ddprun
  // joins again during a round (a child started with ChildSpec::join_by awaits it). Must
  // outlive the runner's rounds; null: none.
  void set_round_joins(RoundJoins* joins) noexcept { joins_ = joins; }

 private:
  // Writes what waits for the console while it takes bytes, giving up after `stall`
  // without progress (or ProcessRunnerConfig::console_drain_limit in all, or an event).
  void drain_console(std::chrono::milliseconds stall);
  void start_fresh();  // a new child set and relay: children number from 0 again
  // --warm-spare: a replacement for a rank started before takes the spare (its index), when
  // one is ready; keep_spare starts one when it is due, and says once when one ended by itself.
  std::optional<std::size_t> take_spare(const ChildSpec& spec);
  void keep_spare();
  void show_first_steps();
  // One turn of the loop (ChildSet::wait_once) that also wakes for the fold's next
  // release and lets out what is due.
  void wait_once(std::optional<RunnerClock::time_point> deadline);
  void read_head();
  // The job's whole membership (this ddprun's own, or its head's): its workers' file, and
  // every agent that takes messages (an agent that cannot take it is a dead link: SIGKILL).
  void take_membership(const Membership& membership);
  // On a node behind the rendezvous: the heartbeat to node 0 when due, and, while its
  // messages are read, the head lost (its connection shut, so the wait for node 0's next
  // word ends too) when it was silent.
  bool head_heartbeat_on() const {
    return config_.heartbeat.on() && (config_.head_events_fd >= 0 || config_.head_beats_on_stdin);
  }
  void keep_head_heartbeat();
  // Every heartbeat this runner sends (to its nodes behind connections, to node 0), now.
  void send_heartbeats();
  // Control requests (control.h): from the socket, or (on an agent) from the head.
  void serve_control();
  // A status answer's header: the run, this ddprun, the restarts spent, the time up, the
  // console.
  JobStatus job_status() const;
  void answer_head(ControlVerb verb, int id);
  // This node's workers as a status answer shows them; with `stacks`, the running ones'
  // stacks (taken at once, nothing stopped) and every one's collective trace.
  std::vector<RankStatus> local_status(bool stacks);
  // Asks the agents that take control requests and returns their nodes' ranks (within a
  // bounded time); `notes` says which did not answer.
  std::vector<RankStatus> ask_agents(ControlVerb verb, std::vector<std::string>& notes);
  // Sends `message` to every live agent that takes control requests; returns how many
  // nodes will answer, and sets `unasked` when an agent takes none (mpirun).
  int tell_agents(const std::string& message, bool& unasked);
  std::vector<StackCapture> take_stacks(const std::vector<std::size_t>& children, bool keep);
  void detach();
  // `name` in ddprun's private folder (ProcessRunnerConfig::private_dir, or one made now);
  // a path with a slash is returned as it is. Throws std::system_error when no folder can
  // be made.
  std::string private_path(const std::string& name);

  SignalChannel& signals_;
  Guardian& guardian_;
  ProcessRunnerConfig config_;
  int own_signal_ = 0;
  std::unique_ptr<Console> console_;
  ConsoleMessages message_buffer_;
  std::ostream messages_;
  // An agent, or a node behind the rendezvous: its membership goes to its head (read at
  // the start: a head lost later does not make this node's part the job's whole).
  bool under_head_ = false;
  std::unique_ptr<ChildSet> children_;
  std::unique_ptr<OutputRelay> relay_;
  // What the runner keeps of each child's spec, numbered as the child set numbers them.
  struct Child {
    bool agent = false;
    int rank = -1;
    int node_rank = 0;
    std::string host;
    int control_nodes = 0;
    std::string python_stack_file;
    std::string stacks_log;
    std::string progress_file;
    std::string trace_file;
    std::string error_file;
    bool exited = false;
    int wait_status = 0;
  };
  std::vector<Child> specs_;
  // The round's DDPRUN_MEMBERSHIP_FILE (ChildSpec::membership_file); empty: none. Whether
  // writing it failed this round (said once).
  std::string membership_file_;
  bool membership_failed_ = false;
  // What this node last told its head, and its agents, of the membership (rank scope).
  std::optional<Membership> membership_reported_;
  std::optional<Membership> membership_sent_;
  int restarts_spent_ = 0;
  int round_replacements_ = 0;
  RunnerClock::time_point started_at_ = RunnerClock::now();
  bool serving_ = false;  // a request is being answered: the socket waits meanwhile
  int request_id_ = 0;
  std::vector<AgentAnswer> answers_;  // the agents' answers to request_id_
  bool detached_ = false;
  std::string console_path_;             // the console file, once detached into one
  std::string private_dir_;              // made or taken by private_path
  std::vector<UniqueFd> attached_;       // --attach connections, told the exit code at the end
  std::optional<NodeEvent> stop_cause_;  // this round's (set_stop_cause)
  std::deque<RunnerEvent> pending_;
  // The first round's watch on its workers' progress files (made at its first wait).
  std::optional<FirstSteps> first_steps_;
  bool first_steps_armed_ = false;
  bool first_round_ = true;
  RunnerClock::time_point round_started_at_;
  // --warm-spare: what the round's spare starts as (its first worker's spec, less its rank),
  // when the next is due, and whether the round gave up on spares (one ended by itself).
  std::optional<SpawnSpec> spare_spec_;
  std::optional<RunnerClock::time_point> spare_due_;
  bool spares_failed_ = false;
  RunnerClock::time_point spare_started_at_;
  std::string spare_note_;  // said at the next wait: the spare took a rank
  ChildEvents events_;
  // Children awaiting a lost node's ddprun (ChildSpec::join_by), by node rank, and the
  // descriptors the joins were watched on in the last turn.
  RoundJoins* joins_ = nullptr;
  std::map<int, std::size_t> awaiting_;
  std::vector<int> join_fds_;
  // The joins that came: each attached to the child that awaits its node.
  void take_joins(int fd);
  LineSplitter head_lines_{kMaxAgentLine};  // the membership over many nodes is one line
  LineOutbox head_outbox_;  // lines to node 0 (head_events_fd): never torn by a heartbeat
  HeartbeatWatch head_watch_{config_.heartbeat};  // the heartbeat with node 0
  PeerBeat head_beat_ = head_watch_.start(RunnerClock::now());
};

}  // namespace ddprun
