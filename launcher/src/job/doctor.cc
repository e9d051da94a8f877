#include "job/doctor.h"

#include <ifaddrs.h>
#include <sys/resource.h>

#include <climits>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "ddprun/common/net.h"
#include "ddprun/contract/env_names.h"
#include "ddprun/contract/version.h"
#include "gpus.h"
#include "job/job_inputs.h"
#include "plan/host_facts.h"
#include "plan/plan.h"
#include "plan/rank_environment.h"
#include "run/child_set.h"
#include "schedulers.h"

namespace ddprun {
namespace {

constexpr int kTraceTimeoutMs = 5000;

std::string limit_text(int resource, bool bytes) {
  rlimit limit{};
  if (::getrlimit(resource, &limit) != 0) return "?";
  const auto one = [bytes](rlim_t value) -> std::string {
    if (value == RLIM_INFINITY) return "unlimited";
    if (bytes) return std::to_string(value / (1024 * 1024)) + " MB";
    return std::to_string(value);
  };
  return one(limit.rlim_cur) + " (max " + one(limit.rlim_max) + ")";
}

// Interface name and address for every IPv4/IPv6 address of this host.
std::vector<std::pair<std::string, std::string>> interfaces() {
  std::vector<std::pair<std::string, std::string>> result;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return result;
  for (const ifaddrs* entry = list; entry != nullptr; entry = entry->ifa_next) {
    std::string text = address_text(entry->ifa_addr);
    if (!text.empty()) result.emplace_back(entry->ifa_name, std::move(text));
  }
  ::freeifaddrs(list);
  return result;
}

// What the dynamic loader would load for `program` with `env` (ldd's own mechanism).
std::string library_trace(const std::string& program, const Environment& env) {
  SpawnSpec spec;
  spec.path = program;
  spec.argv = {program};
  spec.env = merge_environment(env, {{"LD_TRACE_LOADED_OBJECTS", "1"}});
  SignalChannel signals;
  auto runs = run_all_captured(signals, {std::move(spec)}, {}, kTraceTimeoutMs);
  return runs.front().out + runs.front().err;
}

std::string real_path(const std::string& path) {
  char resolved[PATH_MAX];
  return ::realpath(path.c_str(), resolved) != nullptr ? std::string(resolved) : path;
}

}  // namespace

std::string loaded_library(const std::string& trace, const std::string& prefix) {
  std::istringstream lines(trace);
  for (std::string line; std::getline(lines, line);) {
    const auto start = line.find_first_not_of(" \t");
    if (start == std::string::npos || line.compare(start, prefix.size(), prefix) != 0) continue;
    const auto arrow = line.find("=> ");
    if (arrow == std::string::npos) continue;
    const auto end = line.find(" (", arrow);
    return line.substr(arrow + 3, end == std::string::npos ? std::string::npos : end - arrow - 3);
  }
  return {};
}

DoctorRows gather_doctor_rows(const Options& options, const Environment& env,
                              const std::string& worker) {
  DoctorRows rows;
  const HostFacts host = read_host_facts();
  rows.emplace_back("ddprun", std::string(kVersion));
  rows.emplace_back("host", host.hostname + ", " + std::to_string(host.cpu_count) + " usable CPUs");
  try {
    const Cluster cluster =
        detect_cluster(env, read_file_from_disk, host, options.scheduler, options.hostfile);
    std::string sources;
    for (const auto& [name, value] : cluster.sources) sources += "\n" + name + "=" + value;
    rows.emplace_back("scheduler",
                      cluster.scheduler + (options.scheduler ? " (--scheduler)" : " (detected)") +
                          (cluster.job_id.empty() ? "" : ", job " + cluster.job_id) + sources);
    std::string nodes = std::to_string(cluster.nodes.size());
    for (std::size_t i = 0; i < cluster.nodes.size() && i < 16; ++i) {
      nodes += (i == 0 ? ": " : ", ") + cluster.nodes[i].host + " (" +
               std::to_string(cluster.nodes[i].slots) + " slots)";
    }
    if (cluster.nodes.size() > 16) nodes += ", ...";
    rows.emplace_back("nodes", nodes);
  } catch (const std::exception& e) {
    rows.emplace_back("scheduler", std::string("cannot read the job: ") + e.what());
  }
  const VisibleGpus gpus = node_gpus(env, host, read_file_from_disk);
  std::string gpu_text = std::to_string(gpus.devices.size());
  for (std::size_t i = 0; i < gpus.devices.size(); ++i) {
    gpu_text += (i == 0 ? ": " : ",") + gpus.devices[i];
  }
  if (gpus.source.empty()) {
    gpu_text += " (no CUDA_VISIBLE_DEVICES, no scheduler GPU variable, no /dev/nvidiaN)";
  } else if (gpus.source == "/dev/nvidiaN") {
    gpu_text += " (" + std::to_string(host.gpu_device_files) + " /dev/nvidiaN)";
  } else {
    gpu_text += " (" + gpus.source + "=" + gpus.source_value + ")";
  }
  rows.emplace_back("GPUs visible", gpu_text);
  try {
    const PlanInputs inputs =
        resolve_plan_inputs(options, env, read_file_from_disk, host, system_services(env), false);
    rows.emplace_back("this node", std::to_string(inputs.cluster.this_node.value_or(0)));
    std::string master = inputs.master_addr + ":" + std::to_string(inputs.master_port);
    const auto addresses = resolve_addresses(inputs.master_addr);
    const auto local = interfaces();
    for (const auto& address : addresses) {
      std::string via = "not an address of this host";
      for (const auto& [name, local_address] : local) {
        if (local_address == address) via = "interface " + name + " of this host";
      }
      master += "\n" + address + ": " + via;
    }
    if (addresses.empty()) master += "\ndoes not resolve here";
    rows.emplace_back("master", master);
    const SocketInterface& socket = inputs.socket_interface;
    rows.emplace_back("NCCL/gloo net", socket.name.empty()
                                           ? socket.reason
                                           : socket.name + " as " + env::kNcclSocketIfname +
                                                 " and " + env::kGlooSocketIfname +
                                                 " for the workers (" + socket.reason + ")");
  } catch (const std::exception& e) {
    rows.emplace_back("master", std::string("cannot plan here: ") + e.what());
  }
  std::string interface_text;
  for (const auto& [name, address] : interfaces()) {
    interface_text += (interface_text.empty() ? "" : "\n") + name + " " + address;
  }
  rows.emplace_back("interfaces", interface_text);
  if (!worker.empty()) {
    const std::string trace = library_trace(worker, env);
    const std::string torch = loaded_library(trace, "libtorch_cpu");
    const std::string blas = loaded_library(trace, "libblas");
    std::string text = worker;
    text += "\nLibTorch: " + (torch.empty() ? std::string("not linked") : real_path(torch));
    text += "\nBLAS: " + (blas.empty() ? std::string("not linked") : real_path(blas));
    if (blas.find("openblas") == std::string::npos &&
        real_path(blas).find("openblas") == std::string::npos && !blas.empty()) {
      text +=
          " (not OpenBLAS: if this is the reference BLAS, training is about 9x slower; install "
          "libopenblas0-pthread)";
    }
    for (const char* name : {"nccl", "gloo", "cudart"}) {
      const std::string found = loaded_library(trace, std::string("lib") + name);
      if (!found.empty()) text += "\n" + std::string(name) + ": " + real_path(found);
    }
    rows.emplace_back("worker", text);
  }
  rows.emplace_back("threads", std::string(env::kOmpNumThreads) + "=" +
                                   lookup(env, env::kOmpNumThreads).value_or("(unset)") + ", " +
                                   env::kOpenblasNumThreads + "=" +
                                   lookup(env, env::kOpenblasNumThreads).value_or("(unset)"));
  rows.emplace_back("ulimit", "open files " + limit_text(RLIMIT_NOFILE, false) + "\nprocesses " +
                                  limit_text(RLIMIT_NPROC, false) + "\nlocked memory " +
                                  limit_text(RLIMIT_MEMLOCK, true) + "\nstack " +
                                  limit_text(RLIMIT_STACK, true) + "\ncore files " +
                                  limit_text(RLIMIT_CORE, true));
  return rows;
}

std::string format_doctor(const DoctorRows& rows) {
  std::string out;
  for (const auto& [key, value] : rows) {
    std::string padded = "  " + key;
    padded.resize(16, ' ');
    std::istringstream lines(value);
    bool first = true;
    for (std::string line; std::getline(lines, line);) {
      out += (first ? padded : std::string(16, ' ')) + line + "\n";
      first = false;
    }
    if (first) out += padded + "\n";
  }
  return out;
}

std::string doctor_program(const Options& options, const Environment& env) {
  if (!options.program.empty()) return resolve_program(options.program.front(), env);
  std::error_code error;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) return {};
  const auto sibling = self.parent_path() / "ddp-train";
  return std::filesystem::exists(sibling, error) ? sibling.string() : std::string();
}

}  // namespace ddprun
