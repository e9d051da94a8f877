// The round's starts, replacements and events (round.h has the state machine).
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <string>

#include "ddprun/common/signal_name.h"
#include "ddprun/contract/env_names.h"
#include "ddprun/contract/errors.h"
#include "policy/round.h"
#include "report/labels.h"

namespace ddprun {
namespace {

bool is_notice_signal(int sig) {
  return sig == SIGUSR1 || sig == SIGUSR2;
}

// The exit code a child's end gives the job: its own, or 128 + its signal.
int code_of(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return 1;
}

}  // namespace

// "15 s", "0.5 s".
std::string format_seconds(std::chrono::milliseconds span) {
  const long long ms = span.count();
  std::string text = std::to_string(ms / 1000);
  if (ms % 1000 != 0) {
    std::string fraction = std::to_string(1000 + ms % 1000).substr(1);
    while (fraction.back() == '0') fraction.pop_back();
    text += "." + fraction;
  }
  return text + " s";
}

RoundResult Round::run(const std::vector<ChildSpec>& children) {
  specs_ = &children;
  ranks_.reserve(children.size());
  const auto spawn_start = runner_.now();
  try {
    for (std::size_t i = 0; i < children.size(); ++i) {
      RankResult& rank = add_child(i);
      rank.pid = runner_.start(children[i]);
      rank.started = true;
      rank.replacement = policy_.starts_replacements && !rank.agent;
    }
  } catch (...) {
    kill_live();
    wait_for_all();
    runner_.end_round();
    throw;
  }
  spawn_seconds_ = seconds_since(spawn_start);
  if (rank_scope()) publish({});
  wait_for_all();
  RoundResult result = finish();
  runner_.end_round();
  return result;
}

RankResult& Round::add_child(std::size_t spec_index) {
  const ChildSpec& spec = this->spec(spec_index);
  RankResult& rank = ranks_.emplace_back();
  rank.agent = spec.agent;
  rank.node_rank = spec.node_rank;
  rank.rank = spec.rank;
  rank.local_rank = spec.local_rank;
  rank.host = spec.host;
  rank.error_file = spec.error_file;
  rank.progress_file = spec.progress_file;
  reported_.emplace_back();
  spec_of_.push_back(spec_index);
  started_at_.push_back(runner_.now());
  return rank;
}

void Round::drop_last_child() {
  ranks_.pop_back();
  reported_.pop_back();
  spec_of_.pop_back();
  started_at_.pop_back();
}

int Round::remote_recoveries() const {
  int sum = 0;
  for (const auto& [node, part] : parts_) sum += part.recoveries;
  return sum;
}

void Round::publish(std::string change) {
  Membership membership;
  membership.version = ++membership_version_;
  membership.recoveries = recoveries_ + remote_recoveries();
  membership.change = std::move(change);
  // Whole once every node behind an agent (its ssh subtree: control_nodes) has said who
  // runs there.
  std::size_t nodes_behind = 0;
  for (std::size_t i = 0; i < std::min(specs_->size(), ranks_.size()); ++i) {
    if (one_node_agent(i))
      nodes_behind += static_cast<std::size_t>(std::max(1, (*specs_)[i].control_nodes));
  }
  const bool whole = parts_.size() >= nodes_behind;  // and each node's once (below)
  for (const auto& [node, part] : parts_) {
    membership.ranks.insert(membership.ranks.end(), part.ranks.begin(), part.ranks.end());
  }
  for (std::size_t i = 0; i < std::min(specs_->size(), ranks_.size()); ++i) {
    if (ranks_[i].agent) continue;
    std::size_t last = i;
    while (ranks_[last].replaced_by) last = *ranks_[last].replaced_by;
    const RankResult& child = ranks_[last];
    Membership::Member& member = membership.ranks.emplace_back();
    member.rank = child.rank;
    member.pid = child.pid;
    if (!child.exited) {
      member.state = child.replacement ? Membership::State::kReplaced : Membership::State::kRunning;
    } else {
      member.state =
          exited_with(child.wait_status, 0) ? Membership::State::kDone : Membership::State::kLost;
    }
  }
  std::sort(membership.ranks.begin(), membership.ranks.end(),
            [](const auto& a, const auto& b) { return a.rank < b.rank; });
  // Ranks 0..N-1 once each, or the workers could not read it: then it waits for more.
  bool contiguous = true;
  for (std::size_t i = 0; i < membership.ranks.size(); ++i) {
    contiguous = contiguous && membership.ranks[i].rank == static_cast<int>(i);
  }
  runner_.publish_membership(membership, whole && contiguous, policy_.node_rank);
}

void Round::on_membership(std::size_t child, int node, Membership part) {
  if (!rank_scope() || !ranks_.at(child).agent || node == policy_.node_rank) return;
  if (ranks_[child].replaced_by) return;  // a lost node's last words: a spare stands for it
  if (const auto moved = moved_below_.find(node); moved != moved_below_.end()) {
    if (moved->second != child) return;  // through the agent that handed it up: stale
  }
  // A node's replacements only add up within a round: a late or reordered part counts no less.
  if (const auto was = parts_.find(node); was != parts_.end()) {
    part.recoveries = std::max(part.recoveries, was->second.recoveries);
  }
  parts_[node] = std::move(part);
  if (recoveries_left() < 0 && phase_ == Phase::kRunning && escalation_ != Escalation::kKilled) {
    // Each node replaces its own ranks at once; the job's budget is the head's to keep.
    const int budget = recoveries_left_ + recoveries_;
    not_replaced_ = "node " + std::to_string(node) + " replaced a lost rank beyond the round's " +
                    std::to_string(budget) +
                    " restart(s) left (--max-restarts, counted over every node)";
    NodeEvent event;
    event.node = node;
    event.code = 1;
    event.what = "node " + std::to_string(event.node) + " lost a rank with no restarts left";
    reported_[child] = event;
    fail(child, /*stop_its_node=*/true);  // it goes on by itself: the head stops it
    return;
  }
  publish({});  // its node said its own change on its console
}

bool Round::replace(std::size_t child) {
  if (notice_seen_ != 0 || recoveries_left() <= 0) return false;  // a notice: the round drains
  const std::string name = "rank " + std::to_string(ranks_[child].rank);
  const std::string how = describe_wait_status(ranks_[child].wait_status);
  if (ranks_[child].replacement) {
    const auto ran =
        std::chrono::duration_cast<std::chrono::milliseconds>(runner_.now() - started_at_[child]);
    if (ran < policy_.recovery_window) {
      not_replaced_ = name + "'s replacement " + how + " " + format_seconds(ran) +
                      " after its start, during its recovery (the first " +
                      format_seconds(policy_.recovery_window) + ")";
      return false;
    }
  }
  const pid_t lost_pid = ranks_[child].pid;
  const std::size_t index = ranks_.size();
  add_child(spec_of_[child]).replacement = true;
  try {
    // A replacement from its first instant: it waits for the membership that names it, also
    // where none was written yet (a node not yet heard from as the round began).
    ChildSpec started = spec(spec_of_[child]);
    started.env.push_back(std::string(env::kDdprunReplacement) + "=1");
    ranks_[index].pid = runner_.start(started);
  } catch (const std::exception& e) {
    drop_last_child();
    not_replaced_ = name + "'s replacement could not be started: " + e.what();
    return false;
  }
  ranks_[index].started = true;
  ranks_[child].replaced_by = index;
  --recoveries_left_;
  ++recoveries_;
  publish(name + " (pid " + std::to_string(lost_pid) + ") " + how +
          "; started its replacement, pid " + std::to_string(ranks_[index].pid) + " (" +
          std::to_string(recoveries_left()) + " restart(s) left)");
  return true;
}

std::vector<int> Round::nodes_below(int first, int count) const {
  std::vector<int> nodes;
  for (int node = first + 1; node < first + count; ++node) {
    if (moved_below_.count(node) == 0) nodes.push_back(node);  // a moved one runs elsewhere
  }
  return nodes;
}

std::optional<std::size_t> Round::move_together(int lost, const std::vector<int>& below,
                                                const std::string& name, const std::string& line,
                                                const std::string& again_how) {
  if (!below.empty()) {  // all of them within the budget, or none
    int ranks = 0;
    for (const int node : below) {
      const auto part = parts_.find(node);
      if (part == parts_.end()) {
        not_replaced_ = "node " + std::to_string(node) + ", below " + name +
                        " in the ssh tree, was lost with it before it said which ranks run there";
        return std::nullopt;
      }
      ranks += static_cast<int>(part->second.ranks.size());
    }
    if (const auto own = parts_.find(lost); own != parts_.end()) {
      ranks += static_cast<int>(own->second.ranks.size());
    }
    if (recoveries_left() < ranks) {
      not_replaced_ = name + " was lost with the " + std::to_string(below.size()) +
                      " node(s) below it in the ssh tree, " + std::to_string(ranks) +
                      " rank(s) in all, and the round has " +
                      std::to_string(std::max(0, recoveries_left())) +
                      " restart(s) left (--max-restarts)";
      return std::nullopt;
    }
  }
  const auto moved = start_on_spare(lost, name, again_how);
  if (!moved) return std::nullopt;
  int started = moved->ranks;  // the recoveries this move spent, its nodes' own ones apart
  const std::string with_below = below.empty()
                                     ? std::string()
                                     : ", and with it the " + std::to_string(below.size()) +
                                           " node(s) below it in the ssh tree";
  publish(line + with_below + moved->where);
  for (const int node : below) {
    const std::string below_name = "node " + std::to_string(node);
    const auto moved_below = start_on_spare(node, below_name, " under this node's own agent");
    if (!moved_below) {
      // The round fails on the loss, and the stand-ins started stop with it: as if none had
      // started, they spend no restart (the replacements the nodes made themselves still
      // count).
      recoveries_ -= started;
      recoveries_left_ += started;
      if (not_replaced_.empty()) {
        not_replaced_ = below_name + ", below " + name +
                        " in the ssh tree and lost with it, has no spare node that fits";
      }
      return std::nullopt;
    }
    started += moved_below->ranks;
    moved_below_[node] = moved_below->child;
    publish(below_name + ", below " + name + " in the ssh tree, went with it" + moved_below->where);
  }
  return moved->child;
}

bool Round::move_node(std::size_t child) {
  const RankResult& lost = ranks_[child];
  if (!spares_ || notice_seen_ != 0) return false;  // no spares; a notice (the round drains)
  const std::string name = "node " + std::to_string(lost.node_rank) + " (" + lost.host + ")";
  if (spec(spec_of_[child]).join_by && joined_.count(child) == 0) {
    not_replaced_ = name + "'s ddprun did not join again in time (--rdzv-conf join_timeout)";
    return false;
  }
  const auto ran =
      std::chrono::duration_cast<std::chrono::milliseconds>(runner_.now() - started_at_[child]);
  if (lost.replacement && ran < policy_.recovery_window) {
    not_replaced_ = name + ", itself in a lost node's place, was lost " + format_seconds(ran) +
                    " after its start, during its recovery (the first " +
                    format_seconds(policy_.recovery_window) + ")";
    return false;
  }
  // Said before the start: `lost` is an element of ranks_, which the start may move.
  const std::string line =
      name + " was lost (its ddprun ended: " + describe_wait_status(lost.wait_status) + ")";
  // An inner node of the ssh tree: the nodes below it went with its ddprun.
  const ChildSpec& via = spec(spec_of_[child]);
  const auto stand_in =
      move_together(lost.node_rank, nodes_below(via.node_rank, via.control_nodes), name, line, "");
  if (!stand_in) return false;
  ranks_[child].replaced_by = *stand_in;
  // A node moved from below an agent earlier: the new child stands for it now.
  for (auto& [node, stands] : moved_below_) {
    if (stands == child) stands = *stand_in;
  }
  return true;
}

std::optional<Round::Moved> Round::start_on_spare(int node, const std::string& name,
                                                  const std::string& again_how) {
  const auto part = parts_.find(node);
  if (part == parts_.end()) {
    not_replaced_ = name + " was lost before it said which ranks run there";
    return std::nullopt;
  }
  const int ranks = static_cast<int>(part->second.ranks.size());
  if (recoveries_left() < ranks) {
    not_replaced_ = name + " was lost with " + std::to_string(ranks) +
                    " rank(s) and the round has " + std::to_string(std::max(0, recoveries_left())) +
                    " restart(s) left (--max-restarts)";
    return std::nullopt;
  }
  const std::size_t index = ranks_.size();
  std::string host;
  bool again = false;
  std::string waiting_spare;
  std::optional<RunnerClock::duration> awaited;  // a per-node launcher to join again
  try {
    std::optional<SpareNode> spare = spares_(node);
    if (!spare) return std::nullopt;
    host = spare->agent.host;
    again = spare->again;
    waiting_spare = spare->waiting_spare;
    if (spare->agent.join_by) awaited = *spare->agent.join_by - runner_.now();
    moved_specs_.push_back(std::move(spare->agent));
    add_child(specs_->size() + moved_specs_.size() - 1).replacement = true;
    ranks_[index].pid = runner_.start(spec(spec_of_[index]));
  } catch (const std::exception& e) {
    if (ranks_.size() > index) drop_last_child();
    not_replaced_ = name + "'s ranks could not be started again" +
                    (host.empty() ? std::string() : " (" + host + ")") + ": " + e.what();
    return std::nullopt;
  }
  ranks_[index].started = true;
  // The node's own replacements so far stay counted here; its spare reports afresh.
  const int spent = ranks + part->second.recoveries;
  parts_.erase(part);
  recoveries_left_ -= spent;
  recoveries_ += spent;
  const std::string count = std::to_string(ranks) + " rank(s)";
  const std::string where =
      awaited && !waiting_spare.empty()
          ? "; its " + count + " go on on " + waiting_spare + ", whose ddprun waits as a spare"
      : awaited ? "; its " + count + " go on where its ddprun joins again (start it with the " +
                      "same options, on " + host + " or another host, within " +
                      format_seconds(std::chrono::ceil<std::chrono::seconds>(*awaited)) + ")"
      : again
          ? "; started its " + count + " there again" + again_how + ", with no spare node that fits"
          : "; started its " + count + " on the spare node " + host;
  return Moved{index, where + " (" + std::to_string(recoveries_left()) + " restart(s) left)",
               ranks};
}

bool Round::hand_up(std::size_t child) {
  if (!policy_.hands_up_lost_nodes || notice_seen_ != 0) {
    return false;  // not an agent of the tree; a notice (the round drains)
  }
  const RankResult& lost = ranks_[child];
  NodeEvent event;
  event.kind = NodeEvent::Kind::kLost;
  event.node = lost.node_rank;
  // The nodes below it in the tree went with its ddprun: the head moves them together.
  event.nodes = std::max(1, spec(spec_of_[child]).control_nodes);
  event.code = code_of(lost.wait_status);
  event.what = "node " + std::to_string(lost.node_rank) + " (" + lost.host +
               ") was lost (its ddprun ended: " + describe_wait_status(lost.wait_status) + ")";
  runner_.announce(event);
  handed_up_.insert(child);
  return true;
}

bool Round::move_below(std::size_t child, const NodeEvent& lost) {
  if (!spares_ || notice_seen_ != 0 || !ranks_[child].agent || lost.node == policy_.node_rank) {
    return false;  // no spares (an agent itself); a notice (the round drains)
  }
  // "node 2 (node3)" of "node 2 (node3) was lost (...)": the agent's words (hand_up).
  const std::string name = lost.what.substr(0, lost.what.find(" was lost"));
  const std::vector<int> below = nodes_below(lost.node, lost.nodes);
  const auto stand_in =
      move_together(lost.node, below, name, lost.what, " under this node's own agent");
  if (!stand_in) return false;
  moved_below_[lost.node] = *stand_in;
  // --status and --stacks: one answer fewer from the old parent's subtree a node moved.
  for (std::size_t i = 0; i <= below.size(); ++i) runner_.one_node_fewer_below(child);
  return true;
}

NodeEvent Round::failure_event(std::size_t child) const {
  if (reported_[child]) return *reported_[child];
  const RankResult& rank = ranks_[child];
  NodeEvent event;
  event.node = rank.agent && rank.node_rank >= 0 ? rank.node_rank : policy_.node_rank;
  event.code = rank.exited ? code_of(rank.wait_status) : kExitTimedOut;
  const std::string how = rank.exited ? describe_wait_status(rank.wait_status) : "timed out";
  event.what = rank.agent ? child_label(rank) + "'s ddprun: " + how
                          : "rank " + std::to_string(rank.rank) + " (" + rank.host + ") " + how;
  return event;
}

void Round::fail(std::size_t child, bool stop_its_node) {
  phase_ = Phase::kFailing;
  first_failure_ = child;
  const NodeEvent event = failure_event(child);
  runner_.announce(event);
  runner_.set_stop_cause(event);
  stop_live(SIGTERM, one_node_agent(child) && !stop_its_node ? child : kNoChild);
}

void Round::send_notice(int sig, std::size_t except) {
  signal_live(sig, except);
  if (notice_seen_ == 0) notice_seen_ = sig;
  if (phase_ == Phase::kRunning &&
      std::find(notice_signals_.begin(), notice_signals_.end(), sig) == notice_signals_.end()) {
    notice_signals_.push_back(sig);
  }
}

void Round::handle(const RunnerEvent& event) {
  switch (event.kind) {
    case RunnerEvent::Kind::kExited:
      on_exit(event);
      break;
    case RunnerEvent::Kind::kSignal:
      on_signal(event);
      break;
    case RunnerEvent::Kind::kNodeEvent:
      on_node_event(event.child, event.node_event);
      break;
    case RunnerEvent::Kind::kMembership:
      on_membership(event.child, event.node, event.membership);
      break;
    case RunnerEvent::Kind::kHeadLost:
      // This node's workers must not outlive the head.
      lost_head_ = true;
      on_stop(SIGHUP, SIGTERM);
      break;
    case RunnerEvent::Kind::kJoined:
      ranks_.at(event.child).host = event.host;  // the rank table names where it runs now
      joined_.insert(event.child);
      started_at_.at(event.child) = runner_.now();  // its recovery window counts from here
      break;
    case RunnerEvent::Kind::kDeadline:
      break;
  }
}

bool Round::has_own_cause() const {
  return stopped_after_ || phase_ == Phase::kFailing || phase_ == Phase::kTimedOut ||
         phase_ == Phase::kStalled;
}

void Round::on_stop(int cause, int forward) {
  if (phase_ == Phase::kStopping && cause == SIGINT) {
    kill_live();  // a second Ctrl-C: no more grace
    return;
  }
  if (stop_signal_ == 0) {
    stop_signal_ = cause;
    if (has_own_cause()) stopped_after_ = phase_;
  }
  phase_ = Phase::kStopping;
  // Every stop signal reaches every live worker, after a notice too: a worker that is
  // writing its checkpoint decides itself what a stop means then (ddp-train finishes it).
  stop_live(forward);
}

void Round::on_signal(const RunnerEvent& event) {
  const int sig = event.signal_number;
  if (event.from_head && sig == SIGKILL) {
    // The head gave up on this node after its grace: nothing is waited for any more.
    if (stop_signal_ == 0) {
      stop_signal_ = SIGKILL;
      if (has_own_cause()) stopped_after_ = phase_;
    }
    phase_ = Phase::kStopping;
    kill_live();
    return;
  }
  const bool stop = is_stop_signal(sig, policy_.extra_stop_signals);
  if (!event.from_head) {  // ddprun's own: the head (when there is one) must know at once
    NodeEvent own;
    own.kind = stop ? NodeEvent::Kind::kStopped : NodeEvent::Kind::kNotice;
    own.node = policy_.node_rank;
    own.signal = sig;
    own.code = stop ? 128 + sig : kExitPreempted;
    own.what = (stop ? "stopped by " : "a preemption notice, ") + signal_name(sig);
    runner_.announce(own);
  } else if (stop && event.cause && stop_signal_ == 0) {
    cause_ = event.cause;
  }
  if (stop) {
    on_stop(sig, sig);
  } else {
    send_notice(sig);  // SIGUSR1/SIGUSR2: preemption notices, the workers decide
  }
}

void Round::on_node_event(std::size_t child, const NodeEvent& event) {
  if (const auto moved = moved_below_.find(event.node);
      moved != moved_below_.end() && moved->second != child) {
    return;  // a node moved from below `child`: what comes its old way is its last words
  }
  switch (event.kind) {
    case NodeEvent::Kind::kLost: {
      // Only of a node in `child`'s ssh subtree (its node, then the next control_nodes - 1).
      const ChildSpec& via = spec(spec_of_[child]);
      const bool below = ranks_[child].agent && event.node > via.node_rank &&
                         event.node + event.nodes <= via.node_rank + via.control_nodes;
      if (!below || phase_ != Phase::kRunning || escalation_ == Escalation::kKilled) break;
      if (policy_.hands_up_lost_nodes) {
        // An agent: the head's to move. (Agents pass their agents' lines up unread; one that
        // reaches this round all the same goes on up.)
        runner_.announce(event);
        break;
      }
      if (move_below(child, event)) break;
      // Not moved: the round fails on it, as on any lost node (a full restart decides), and
      // the agent that handed it up, which goes on otherwise, is stopped too.
      if (not_replaced_.empty())
        not_replaced_ = event.what + ", below " + child_label(ranks_[child]);
      NodeEvent failed = event;
      failed.kind = NodeEvent::Kind::kFailed;
      if (!reported_[child]) reported_[child] = failed;
      fail(child, /*stop_its_node=*/true);
      break;
    }
    case NodeEvent::Kind::kFailed:
      if (ranks_[child].replaced_by) break;  // a lost node's last words: a spare stands for it
      if (!reported_[child]) reported_[child] = event;
      if (phase_ == Phase::kRunning && escalation_ != Escalation::kKilled) fail(child);
      break;
    case NodeEvent::Kind::kStopped:
    case NodeEvent::Kind::kSetupFailed:
      runner_.announce(event);
      // After this round's own cause, a node's stop (every task got Slurm's SIGTERM)
      // changes neither the cause nor what the other nodes are told.
      if (!has_own_cause()) {
        if (stop_signal_ == 0) cause_ = event;
        runner_.set_stop_cause(event);
      }
      on_stop(event.kind == NodeEvent::Kind::kStopped ? event.signal : SIGTERM, SIGTERM);
      break;
    case NodeEvent::Kind::kNotice:
      runner_.announce(event);
      send_notice(event.signal, one_node_agent(child) ? child : kNoChild);
      break;
  }
}

void Round::on_exit(const RunnerEvent& event) {
  RankResult& rank = ranks_.at(event.child);
  rank.exited = true;
  rank.wait_status = event.wait_status;
  rank.max_rss_kb = event.max_rss_kb;
  rank.run_seconds = event.run_seconds;
  // A drained worker is done, not failed: its peers agreed to stop at the same step
  // and are saving the same checkpoint, so they must not be interrupted.
  const bool drained = drained_by_notice(rank);
  any_drained_ = any_drained_ || drained;
  const bool failed = !exited_with(event.wait_status, 0) && !drained;
  // --restart-scope rank: every end changes the membership; a lost worker replaced is no
  // exit of its rank (no exit timer, no failure).
  if (rank_scope() && !rank.agent) {
    publish({});  // lost or done; a replacement is a change of its own
    if (failed && phase_ == Phase::kRunning && escalation_ != Escalation::kKilled &&
        replace(event.child))
      return;
  }
  // A node lost (its ddprun ended without reporting a failure of its own): its ranks may
  // go on on a spare node.
  if (rank_scope() && one_node_agent(event.child) && failed && !reported_[event.child] &&
      phase_ == Phase::kRunning && escalation_ != Escalation::kKilled &&
      (move_node(event.child) || hand_up(event.child)))
    return;
  // A drained rank starts no exit timer: its peers are saving the same checkpoint.
  if (policy_.exit_timeout && !first_exit_ && !drained) {
    first_exit_ = event.child;
    timers_.exit = runner_.now() + *policy_.exit_timeout;
  }
  // Children that ddprun stopped itself are no root cause.
  if (failed && phase_ == Phase::kRunning && escalation_ != Escalation::kKilled) fail(event.child);
}

double Round::seconds_since(RunnerClock::time_point start) const {
  return std::chrono::duration<double>(runner_.now() - start).count();
}

bool is_stop_signal(int sig, const std::vector<int>& extra) {
  if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP || sig == SIGQUIT) return true;
  return std::find(extra.begin(), extra.end(), sig) != extra.end() && !is_notice_signal(sig);
}

RoundResult run_round(Runner& runner, const std::vector<ChildSpec>& children,
                      const RoundPolicy& policy, int recoveries_left, const SpareNodes& spares) {
  return Round(runner, policy, recoveries_left, spares).run(children);
}

}  // namespace ddprun
