#pragma once
// The rounds of one ddprun per node that meet its peers (rendezvous.h): node 0 adds a relay
// child for every peer that joined a round; every other node joins each round, runs it as
// the host's agent would, and reports its exit code.

#include <chrono>
#include <string>
#include <vector>

#include "cli/options.h"
#include "job/job_inputs.h"
#include "nodes/rendezvous.h"
#include "run/job.h"
#include "run/process.h"
#include "run/process_runner.h"

namespace ddprun {

// Where a site keeps the rendezvous' shared secret: the same value on every node (srun
// and mpirun pass the environment on); joins without it are refused.
inline constexpr const char* kRendezvousTokenVariable = "DDPRUN_RDZV_TOKEN";

// Node 0: waits for the other nodes to join `round` (RendezvousHost::gather) until
// `deadline`. A stop signal meanwhile ends the wait: it is raised again, so that the round
// (which then starts with this node's workers alone) stops at once; other signals (a
// child's end, a notice) do not. Throws what gather throws.
// With `hangup_detaches` (ProcessRunnerConfig::detach_on_hangup), a SIGHUP meanwhile does not
// stop the gathering: it is raised again once the peers are in, for the round's runner to
// detach on.
std::vector<JoinedPeer> gather_peers(RendezvousHost& host, int round,
                                     RendezvousClock::time_point deadline, SignalChannel& signals,
                                     const std::vector<int>& extra, bool hangup_detaches,
                                     std::ostream& log);

// Node 0: adds to `setup` one relay child per joined peer (`self --peer-relay`, the
// peer's socket as its descriptor 3), whose first message is the round's start.
void add_peer_relays(RoundSetup& setup, const std::vector<JoinedPeer>& peers, int round,
                     int master_port, const std::string& self, const Environment& env);

// What a peer's rounds need from main.
struct PeerJob {
  const Options& options;
  PlanInputs& inputs;
  const Environment& env;
  const std::string& program_path;
  const std::string& self;
  const JobSettings& settings;
  const ProcessRunnerConfig& runner_config;
};

// Another node: joins node 0's rendezvous on `port` before every round, runs the round
// (signals from node 0 arrive on the connection), reports its exit code, and joins the
// next, until node 0 ends the job. Returns ddprun's exit code: the last round's, or 128 +
// a stop signal ddprun itself received. Throws ConfigError when node 0 never answers.
int run_peer_job(const PeerJob& job, int port, const std::string& token,
                 std::chrono::milliseconds join_timeout, SignalChannel& signals, Guardian& guardian,
                 const std::string& spill_path);

}  // namespace ddprun
