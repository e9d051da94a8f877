#include "job/rendezvous_job.h"

#include <sys/socket.h>

#include <algorithm>
#include <csignal>

#include "ddprun/contract/errors.h"
#include "job/round_setup.h"
#include "plan/rank_environment.h"

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
                                     const std::vector<int>& extra, bool hangup_detaches,
                                     std::ostream& log) {
  bool hung_up = false;
  for (;;) {
    auto joined = host.gather(round, deadline, signals.fd(), log);
    if (joined) {
      if (hung_up) ::raise(SIGHUP);  // blocked: pending again, for the round's runner
      return std::move(*joined);
    }
    const int sig = signals.read_signal();
    if (sig == SIGHUP && hangup_detaches) {
      hung_up = true;  // a closed terminal: the job goes on
      continue;
    }
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
  bool hung_up = false;  // a SIGHUP while joining, with detach_on_hangup: for the round
  for (int round = 0;; ++round) {
    JoinRequest join;
    join.run_id = job.inputs.run_id;
    join.token = token;
    join.node_rank = job.inputs.rank_by_arrival && round == 0 ? -1 : *job.inputs.cluster.this_node;
    join.round = round;
    join.host = job.inputs.host.hostname;
    // Signals while joining: a stop ends the job here; a SIGHUP that detaches is kept for
    // the round's runner; anything else (a notice, a child's end) leaves the join waiting.
    int stop = 0;
    const auto on_interrupt = [&] {
      const int sig = signals.read_signal();
      if (sig == SIGHUP && job.runner_config.detach_on_hangup) {
        hung_up = true;
        return true;
      }
      if (sig != 0 && is_stop_signal(sig, job.options.signals_to_handle)) {
        stop = sig;
        return false;
      }
      return true;
    };
    std::optional<PeerRound> peer =
        join_round(job.inputs.master_addr, port, join, RendezvousClock::now() + join_timeout,
                   signals.fd(), on_interrupt);
    if (!peer) return stop != 0 ? 128 + stop : last;  // stopped, or node 0 ended the job
    if (hung_up) ::raise(SIGHUP);  // blocked: pending again, for the round's runner
    hung_up = false;
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
