#include "job/preflight.h"

#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "ddprun/common/net.h"
#include "ddprun/contract/errors.h"
#include "job/agent_options.h"
#include "nodes/agents.h"
#include "nodes/ports.h"
#include "nodes/ring_link.h"
#include "plan/host_facts.h"
#include "report/labels.h"
#include "report/report.h"
#include "run/child_set.h"
#include "schedulers.h"

namespace ddprun {
namespace {

constexpr int kConnectTimeoutMs = 3000;
constexpr int kAgentTimeoutMs = 30000;  // for every node to answer
// --bandwidth: how long the ring may take (its rounds: RingRounds' defaults).
constexpr std::chrono::milliseconds kRingTimeout{20000};

std::string joined(const std::vector<std::string>& items) {
  std::string text;
  for (const auto& item : items) text += (text.empty() ? "" : " ") + item;
  return text.empty() ? "-" : text;
}

std::string pad(std::string text, std::size_t width) {
  if (text.size() < width) text.append(width - text.size(), ' ');
  return text;
}

// Reports from what the launchers printed: each line that is a node's check, by node rank.
void collect_checks(const CapturedRun& run, std::vector<NodeReport>& reports, int node_rank) {
  bool any = false;
  std::size_t start = 0;
  for (std::size_t end; (end = run.out.find('\n', start)) != std::string::npos; start = end + 1) {
    const auto check = parse_node_check(std::string_view(run.out).substr(start, end - start));
    if (!check || check->node_rank < 0 ||
        static_cast<std::size_t>(check->node_rank) >= reports.size()) {
      continue;
    }
    reports[static_cast<std::size_t>(check->node_rank)].check = check;
    any = true;
  }
  if (any || node_rank < 0) return;
  std::string why = run.timed_out ? "no answer in time" : describe_wait_status(run.wait_status);
  const auto last = run.err.find_last_not_of('\n');
  if (last != std::string::npos) {
    const auto begin = run.err.rfind('\n', last);
    why += ": " + run.err.substr(begin == std::string::npos ? 0 : begin + 1,
                                 last - (begin == std::string::npos ? 0 : begin + 1) + 1);
  }
  reports[static_cast<std::size_t>(node_rank)].failure = why;
}

std::int64_t free_mb(const std::string& path) {
  struct statvfs info {};
  if (::statvfs(path.c_str(), &info) != 0) return -1;
  return static_cast<std::int64_t>(info.f_bavail) * static_cast<std::int64_t>(info.f_frsize) /
         (1024 * 1024);
}

std::string mb_text(std::int64_t mb) {
  return mb < 0 ? std::string("?") : std::to_string(mb) + " MB";
}

std::string mb_s_text(double mb_s) {
  char text[32];
  std::snprintf(text, sizeof text, "%.0f MB/s", mb_s);
  return text;
}

// The problems of one node that answered, each a short phrase after "node N (host): ".
std::vector<std::string> node_problems(const LaunchPlan& plan, const NodePlan& node,
                                       const NodeCheck& check, const PreflightExpect& expect) {
  std::vector<std::string> problems;
  if (!check.master_reachable) {
    problems.push_back("cannot connect to " + plan.master_addr + ":" +
                       std::to_string(plan.master_port));
  }
  if (check.program.empty()) problems.push_back(check.program_error);
  if (expect.answered_by > 0) {
    if (check.unix_time < expect.asked_at - expect.clock_bound_s) {
      problems.push_back("its clock is " + std::to_string(expect.asked_at - check.unix_time) +
                         " s behind this node's (check NTP/chrony there)");
    } else if (check.unix_time > expect.answered_by + expect.clock_bound_s) {
      problems.push_back("its clock is " + std::to_string(check.unix_time - expect.answered_by) +
                         " s ahead of this node's (check NTP/chrony there)");
    }
  }
  const int wanted = node.nproc * expect.gpus_per_worker;
  if (expect.gpus_per_worker > 0 &&
      (expect.workers_from_gpus ? check.gpus != wanted : check.gpus < wanted)) {
    problems.push_back("sees " + std::to_string(check.gpus) + " GPU(s), the plan gives it " +
                       std::to_string(node.nproc) + " workers, " +
                       (expect.gpus_per_worker == 1
                            ? std::string("one per GPU")
                            : std::to_string(expect.gpus_per_worker) + " GPUs each") +
                       " (check CUDA_VISIBLE_DEVICES and the scheduler's GPU request)");
  }
  if (check.shm_free_mb >= 0 && check.shm_free_mb < expect.min_shm_mb) {
    problems.push_back("/dev/shm has " + mb_text(check.shm_free_mb) +
                       " free; the shared-memory all-reduce needs room (free it, or set "
                       "runtime.shared_memory false)");
  }
  if (!check.link_error.empty()) {
    problems.push_back("its link to " + check.link_to +
                       " could not be measured: " + check.link_error);
  }
  for (const PathCheck& path : check.paths) {
    if (!path.writable) {
      problems.push_back(path.path + " cannot be written: " + path.error);
    } else if (path.free_mb >= 0 && path.free_mb < expect.min_free_mb) {
      problems.push_back(path.path + " has only " + mb_text(path.free_mb) + " free");
    }
  }
  return problems;
}

}  // namespace

PathCheck check_path(const std::string& path) {
  PathCheck check;
  check.path = path;
  // A folder that does not exist yet is made by the job: its nearest parent must take it.
  std::string existing = path;
  while (::access(existing.c_str(), F_OK) != 0) {
    const auto slash = existing.find_last_of('/');
    if (slash == std::string::npos) {
      existing = ".";
      break;
    }
    existing = slash == 0 ? "/" : existing.substr(0, slash);
  }
  // Made and removed for real: access() says yes to root even on a read-only mount.
  std::string probe = (existing == "/" ? "" : existing) + "/.ddprun-check-XXXXXX";
  check.writable = ::mkdtemp(probe.data()) != nullptr;
  if (check.writable) {
    ::rmdir(probe.c_str());
  } else {
    check.error = existing + ": " + std::strerror(errno);
  }
  check.free_mb = free_mb(existing);
  return check;
}

NodeCheck check_this_node(int node_rank, const std::string& hostname,
                          const std::string& master_addr, int master_port,
                          const std::string& program, const Environment& env, int gpus,
                          const std::vector<std::string>& paths) {
  NodeCheck check;
  check.unix_time = static_cast<std::int64_t>(std::time(nullptr));
  check.gpus = gpus;
  check.shm_free_mb = free_mb("/dev/shm");
  for (const auto& path : paths) check.paths.push_back(check_path(path));
  check.node_rank = node_rank;
  check.hostname = hostname;
  check.master_addresses = resolve_addresses(master_addr);
  check.master_reachable = can_connect(master_addr, master_port, kConnectTimeoutMs);
  try {
    check.program = resolve_program(program, env);
  } catch (const Error& e) {
    check.program_error = e.what();
  }
  return check;
}

std::string node_check_line(const NodeCheck& check) {
  nlohmann::json doc = {{"ddprun_check", 1},
                        {"node_rank", check.node_rank},
                        {"hostname", check.hostname},
                        {"master_addresses", check.master_addresses},
                        {"master_reachable", check.master_reachable},
                        {"program", check.program},
                        {"program_error", check.program_error},
                        {"unix_time", check.unix_time},
                        {"gpus", check.gpus},
                        {"shm_free_mb", check.shm_free_mb},
                        {"paths", nlohmann::json::array()},
                        {"link_to", check.link_to},
                        {"link_mb_s", check.link_mb_s},
                        {"link_error", check.link_error},
                        {"topology", check.topology},
                        {"placement", check.placement}};
  auto& paths = doc["paths"];
  for (const PathCheck& path : check.paths) {
    paths.push_back({{"path", path.path},
                     {"writable", path.writable},
                     {"free_mb", path.free_mb},
                     {"error", path.error}});
  }
  return doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

std::optional<NodeCheck> parse_node_check(std::string_view line) {
  const auto doc = nlohmann::json::parse(line, nullptr, false);
  if (doc.is_discarded() || !doc.is_object() || !doc.contains("ddprun_check")) return std::nullopt;
  try {
    NodeCheck check;
    check.node_rank = doc.at("node_rank").get<int>();
    check.hostname = doc.at("hostname").get<std::string>();
    check.master_addresses = doc.at("master_addresses").get<std::vector<std::string>>();
    check.master_reachable = doc.at("master_reachable").get<bool>();
    check.program = doc.at("program").get<std::string>();
    check.program_error = doc.at("program_error").get<std::string>();
    check.unix_time = doc.at("unix_time").get<std::int64_t>();
    check.gpus = doc.at("gpus").get<int>();
    check.shm_free_mb = doc.at("shm_free_mb").get<std::int64_t>();
    check.link_to = doc.value("link_to", "");
    check.link_mb_s = doc.value("link_mb_s", 0.0);
    check.link_error = doc.value("link_error", "");
    check.topology = doc.value("topology", "");
    check.placement = doc.value("placement", std::vector<std::string>{});
    for (const auto& path : doc.at("paths")) {
      check.paths.push_back({path.at("path").get<std::string>(), path.at("writable").get<bool>(),
                             path.at("free_mb").get<std::int64_t>(),
                             path.at("error").get<std::string>()});
    }
    return check;
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

PreflightSummary format_preflight(const LaunchPlan& plan, const std::vector<NodeReport>& reports,
                                  const PreflightExpect& expect) {
  PreflightSummary summary;
  std::vector<std::string> problems;
  std::string text = "ddprun: preflight of " + std::to_string(plan.nodes.size()) +
                     " node(s), master " + plan.master_addr + ":" +
                     std::to_string(plan.master_port) + "\n";
  text += "  node  " + pad("host", 16) + pad("reached", 9) + pad("master resolves to", 20) +
          pad("master port", 13) + pad("gpus", 6) + pad("/dev/shm", 10) + "program\n";
  std::optional<std::vector<std::string>> first_addresses;
  struct Link {
    double mb_s;
    const NodePlan* from;
    std::string to;
  };
  std::vector<Link> links;
  for (const NodePlan& node : plan.nodes) {
    const auto index = static_cast<std::size_t>(node.node_rank);
    const NodeReport* report = index < reports.size() ? &reports[index] : nullptr;
    text += "  " + pad(std::to_string(node.node_rank), 6) + pad(node.host, 16);
    if (report == nullptr || !report->check) {
      const std::string why =
          report == nullptr || report->failure.empty() ? "no answer" : report->failure;
      text += "NO: " + why + "\n";
      problems.push_back("node " + std::to_string(node.node_rank) + " (" + node.host +
                         ") did not answer: " + why);
      continue;
    }
    const NodeCheck& check = *report->check;
    auto addresses = check.master_addresses;
    std::sort(addresses.begin(), addresses.end());
    text += pad("yes", 9) + pad(joined(addresses), 20) +
            pad(check.master_reachable ? "open" : "NOT open", 13) +
            pad(std::to_string(check.gpus), 6) + pad(mb_text(check.shm_free_mb), 10) +
            (check.program.empty() ? "NOT found" : check.program) + "\n";
    for (const PathCheck& path : check.paths) {
      text += "        " + path.path + ": " + (path.writable ? "writable" : "NOT writable") + ", " +
              mb_text(path.free_mb) + " free\n";
    }
    if (!check.topology.empty()) text += "        topology: " + check.topology + "\n";
    for (std::size_t local = 0; local < check.placement.size(); ++local) {
      text += "        rank " + std::to_string(node.first_rank + static_cast<int>(local)) + ": " +
              check.placement[local] + "\n";
    }
    if (!check.link_to.empty()) {
      text += "        link to " + check.link_to + ": " +
              (check.link_error.empty() ? mb_s_text(check.link_mb_s) : "NOT measured") + "\n";
      if (check.link_error.empty()) links.push_back({check.link_mb_s, &node, check.link_to});
    }
    const std::string who = "node " + std::to_string(node.node_rank) + " (" + node.host + ")";
    if (addresses.empty()) {
      problems.push_back(who + ": master address " + plan.master_addr + " does not resolve");
    } else if (!first_addresses) {
      first_addresses = addresses;
    } else if (*first_addresses != addresses) {
      problems.push_back(who + ": master address " + plan.master_addr + " resolves to " +
                         joined(addresses) + ", not " + joined(*first_addresses) +
                         " as on the first node");
    }
    for (const auto& problem : node_problems(plan, node, check, expect)) {
      problems.push_back(who + ": " + problem);
    }
  }
  // Nodes of one job are usually alike: name a node whose topology differs from most
  // (from node 0's on a tie), since its ranks run and bind differently.
  std::map<std::string, int> topologies;
  std::string usual;
  for (const NodeReport& report : reports) {
    if (!report.check || report.check->topology.empty()) continue;
    const int count = ++topologies[report.check->topology];
    if (usual.empty() || count > topologies[usual]) usual = report.check->topology;
  }
  for (const NodePlan& node : plan.nodes) {
    const auto index = static_cast<std::size_t>(node.node_rank);
    if (index >= reports.size() || !reports[index].check) continue;
    const std::string& topology = reports[index].check->topology;
    if (!topology.empty() && topology != usual) {
      problems.push_back("node " + std::to_string(node.node_rank) + " (" + node.host +
                         "): its topology differs from the others': " + topology + ", not " +
                         usual);
    }
  }
  // A ring all-reduce moves at its slowest link's pace: name it, and any link far slower
  // than the usual one. The usual one is the median, not the fastest: one fast pair (two
  // nodes on one switch, or a link whose ends had the CPUs to themselves while the others
  // shared theirs) would otherwise make every ordinary link read as slow.
  if (!links.empty()) {
    const auto [slowest, fastest] = std::minmax_element(
        links.begin(), links.end(), [](const Link& a, const Link& b) { return a.mb_s < b.mb_s; });
    text += "ddprun: preflight: links " + mb_s_text(slowest->mb_s) + " to " +
            mb_s_text(fastest->mb_s) + "; the slowest: node " +
            std::to_string(slowest->from->node_rank) + " (" + slowest->from->host + ") to " +
            slowest->to + "\n";
    std::vector<double> speeds;
    for (const Link& link : links) speeds.push_back(link.mb_s);
    const auto middle = speeds.begin() + static_cast<std::ptrdiff_t>(speeds.size() / 2);
    std::nth_element(speeds.begin(), middle, speeds.end());  // the upper median when even
    const double median = *middle;
    for (const Link& link : links) {
      if (link.mb_s < expect.slow_link_share * median) {
        problems.push_back("node " + std::to_string(link.from->node_rank) + " (" + link.from->host +
                           "): its link to " + link.to + " carries " + mb_s_text(link.mb_s) +
                           ", the median link " + mb_s_text(median) +
                           " (a ring all-reduce runs at the slowest link's pace: check that "
                           "node's network interface and cabling)");
      }
    }
  }
  for (const auto& problem : problems) text += "ddprun: error: preflight: " + problem + "\n";
  if (problems.empty()) text += "ddprun: preflight: every node is ready\n";
  summary.text = std::move(text);
  summary.ok = problems.empty();
  return summary;
}

int run_check(const Options& options, const PlanInputs& inputs, const LaunchPlan& plan,
              const Environment& env, std::ostream& out) {
  const auto this_node = [&] {
    std::vector<std::string> paths = options.check_paths;
    if (options.log_dir) paths.insert(paths.begin(), *options.log_dir);
    NodeCheck check =
        check_this_node(plan.this_node, inputs.host.hostname, plan.master_addr, plan.master_port,
                        plan.program.front(), env, inputs.visible_gpus, paths);
    try {
      check.topology = topology_summary(inputs.topology ? *inputs.topology : read_topology());
    } catch (const Error& error) {
      check.topology = std::string("unknown: ") + error.what();
    }
    for (const RankPlacement& placement : plan.placement.local) {
      check.placement.push_back(placement_text(placement));
    }
    // Every node at once, each to the next on the port after the master port.
    if (options.check_bandwidth && plan.nodes.size() > 1) {
      const auto& next =
          plan.nodes[(static_cast<std::size_t>(plan.this_node) + 1) % plan.nodes.size()];
      check.link_to = "node " + std::to_string(next.node_rank) + " (" + next.host + ")";
      const int port = plan.master_port + 1;
      const UniqueFd listener = listen_on(port);
      if (!listener.valid()) {
        const std::string holder = describe_port_user(port);
        check.link_error = "port " + std::to_string(port) + " is busy on " + inputs.host.hostname +
                           (holder.empty() ? "" : " (" + holder + ")");
      } else {
        const LinkMeasurement link =
            measure_ring_link(listener.get(), next.host, port, RingRounds{}, kRingTimeout);
        check.link_mb_s = link.mb_per_s();
        check.link_error = link.error;
      }
    }
    return check;
  };
  if (options.agent) {
    out << node_check_line(this_node());
    return kExitOk;
  }
  // The master port answers while the nodes check it (on the master node, the head).
  const UniqueFd listener = plan.this_node == 0 ? listen_on(plan.master_port) : UniqueFd();
  std::vector<NodeReport> reports(plan.nodes.size());
  const AgentLaunches launches =
      agent_launches(agent_options(options), inputs, plan, env, this_executable());
  if (inputs.launcher == LauncherKind::kLocal) {
    for (auto& report : reports) report.failure = "not reached: ddprun runs once per node here";
  }
  // This node's own answers: at the same time as the agents', since with --bandwidth every
  // node's part of the ring must run at once (a thread, made after SignalChannel below has
  // blocked the signals it inherits).
  std::thread local;
  const auto check_here = [&] {
    reports[static_cast<std::size_t>(plan.this_node)].check = this_node();
  };
  std::vector<SpawnSpec> specs;
  std::vector<std::string> hellos;
  for (const ChildSpec& agent : launches.agents) {
    specs.push_back({agent.path, agent.argv, agent.env});
    hellos.push_back(agent.hello);
  }
  PreflightExpect expect;
  const bool from_gpus = options.nproc_per_node == "gpu" || options.nproc_per_node == "auto";
  if (options.gpus_per_proc) {
    expect.gpus_per_worker = *options.gpus_per_proc;
    expect.workers_from_gpus = from_gpus;
  } else if (options.nproc_per_node == "gpu") {
    expect.gpus_per_worker = 1;
    expect.workers_from_gpus = true;
  }
  expect.asked_at = static_cast<std::int64_t>(std::time(nullptr));
  SignalChannel signals;
  if (launches.local_workers) local = std::thread(check_here);
  const auto runs = run_all_captured(signals, std::move(specs), hellos, kAgentTimeoutMs);
  if (local.joinable()) local.join();
  expect.answered_by = static_cast<std::int64_t>(std::time(nullptr));
  for (std::size_t i = 0; i < runs.size(); ++i) {
    collect_checks(runs[i], reports, launches.agents[i].node_rank);
  }
  const PreflightSummary summary = format_preflight(plan, reports, expect);
  out << summary.text;
  return summary.ok ? kExitOk : 1;
}

}  // namespace ddprun
