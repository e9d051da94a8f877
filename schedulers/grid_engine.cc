// Grid Engine (SGE 8.1.9, UGE, ABCI 2.x). PE_HOSTFILE's format was checked against a real
// Grid Engine 8.1.9 job; SGE_JOB_HOSTLIST only from ABCI's documentation.

#include <map>

#include "ddprun/common/parse_int.h"
#include "ddprun/contract/errors.h"
#include "hostfile.h"
#include "node_match.h"
#include "schedulers.h"
#include "variables.h"

namespace ddprun {

namespace {

// "host slots queue processors" lines; a host on several lines has its slots summed.
std::vector<NodeSlots> read_pe_hostfile(const ReadFile& read_file, const std::string& path) {
  constexpr std::string_view kVia = "PE_HOSTFILE";
  const std::string text = read_named_file(read_file, path, kVia);
  SlotTally tally;
  const std::vector<std::string_view> lines = split_lines(text);
  for (std::size_t n = 0; n < lines.size(); ++n) {
    const std::string_view line = lines[n];
    const std::vector<Word> words = split_words(line);
    if (words.empty()) continue;
    auto fail = [&](std::size_t column, const std::string& message) {
      throw SchedulerEnvError(file_message(path, n + 1, column, message, kVia));
    };
    if (words.size() < 2) {
      fail(line.size() + 1, "expected 'host slots queue processors', got only the host");
    }
    const std::optional<int> slots = parse_int(words[1].text);
    if (!slots || *slots < 1) {
      fail(words[1].column,
           "expected a positive slot count, got '" + std::string(words[1].text) + "'");
    }
    if (!tally.add(words[0].text, *slots)) {
      fail(words[1].column, "too many slots for host '" + std::string(words[0].text) + "'");
    }
  }
  if (tally.empty()) throw SchedulerEnvError(env_message(kVia, path, "the file names no host"));
  return tally.take();
}

}  // namespace

bool sge_detected(const Environment& env) {
  return first_set(env, {"PE_HOSTFILE", "SGE_JOB_HOSTLIST"}).has_value();
}

Cluster read_sge(const ReaderInput& input) {
  const Environment& env = input.env;
  Cluster cluster;
  cluster.scheduler = "sge";
  const std::optional<EnvEntry> pe_hostfile = first_set(env, {"PE_HOSTFILE"});
  const std::optional<EnvEntry> job_hostlist = first_set(env, {"SGE_JOB_HOSTLIST"});
  if (pe_hostfile) {
    note(cluster, *pe_hostfile);
    cluster.nodes = read_pe_hostfile(input.read_file, pe_hostfile->value);
  }
  if (job_hostlist) {
    note(cluster, *job_hostlist);
    std::vector<NodeSlots> listed =
        read_slot_file(input.read_file, job_hostlist->value, job_hostlist->name);
    if (!pe_hostfile) {
      cluster.nodes = std::move(listed);
    } else {
      bool same = listed.size() == cluster.nodes.size();
      for (std::size_t i = 0; same && i < listed.size(); ++i) {
        same = host_names_match(listed[i].host, cluster.nodes[i].host);
      }
      if (!same) {
        throw SchedulerEnvError(env_message(
            job_hostlist->name, job_hostlist->value,
            "expected the same hosts in the same order as PE_HOSTFILE=\"" + pe_hostfile->value +
                "\" (" + std::to_string(cluster.nodes.size()) + " hosts, the first '" +
                cluster.nodes.front().host + "'), got " + std::to_string(listed.size()) +
                " hosts, the first '" + listed.front().host + "'"));
      }
    }
  }
  if (!pe_hostfile && !job_hostlist) {
    throw SchedulerEnvError(env_missing_message(
        "PE_HOSTFILE",
        "expected Grid Engine's host file (submit with a parallel environment: qsub -pe NAME N)"));
  }

  if (const std::optional<EnvEntry> nhosts = first_set(env, {"NHOSTS"})) {
    note(cluster, *nhosts);
    if (static_cast<std::size_t>(env_int(*nhosts)) != cluster.nodes.size()) {
      throw SchedulerEnvError(env_message(
          nhosts->name, nhosts->value,
          "expected " + std::to_string(cluster.nodes.size()) + ", the number of hosts in " +
              (pe_hostfile ? pe_hostfile->name : job_hostlist->name)));
    }
  }
  if (const std::optional<EnvEntry> nslots = first_set(env, {"NSLOTS"})) {
    note(cluster, *nslots);
    const int given = env_int(*nslots);
    if (pe_hostfile) {
      long total = 0;
      for (const NodeSlots& node : cluster.nodes) total += node.slots;
      if (given != total) {
        throw SchedulerEnvError(env_message(
            nslots->name, nslots->value,
            "expected " + std::to_string(total) + ", the sum of the slots in PE_HOSTFILE"));
      }
    }
  }
  if (const std::optional<EnvEntry> id = first_set(env, {"JOB_ID"})) {
    note(cluster, *id);
    cluster.job_id = id->value;
  }
  set_this_node_from_host(cluster, input.host);
  return cluster;
}

}  // namespace ddprun
