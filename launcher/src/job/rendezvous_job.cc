#include "job/rendezvous_job.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <memory>

#include "ddprun/common/printable.h"
#include "ddprun/common/signal_name.h"
#include "ddprun/contract/errors.h"
#include "job/round_setup.h"
#include "nodes/rendezvous_secret.h"
#include "plan/plan.h"
#include "plan/rank_environment.h"

namespace ddprun {

std::string rendezvous_address(const std::vector<std::string>& master_addresses,
                               const std::vector<NetworkInterface>& interfaces) {
  for (const std::string& address : master_addresses) {
    if (address.find(':') != std::string::npos) continue;  // the listener is IPv4
    for (const NetworkInterface& interface : interfaces) {
      if (interface.address == address) return address;
    }
  }
  return "";
}

std::chrono::milliseconds rendezvous_join_timeout(const Options& options) {
  return std::chrono::milliseconds(
      static_cast<long long>(options.rdzv_conf.join_timeout_s.value_or(600.0) * 1000.0));
}

void open_rendezvous(std::optional<RendezvousHost>& host, const Options& options,
                     const PlanInputs& inputs, const Environment& env, int launchers_port) {
  const RendezvousSecret secret = rendezvous_secret(env, true);
  std::cerr << secret.warning;
  const SystemServices services = system_services(env);
  host.emplace(
      launchers_port, inputs.run_id, secret.secret, static_cast<int>(inputs.cluster.nodes.size()),
      this_node_nproc(options, inputs, env),
      rendezvous_address(services.resolve_host(inputs.master_addr), services.network_interfaces()));
  host->set_restart_scope(options.restart_scope == RestartScope::kRank ? "rank" : "job");
  host->set_max_restarts(options.max_restarts);
}

void gather_into_round(RoundSetup& setup, RendezvousHost& host, int round, int workers_port,
                       const Options& options, SignalChannel& signals, ProcessRunner& runner,
                       bool hangup_detaches, RejoinsDuringRound* rejoins) {
  const auto serve = [&](const std::string& gathering) {
    return runner.serve_between_rounds(round, gathering);
  };
  if (auto end =
          gather_nodes(host, round, RendezvousClock::now() + rendezvous_join_timeout(options),
                       signals, options.signals_to_handle, hangup_detaches, runner.messages(),
                       runner.control_fd(), serve)) {
    setup.end_code = end->code;
    setup.end_message = std::move(end->message);
    return;
  }
  add_peer_nodes(setup, host, round, workers_port);
  if (rejoins != nullptr) {
    rejoins->begin_round(round, workers_port);
    setup.spares = rejoins->places(rendezvous_join_timeout(options));
  }
}

namespace {

// Node 0's child for `peer` in `round`: its connection, whose first line starts the round.
ChildSpec peer_child(JoinedPeer& peer, RendezvousHost& host, int round, int workers_port,
                     bool replaces) {
  ChildSpec node;
  node.agent = true;
  node.node_rank = peer.join.node_rank;
  node.host = printable(peer.join.host, 64);  // the network's word: escaped for the console
  node.hello = format_round_start({round, workers_port, peer.join.node_rank, replaces});
  node.connection = peer.socket.get();
  node.connection_line_end = [&peer, &host](std::string& line) {
    return peer_round_line(peer, line, host.gathering());
  };
  node.connection_max_line = kMaxPeerLine;
  node.control_nodes = 1;  // --status and --stacks reach the node on its connection
  host.gathering().on(GatherEvent::of(GatherEvent::Kind::kRoundStarted, peer.join.node_rank));
  return node;
}

}  // namespace

SpareNodes RejoinsDuringRound::places(std::chrono::milliseconds window) {
  return [this, window](int node) -> std::optional<SpareNode> {
    for (const JoinedPeer* peer : host_.peers()) {
      if (peer->join.node_rank != node) continue;
      SpareNode place;
      place.again = true;
      place.agent.agent = true;
      place.agent.node_rank = node;
      place.agent.host = printable(peer->join.host, 64);
      place.agent.control_nodes = 1;
      place.agent.join_by = RunnerClock::now() + window;
      // The spare that will take it: behind those promised to places still awaited.
      place.waiting_spare = host_.spare_host(host_.awaited_count());
      return place;
    }
    return std::nullopt;
  };
}

std::vector<ChildSpec> RejoinsDuringRound::take(int fd) {
  std::vector<ChildSpec> joined;
  for (const int node : host_.serve_round_joins(fd, log_)) {
    for (JoinedPeer* peer : host_.peers()) {
      if (peer->join.node_rank == node) {
        joined.push_back(peer_child(*peer, host_, round_, workers_port_, /*replaces=*/true));
      }
    }
  }
  return joined;
}

SecretSource secret_read_once(const Environment& env) {
  auto secret = std::make_shared<std::optional<std::string>>();
  return [secret, &env] {
    if (!*secret) {
      const RendezvousSecret found = rendezvous_secret(env, false);
      std::cerr << found.warning;
      *secret = found.secret;
    }
    return **secret;
  };
}

int this_node_nproc(const Options& options, const PlanInputs& inputs, const Environment& env) {
  const LaunchPlan plan = build_plan(plan_options(options), inputs, env);
  return plan.nodes.at(static_cast<std::size_t>(plan.this_node)).nproc;
}

void add_peer_nodes(RoundSetup& setup, RendezvousHost& host, int round, int workers_port) {
  const auto peers = host.peers();
  for (JoinedPeer* peer : peers) {
    setup.children.push_back(peer_child(*peer, host, round, workers_port, /*replaces=*/false));
  }
  if (!peers.empty()) {
    // The start-up's rendezvous phase, once: how long the nodes took to come, and the last.
    std::string came;
    if (round == 0) {
      const JoinedPeer* last = *std::max_element(
          peers.begin(), peers.end(),
          [](const JoinedPeer* a, const JoinedPeer* b) { return a->joined_at < b->joined_at; });
      char seconds[32];
      std::snprintf(
          seconds, sizeof seconds, "%.2f s",
          std::chrono::duration<double>(last->joined_at - host.listening_since()).count());
      came = " within " + std::string(seconds) + " (the last: node " +
             std::to_string(last->join.node_rank) + ", " + printable(last->join.host, 64) + ")";
    }
    setup.summary +=
        "ddprun: " + std::to_string(peers.size()) + " other node(s) joined round " +
        std::to_string(round) + came + "; their workers get master port " +
        std::to_string(workers_port) +
        (host.refused() > 0 ? "; " + std::to_string(host.refused()) + " refused connection(s)"
                            : std::string()) +
        "\n";
  }
}

std::optional<GatherEnd> gather_nodes(RendezvousHost& host, int round,
                                      RendezvousClock::time_point deadline, SignalChannel& signals,
                                      const std::vector<int>& extra, bool hangup_detaches,
                                      std::ostream& log, int control_fd,
                                      const ServeBetweenRounds& serve) {
  Gathering& gathering = host.gathering();
  for (;;) {
    NodeEvent ended;
    const auto gathered = host.gather(round, deadline, signals.fd(), log, ended, control_fd);
    if (gathered == RendezvousHost::Gathered::kInterrupted) {
      // The job's handle first: a --stop decides before a signal read after it.
      if (pollfd request{control_fd, POLLIN, 0}; serve && ::poll(&request, 1, 0) > 0) {
        if (serve(host.describe())) gathering.on(GatherEvent::of(GatherEvent::Kind::kControlStop));
      }
      if (const auto event = signal_event(signals.read_signal(), hangup_detaches, extra)) {
        gathering.on(*event);
      }
    }
    const GatherVerdict verdict = gathering.verdict();
    if (verdict.kind == GatherVerdict::Kind::kEnd) {
      host.end_job({verdict.code, verdict.why});  // every connected node exits as this one
      return GatherEnd{verdict.code, verdict.message};
    }
    if (gathered == RendezvousHost::Gathered::kAllJoined) {
      if (verdict.hung_up) ::raise(SIGHUP);  // blocked: pending again, for the round's runner
      return std::nullopt;
    }
  }
}

int run_peer_job(const PeerJob& job, int launchers_port, const SecretSource& secret,
                 std::chrono::milliseconds join_timeout, SignalChannel& signals, Guardian& guardian,
                 const std::string& spill_path) {
  const std::string where = job.inputs.master_addr + ":" + std::to_string(launchers_port);
  int node = job.inputs.rank_by_arrival ? -1 : *job.inputs.cluster.this_node;
  bool hung_up = false;  // a SIGHUP while waiting, with detach_on_hangup: for the round
  int stop = 0;
  bool spare = false;          // it waits as a spare
  bool noticed_spare = false;  // a notice came then: it leaves the line, drained
  // Signals outside a round: a stop ends this node and, through node 0, the job; a notice
  // goes to node 0, which ends the job drained; a SIGHUP that detaches is kept for the
  // round's runner.
  const OnInterrupt on_interrupt = [&] {
    PeerInterrupt what;
    // Read as node 0 reads its own while the nodes gather (signal_event).
    const auto event = signal_event(signals.read_signal(), job.runner_config.detach_on_hangup,
                                    job.options.signals_to_handle);
    if (!event) return what;
    if (event->kind == GatherEvent::Kind::kHangup) {
      hung_up = true;
      return what;
    }
    const bool stops = event->kind == GatherEvent::Kind::kStopSignal;
    if (stops) stop = event->signal;
    // A spare's notice (its node is going away) ends its wait, not the job: node 0 takes any
    // word from a spare as its leaving.
    noticed_spare = spare && !stops;
    what.stop = stops || noticed_spare;
    what.tell = signal_node_event(event->signal, stops, std::max(node, 0));
    return what;
  };
  JoinRequest join;
  join.run_id = job.inputs.run_id;
  join.node_rank = node;
  join.host = job.inputs.host.hostname;
  join.nnodes = static_cast<int>(job.inputs.cluster.nodes.size());
  join.nproc = this_node_nproc(job.options, job.inputs, job.env);
  join.restart_scope = job.options.restart_scope == RestartScope::kRank ? "rank" : "job";
  join.max_restarts = job.options.max_restarts;
  const UniqueFd socket =
      join_host(job.inputs.master_addr, launchers_port, join, secret,
                RendezvousClock::now() + join_timeout, signals.fd(), on_interrupt);
  if (!socket.valid()) return 128 + stop;
  std::optional<int> last;  // the last round's code
  // Round 0 comes once every node has joined; later ones once node 0 has decided.
  std::optional<RendezvousClock::time_point> deadline =
      RendezvousClock::now() + join_timeout + std::chrono::seconds(2);
  for (;;) {
    const auto word = wait_for_host(socket.get(), where, deadline, signals.fd(), on_interrupt);
    deadline.reset();
    // A stop while node 0 decides after a failed round (Slurm 26.05 sends SIGTERM to every
    // task once one ended badly) keeps that round's code, the cause node 0 named.
    if (!word && stop != 0) return last && *last != 0 ? *last : 128 + stop;
    if (!word && noticed_spare) {
      std::cerr << "ddprun: a notice while this node waited as a spare: it leaves the line, "
                   "having run nothing\n";
      return kExitPreempted;
    }
    if (!word && !last) {
      throw ConfigError("node 0's ddprun at " + where + " closed the connection before " +
                            (spare ? "this spare node ran a round" : "round 0"),
                        "it refused this node's join or ended: node 0's output says why");
    }
    if (!word) return *last;  // node 0 is gone
    if (word->spare) {
      // Every place was taken: node 0 keeps this connection (its heartbeat both ways) and
      // sends the round start that places it when a node is lost, for as long as the job runs.
      std::cerr << "ddprun: every node's place in the job is taken: this node waits as spare "
                << *word->spare << " for a lost node's place (--restart-scope rank)\n";
      spare = true;
      continue;
    }
    if (word->end) {
      if (!word->end->why.empty()) {
        std::cerr << "ddprun: node 0 ended the job: " << word->end->why << "\n";
      } else if (spare && !last) {
        std::cerr << "ddprun: the job ended (exit code " << word->end->code
                  << ") while this node waited as a spare: it ran nothing\n";
      }
      return word->end->code;
    }
    const RoundStart& start = *word->start;
    spare = false;                 // a node of the job from now on
    if (hung_up) ::raise(SIGHUP);  // blocked: pending again, for the round's runner
    hung_up = false;
    RoundState state = first_round_state(job.inputs);
    if (start.node_rank != *job.inputs.cluster.this_node) {
      // Placed by node 0 (by host name; the same place in every round).
      if (!job.inputs.rank_by_arrival ||
          start.node_rank >= static_cast<int>(job.inputs.cluster.nodes.size())) {
        throw ConfigError("node 0's ddprun placed this node at rank " +
                          std::to_string(start.node_rank) + ", not " +
                          std::to_string(*job.inputs.cluster.this_node));
      }
      Cluster placed = job.inputs.cluster;
      place_by_hand_node(placed, job.inputs.master_addr, job.inputs.host.hostname, start.node_rank);
      state.nodes = std::move(placed.nodes);
      state.this_node = placed.this_node;
    }
    node = start.node_rank;
    state.master_port = start.master_port;
    state.fixed_port = true;  // node 0's choice for this round
    ProcessRunnerConfig config = job.runner_config;
    config.head_fd = socket.get();
    config.head_events_fd = socket.get();
    ProcessRunner runner(signals, guardian, config);
    runner.set_restarts_spent(start.round);  // as this round's run line counts them
    JobSettings settings = job.settings;
    settings.agent = true;  // one round: node 0 decides on the next
    // Joined during the round in this node's lost place: its workers are replacements, which
    // wait for the membership that names them (as on a spare over ssh, --agent-replaces).
    Options options = job.options;
    options.agent_replaces = start.replaces;
    settings.round.starts_replacements = start.replaces;
    if (start.replaces) {
      runner.messages()
          << "ddprun: joined round " << start.round << " as node " << node
          << " in its lost place: its ranks start as replacements (DDPRUN_REPLACEMENT=1)\n";
    }
    // --restart-scope rank: this node replaces its own ranks; node 0 keeps the budget.
    settings.max_restarts = std::max(0, job.options.max_restarts - start.round);
    settings.round.node_rank = node;
    int code = 0;
    try {
      code = run_job(
          runner, settings,
          [&](int, const RoundResult*) {
            return prepare_round(options, job.inputs, state, job.env, start.round, nullptr,
                                 job.program_path, job.self);
          },
          runner.messages());
    } catch (const Error& e) {
      // Node 0 names this node's own error, and stops every node without a restart.
      NodeEvent failed;
      failed.kind = NodeEvent::Kind::kSetupFailed;
      failed.node = node;
      failed.code = e.exit_code();
      failed.what = e.what();
      runner.announce(failed);
      (void)runner.tell_head(format_exit_report(e.exit_code()));
      throw;
    }
    (void)runner.tell_head(format_exit_report(code));
    // Node 0's next round start may come while the console drains: it is wait_for_host's.
    runner.stop_reading_head();
    runner.finish_console(start.round == 0 ? spill_path
                                           : spill_path + "." + std::to_string(start.round));
    last = code;
    if (const int sig = runner.own_stop_signal();
        sig != 0 && is_stop_signal(sig, job.options.signals_to_handle)) {
      return code;  // told to stop here (node 0 heard at once): never another round
    }
  }
}

}  // namespace ddprun
