// LSF reader. LSF is not packaged for Debian 12: its contract is checked from its
// documentation only (docs/schedulers.md).

#include <map>

#include "ddprun/common/parse_int.h"
#include "ddprun/contract/errors.h"
#include "hostfile.h"
#include "node_match.h"
#include "schedulers.h"
#include "variables.h"

namespace ddprun {
namespace {

// "host n host n ...": the hosts in order, a host named twice has its counts summed.
std::vector<NodeSlots> parse_mcpu_hosts(const EnvEntry& entry) {
  const std::string_view text = entry.value;
  const std::vector<Word> words = split_words(text);
  if (words.empty()) {
    throw SchedulerEnvError(env_message(entry.name, entry.value, "expected 'host count ...'"));
  }
  SlotTally tally;
  for (std::size_t i = 0; i < words.size(); i += 2) {
    if (i + 1 == words.size()) {
      throw SchedulerEnvError(
          env_message_at(entry.name, entry.value, text.size() + 1,
                         "expected a slot count after host '" + std::string(words[i].text) + "'"));
    }
    const std::optional<int> count = parse_int(words[i + 1].text);
    if (!count || *count < 1) {
      throw SchedulerEnvError(env_message_at(
          entry.name, entry.value, words[i + 1].column,
          "expected a positive slot count, got '" + std::string(words[i + 1].text) + "'"));
    }
    if (!tally.add(words[i].text, *count)) {
      throw SchedulerEnvError(
          env_message_at(entry.name, entry.value, words[i + 1].column,
                         "too many slots for host '" + std::string(words[i].text) + "'"));
    }
  }
  return tally.take();
}

// On CSM/JSM machines (Summit- and Lassen-style) the batch script runs on a launch node
// that LSF lists first with one slot; the compute nodes follow with all their slots. It
// runs no rank: leave it out, or it would become node 0 (and its host the master). Seen
// as: two or more hosts, the first with one slot, every other with more.
void leave_out_launch_node(Cluster& cluster) {
  auto& nodes = cluster.nodes;
  if (nodes.size() < 2 || nodes.front().slots != 1) return;
  for (std::size_t i = 1; i < nodes.size(); ++i) {
    if (nodes[i].slots < 2) return;
  }
  cluster.sources["launch node left out"] = nodes.front().host;
  nodes.erase(nodes.begin());
}

}  // namespace

bool lsf_detected(const Environment& env) {
  return first_set(env, {"LSB_JOBID"}).has_value();
}

Cluster read_lsf(const ReaderInput& input) {
  const Environment& env = input.env;
  Cluster cluster;
  cluster.scheduler = "lsf";
  const std::optional<EnvEntry> mcpu = first_set(env, {"LSB_MCPU_HOSTS"});
  const std::optional<EnvEntry> djob = first_set(env, {"LSB_DJOB_HOSTFILE"});
  if (mcpu) {
    note(cluster, *mcpu);
    cluster.nodes = parse_mcpu_hosts(*mcpu);
  }
  if (djob) {
    note(cluster, *djob);
    std::vector<NodeSlots> listed = read_slot_file(input.read_file, djob->value, djob->name);
    if (!mcpu) {
      cluster.nodes = std::move(listed);
    } else {
      bool same = listed.size() == cluster.nodes.size();
      for (std::size_t i = 0; same && i < listed.size(); ++i) {
        same = listed[i].host == cluster.nodes[i].host && listed[i].slots == cluster.nodes[i].slots;
      }
      if (!same) {
        throw SchedulerEnvError(env_message(djob->name, djob->value,
                                            "expected the hosts and slots of LSB_MCPU_HOSTS=\"" +
                                                mcpu->value +
                                                "\", one line per slot, in the same order"));
      }
    }
  }
  if (!mcpu && !djob) {
    throw SchedulerEnvError(env_missing_message(
        "LSB_MCPU_HOSTS", "expected the job's hosts and slots (run ddprun inside a bsub job)"));
  }
  if (const std::optional<EnvEntry> id = first_set(env, {"LSB_JOBID"})) {
    note(cluster, *id);
    cluster.job_id = id->value;
  }
  leave_out_launch_node(cluster);
  set_this_node_from_host(cluster, input.host);
  return cluster;
}

}  // namespace ddprun
