#pragma once
// The rounds of one ddprun per node that meet its peers (rendezvous.h): node 0 gathers the
// nodes before every round and adds a relay child for each; every other node joins once,
// runs each round as the host's agent would, reports its events and exit code, and ends
// with the job's code when node 0 says so.

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "cli/options.h"
#include "job/job_inputs.h"
#include "nodes/rendezvous.h"
#include "policy/supervision.h"
#include "run/process.h"
#include "run/process_runner.h"
#include "run/round_joins.h"

namespace ddprun {

// Where node 0's ddprun listens for the others: the master address (as it resolves,
// `master_addresses`) when that is an IPv4 address of one of this host's `interfaces`, the
// one the other nodes reach it by; else every interface (empty), as the master may be a
// name this host does not know as its own (a NAT, a load balancer, an IPv6 address).
std::string rendezvous_address(const std::vector<std::string>& master_addresses,
                               const std::vector<NetworkInterface>& interfaces);

// Node 0 before `round`: waits until every other node is connected (RendezvousHost::gather)
// until `deadline`. Returns nullopt when they are; otherwise the job ends before the round,
// with the code and message returned: a stop signal here or on a node (128 + it), or a
// notice here or on a node (75: the job is requeued and resumes from its last checkpoint).
// Every connected node is told. With `hangup_detaches` (ProcessRunnerConfig::detach_on_hangup),
// a SIGHUP meanwhile is raised again once the nodes are in, for the round's runner to
// detach on. The job handle answers meanwhile: `serve` (with `control_fd`, -1: none) is
// called when a request waits, with who joined and who is awaited, and returns true for a
// --stop, which ends the job as SIGTERM does. Throws what gather throws.
struct GatherEnd {
  int code = 0;
  std::string message;
};
using ServeBetweenRounds = std::function<bool(const std::string& gathering)>;
std::optional<GatherEnd> gather_nodes(RendezvousHost& host, int round,
                                      RendezvousClock::time_point deadline, SignalChannel& signals,
                                      const std::vector<int>& extra, bool hangup_detaches,
                                      std::ostream& log, int control_fd = -1,
                                      const ServeBetweenRounds& serve = {});

// How many workers this node runs (its --nproc-per-node, resolved): every node must run
// as many.
int this_node_nproc(const Options& options, const PlanInputs& inputs, const Environment& env);

// Node 0: adds to `setup` one agent child per connected node, its connection (no process:
// ChildSet::connect), whose first message is the round's start; the summary names the
// connections refused so far.
void add_peer_nodes(RoundSetup& setup, RendezvousHost& host, int round, int workers_port);

// Node 0 under --restart-scope rank: a lost node's ddprun started again joins the running
// round in its place (RendezvousHost::await_in_round); what joined becomes the connection
// child that awaits it (ProcessRunner::set_round_joins), its round start saying `replaces`.
class RejoinsDuringRound final : public RoundJoins {
 public:
  RejoinsDuringRound(RendezvousHost& host, std::ostream& log) : host_(host), log_(log) {}
  // The round now running, and its workers' master port.
  void begin_round(int round, int workers_port) {
    round_ = round;
    workers_port_ = workers_port;
    host_.begin_round_joins(round);
  }
  // Where a lost node's ranks go on (Round::move_node): its own place, awaited for `window`.
  SpareNodes places(std::chrono::milliseconds window);

  void await(int node) override { host_.await_in_round(node, round_); }
  void forget(int node) override { host_.forget_in_round(node); }
  void watch(std::vector<int>& fds) const override { host_.round_join_fds(fds); }
  std::optional<RunnerClock::time_point> due() const override { return host_.round_join_due(); }
  std::vector<ChildSpec> take(int fd) override;

 private:
  RendezvousHost& host_;
  std::ostream& log_;
  int round_ = 0;
  int workers_port_ = 0;
};

// How long the nodes may take to come before a round (--rdzv-conf join_timeout, 600 s).
std::chrono::milliseconds rendezvous_join_timeout(const Options& options);

// Node 0: opens the launchers' rendezvous in `host`, on the launchers' own port (the
// agreed master port: the workers get another one every round), asking every node to
// prove the job's token (rendezvous_secret, made here when none is given).
void open_rendezvous(std::optional<RendezvousHost>& host, const Options& options,
                     const PlanInputs& inputs, const Environment& env, int launchers_port);

// Node 0 before `round`: gathers the other nodes (gather_nodes, for `options`'
// join_timeout) while `runner` answers the job's handle, then adds them to `setup` with
// the round's `workers_port` (add_peer_nodes); a job that ends meanwhile is `setup`'s end.
// With `rejoins` (--restart-scope rank with restarts), a node lost during the round may join
// it again, within the join timeout.
void gather_into_round(RoundSetup& setup, RendezvousHost& host, int round, int workers_port,
                       const Options& options, SignalChannel& signals, ProcessRunner& runner,
                       bool hangup_detaches, RejoinsDuringRound* rejoins = nullptr);

// Another node: the job's token, read once, when node 0 first answers (node 0 makes the
// token file before it listens); a warning when there is none goes to stderr.
SecretSource secret_read_once(const Environment& env);

// What a peer's rounds need from main.
struct PeerJob {
  const Options& options;
  const PlanInputs& inputs;
  const Environment& env;
  const std::string& program_path;
  const std::string& self;
  const JobSettings& settings;
  const ProcessRunnerConfig& runner_config;
};

// Another node: joins node 0's rendezvous on `launchers_port`, runs each round node 0 starts
// (signals from node 0 arrive on the connection), reports its events at once and its exit
// code at each round's end, until node 0 ends the job. Returns ddprun's exit code: the
// job's as node 0 gives it, 128 + a stop signal ddprun itself received, or the last
// round's when node 0 is gone. Throws ConfigError when node 0 never answers, refuses, or
// does not prove `secret` (join_host).
int run_peer_job(const PeerJob& job, int launchers_port, const SecretSource& secret,
                 std::chrono::milliseconds join_timeout, SignalChannel& signals, Guardian& guardian,
                 const std::string& spill_path);

}  // namespace ddprun
