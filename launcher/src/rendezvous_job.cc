#include "rendezvous_job.h"

#include <sys/socket.h>

#include <algorithm>
#include <csignal>

#include "ddprun/contract/errors.h"
#include "rank_environment.h"
#include "round_setup.h"

namespace ddprun {

void add_peer_relays(RoundSetup& setup, const std::vector<JoinedPeer>& peers, int round,
                     int master_port, const std::string& self, const Environment& env) {
  for (const JoinedPeer& peer : peers) {
    ChildSpec relay;
    relay.agent = true;
    relay.node_rank = peer.join.node_rank;
    relay.host = peer.join.host;
    relay.path = self;
    relay.argv = {self, "--peer-relay"};
    relay.env = merge_environment(env, {});
    relay.hello = format_round_start({round, master_port, peer.join.node_rank});
    relay.fd3 = peer.socket.get();
    setup.children.push_back(std::move(relay));
  }
  if (!peers.empty()) {
    setup.summary += "ddprun: " + std::to_string(peers.size()) + " other node(s) joined round " +
                     std::to_string(round) + "; their workers get master port " +
                     std::to_string(master_port) + "\n";
  }
}

std::vector<JoinedPeer> gather_peers(RendezvousHost& host, int round,
                                     RendezvousClock::time_point deadline, SignalChannel& signals,
                                     const std::vector<int>& extra, std::ostream& log) {
  for (;;) {
    auto joined = host.gather(round, deadline, signals.fd(), log);
    if (joined) return std::move(*joined);
    const int sig = signals.read_signal();
    if (sig != 0 && is_stop_signal(sig, extra)) {
      ::raise(sig);  // blocked: pending again, for the round
      return {};
    }
  }
}

int run_peer_job(const PeerJob& job, int port, const std::string& token,
                 std::chrono::milliseconds join_timeout, SignalChannel& signals, Guardian& guardian,
                 const std::string& spill_path) {
  int last = 0;
  for (int round = 0;; ++round) {
    JoinRequest join;
    join.run_id = job.inputs.run_id;
    join.token = token;
    join.node_rank = job.inputs.rank_by_arrival && round == 0 ? -1 : *job.inputs.cluster.this_node;
    join.round = round;
    join.host = job.inputs.host.hostname;
    std::optional<PeerRound> peer;
    for (;;) {
      peer = join_round(job.inputs.master_addr, port, join, RendezvousClock::now() + join_timeout,
                        signals.fd());
      if (peer) break;
      // A signal, or node 0 ended the job.
      const int sig = signals.read_signal();
      if (sig == 0) return last;
      if (is_stop_signal(sig, job.options.signals_to_handle)) return 128 + sig;
    }
    if (peer->start.node_rank != *job.inputs.cluster.this_node) {
      // Placed by order of arrival (the same place for every later round).
      if (!job.inputs.rank_by_arrival ||
          peer->start.node_rank >= static_cast<int>(job.inputs.cluster.nodes.size())) {
        throw ConfigError("node 0's ddprun placed this node at rank " +
                          std::to_string(peer->start.node_rank) + ", not " +
                          std::to_string(*job.inputs.cluster.this_node));
      }
      place_by_hand_node(job.inputs.cluster, job.inputs.master_addr, job.inputs.host.hostname,
                         peer->start.node_rank);
    }
    RoundState state = first_round_state(job.inputs);
    state.master_port = peer->start.master_port;
    state.fixed_port = true;  // node 0's choice for this round
    ProcessRunnerConfig config = job.runner_config;
    config.head_fd = peer->socket.get();
    ProcessRunner runner(signals, guardian, config);
    JobSettings settings = job.settings;
    settings.agent = true;  // one round: node 0 decides on the next
    settings.max_restarts = 0;
    const int code = run_job(
        runner, settings,
        [&](int, const RoundResult*) {
          return prepare_round(job.options, job.inputs, state, job.env, peer->start.round, nullptr,
                               job.program_path, job.self);
        },
        runner.messages());
    const std::string report = format_exit_report(code);
    (void)::send(peer->socket.get(), report.data(), report.size(), MSG_NOSIGNAL);
    runner.finish_console(round == 0 ? spill_path : spill_path + "." + std::to_string(round));
    last = code;
    if (const int sig = runner.own_stop_signal();
        sig != 0 && is_stop_signal(sig, job.options.signals_to_handle)) {
      return code;  // told to stop here: never join another round
    }
  }
}

}  // namespace ddprun
