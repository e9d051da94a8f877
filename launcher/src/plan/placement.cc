#include "plan/placement.h"

#include <algorithm>
#include <set>

#include "ddprun/contract/errors.h"

namespace ddprun {

namespace {

constexpr std::string_view kPlacementHint =
    "see docs/placement.md; --numa-binding none (the default) binds nothing";

bool all_digits(std::string_view text) {
  return !text.empty() && text.size() <= 6 &&
         text.find_first_not_of("0123456789") == std::string_view::npos;
}

CpuList unite(const CpuList& a, const CpuList& b) {
  CpuList both;
  std::set_union(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(both));
  return both;
}

int gpu_by_uuid(const NodeTopology& topology, const std::string& uuid, const std::string& entry) {
  int found = -1;
  for (std::size_t i = 0; i < topology.gpus.size(); ++i) {
    const std::string& known = topology.gpus[i].uuid;
    // CUDA takes any unique prefix of a UUID, as nvidia-smi does.
    if (!known.empty() && known.compare(0, uuid.size(), uuid) == 0) {
      if (found >= 0) throw UsageError("GPU " + entry + ": more than one GPU of this node matches");
      found = static_cast<int>(i);
    }
  }
  if (found < 0) {
    throw UsageError("GPU " + entry + ": no GPU of this node has that UUID",
                     "the NVIDIA driver names each GPU's UUID in "
                     "/proc/driver/nvidia/gpus/BUS/information; compare with nvidia-smi -L");
  }
  return found;
}

// The home of each rank: the NUMA nodes (indices) whose CPUs it may take.
std::vector<std::vector<int>> home_numa_nodes(const NodeTopology& topology,
                                              const PlacementRequest& request,
                                              const CpuList& allowed,
                                              std::vector<std::vector<int>>& gpus_of_rank) {
  std::vector<int> usable;  // NUMA nodes with an allowed CPU
  for (std::size_t n = 0; n < topology.numa_nodes.size(); ++n) {
    if (!intersect(topology.numa_nodes[n].cpus, allowed).empty())
      usable.push_back(static_cast<int>(n));
  }
  std::vector<std::vector<int>> homes(static_cast<std::size_t>(request.nproc));
  gpus_of_rank.assign(static_cast<std::size_t>(request.nproc), {});
  const bool by_gpu = request.mode != BindMode::kCores && request.mode != BindMode::kNuma;
  for (int r = 0; r < request.nproc; ++r) {
    auto& home = homes[static_cast<std::size_t>(r)];
    const auto rank = static_cast<std::size_t>(r);
    if (by_gpu && rank < request.rank_gpus.size() && !request.rank_gpus[rank].empty()) {
      for (const std::string& entry : request.rank_gpus[rank]) {
        const int gpu = physical_gpu(topology, entry, request);
        gpus_of_rank[rank].push_back(gpu);
        for (int n : topology.gpus[static_cast<std::size_t>(gpu)].numa_nodes) home.push_back(n);
      }
      std::sort(home.begin(), home.end());
      home.erase(std::unique(home.begin(), home.end()), home.end());
      if (home.empty()) home = usable;  // a GPU hwloc placed nowhere: near every node
    } else if (request.mode == BindMode::kCores || usable.empty()) {
      home = usable;
    } else {
      // No GPU: ranks go to the NUMA nodes in blocks, the first ones to the first node.
      const auto m = usable.size();
      home = {usable[static_cast<std::size_t>(r) * m / static_cast<std::size_t>(request.nproc)]};
    }
  }
  return homes;
}

std::string numa_names(const NodeTopology& topology, const std::vector<int>& nodes) {
  std::string text;
  for (int n : nodes) {
    text += text.empty() ? "" : ",";
    text += std::to_string(topology.numa_nodes[static_cast<std::size_t>(n)].os_index);
  }
  return text.empty() ? "-" : text;
}

// How close network card `nic` is to `gpu`: PCI bridges in common first, then NUMA.
int closeness(const PciDevice& gpu, const PciDevice& nic) {
  std::size_t shared = 0;
  while (shared < gpu.path.size() && shared < nic.path.size() &&
         gpu.path[shared] == nic.path[shared]) {
    ++shared;
  }
  bool same_numa = false;
  for (int n : gpu.numa_nodes) {
    same_numa = same_numa || std::count(nic.numa_nodes.begin(), nic.numa_nodes.end(), n) > 0;
  }
  return static_cast<int>(shared) * 2 + (same_numa ? 1 : 0);
}

std::string nic_name(const PciDevice& nic) {
  return !nic.ib_name.empty() ? nic.ib_name : !nic.net_name.empty() ? nic.net_name : nic.bus_id;
}

std::string nearest_nic(const NodeTopology& topology, const std::vector<int>& gpus,
                        const std::vector<int>& home) {
  const PciDevice* best = nullptr;
  int best_score = 0;
  for (const PciDevice& nic : topology.nics) {
    int score = 0;
    if (!gpus.empty()) {
      score = closeness(topology.gpus[static_cast<std::size_t>(gpus.front())], nic);
    } else {
      for (int n : home) score += std::count(nic.numa_nodes.begin(), nic.numa_nodes.end(), n) > 0;
    }
    if (score > best_score) {
      best = &nic;
      best_score = score;
    }
  }
  return best == nullptr ? std::string() : nic_name(*best);
}

}  // namespace

std::optional<BindMode> parse_numa_binding(std::string_view text) {
  if (text == "none") return BindMode::kNone;
  if (text == "node") return BindMode::kNode;
  if (text == "socket") return BindMode::kSocket;
  if (text == "exclusive") return BindMode::kExclusive;
  if (text == "core-complex") return BindMode::kCoreComplex;
  return std::nullopt;
}

std::optional<BindMode> parse_cpu_bind(std::string_view text) {
  if (text == "none") return BindMode::kNone;
  if (text == "cores") return BindMode::kCores;
  if (text == "numa") return BindMode::kNuma;
  return std::nullopt;
}

std::string bind_mode_text(BindMode mode) {
  switch (mode) {
    case BindMode::kNone:
      return "none";
    case BindMode::kNode:
      return "--numa-binding node";
    case BindMode::kSocket:
      return "--numa-binding socket";
    case BindMode::kExclusive:
      return "--numa-binding exclusive";
    case BindMode::kCoreComplex:
      return "--numa-binding core-complex";
    case BindMode::kCores:
      return "--cpu-bind cores";
    case BindMode::kNuma:
      return "--cpu-bind numa";
  }
  return "none";
}

std::vector<int> cuda_renumbering(const std::vector<std::string>& visible,
                                  const std::vector<int>& scheduler_ids) {
  if (scheduler_ids.size() != visible.size()) return {};
  for (std::size_t i = 0; i < visible.size(); ++i) {
    if (visible[i] != std::to_string(i)) return {};
  }
  std::vector<int> ids = scheduler_ids;
  std::sort(ids.begin(), ids.end());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] != static_cast<int>(i)) return ids;
  }
  return {};
}

int physical_gpu(const NodeTopology& topology, const std::string& entry,
                 const PlacementRequest& request) {
  if (entry.rfind("GPU-", 0) == 0) return gpu_by_uuid(topology, entry, entry);
  if (entry.rfind("MIG-", 0) == 0) {
    const auto parent = request.mig_parents.find(entry);
    if (parent == request.mig_parents.end()) {
      throw UsageError("GPU " + entry + ": the GPU this MIG device belongs to is unknown",
                       "nvidia-smi -L lists MIG devices under their GPUs; it must be on PATH");
    }
    return gpu_by_uuid(topology, parent->second, entry);
  }
  if (!all_digits(entry)) throw UsageError("GPU " + entry + ": not a GPU index or UUID");
  auto index = static_cast<std::size_t>(std::stoul(entry));
  if (!request.renumbered.empty()) {
    if (index >= request.renumbered.size()) {
      throw UsageError("GPU " + entry + ": the scheduler gave this job " +
                       std::to_string(request.renumbered.size()) + " GPU(s)");
    }
    index = static_cast<std::size_t>(request.renumbered[index]);
  }
  if (index >= topology.gpus.size()) {
    throw UsageError("GPU " + entry + ": this node has " + std::to_string(topology.gpus.size()) +
                         " GPU(s) in its topology (indices follow PCI bus order, as nvidia-smi's)",
                     std::string(kPlacementHint));
  }
  return static_cast<int>(index);
}

std::vector<RankPlacement> place_ranks(const NodeTopology& topology,
                                       const PlacementRequest& request) {
  std::vector<RankPlacement> placements;
  if (request.mode == BindMode::kNone || request.nproc <= 0) return placements;
  const std::string mode = bind_mode_text(request.mode);
  CpuList allowed = topology.allowed_cpus;
  if (!request.inherited.empty()) {
    allowed = allowed.empty() ? request.inherited : intersect(allowed, request.inherited);
  }
  if (allowed.empty()) {
    throw UsageError(mode + ": this node's topology leaves no CPU that ddprun may use",
                     std::string(kPlacementHint));
  }
  std::vector<std::vector<int>> gpus_of_rank;
  const auto homes = home_numa_nodes(topology, request, allowed, gpus_of_rank);
  // Ranks that share a home split it (exclusive, core-complex, cores): count them.
  std::map<std::vector<int>, std::vector<int>> sharing;  // home -> local ranks, in order
  for (int r = 0; r < request.nproc; ++r) sharing[homes[static_cast<std::size_t>(r)]].push_back(r);

  for (int r = 0; r < request.nproc; ++r) {
    const auto& home = homes[static_cast<std::size_t>(r)];
    const auto in_home = [&](const TopologyCore& core) {
      return request.mode == BindMode::kCores || topology.numa_nodes.empty() ||
             std::count(home.begin(), home.end(), core.numa) > 0;
    };
    std::vector<const TopologyCore*> cores;  // usable cores of the home, in topology order
    for (const TopologyCore& core : topology.cores) {
      if (in_home(core) && !intersect(core.cpus, allowed).empty()) cores.push_back(&core);
    }
    const auto& group = sharing[home];
    const auto k = group.size();
    const auto i =
        static_cast<std::size_t>(std::find(group.begin(), group.end(), r) - group.begin());
    const std::string where = "NUMA node " + numa_names(topology, home);
    CpuList cpus;
    switch (request.mode) {
      case BindMode::kNode:
      case BindMode::kNuma:
        for (const TopologyCore* core : cores) cpus = unite(cpus, core->cpus);
        break;
      case BindMode::kSocket: {
        std::set<int> packages;
        for (const TopologyCore* core : cores) packages.insert(core->package);
        for (const TopologyCore& core : topology.cores) {
          if (packages.count(core.package) > 0) cpus = unite(cpus, core.cpus);
        }
        break;
      }
      case BindMode::kExclusive:
      case BindMode::kCores: {
        if (cores.size() >= k) {
          for (std::size_t c = i * cores.size() / k; c < (i + 1) * cores.size() / k; ++c) {
            cpus = unite(cpus, cores[c]->cpus);
          }
          break;
        }
        // Fewer whole cores than ranks (a 2-CPU VM may be one core of 2 threads): each rank
        // still gets CPUs of its own, hardware threads in topology order.
        CpuList threads;
        for (const TopologyCore* core : cores) {
          const CpuList mine = intersect(core->cpus, allowed);
          threads.insert(threads.end(), mine.begin(), mine.end());
        }
        if (threads.size() < k) {
          throw UsageError(
              mode + ": " + std::to_string(k) + " ranks share " +
                  (request.mode == BindMode::kCores ? std::string("this node") : where) +
                  ", which has " + std::to_string(threads.size()) +
                  " CPU(s) this job may use (CPUs " + cpulist_text(allowed) + ")",
              "run fewer workers per node, or --numa-binding node to share the CPUs");
        }
        for (std::size_t t = i * threads.size() / k; t < (i + 1) * threads.size() / k; ++t) {
          cpus = unite(cpus, {threads[t]});
        }
        break;
      }
      case BindMode::kCoreComplex: {
        std::vector<int> complexes;  // L3 caches of the home, in topology order
        for (const TopologyCore* core : cores) {
          if (std::find(complexes.begin(), complexes.end(), core->l3) == complexes.end()) {
            complexes.push_back(core->l3);
          }
        }
        if (complexes.size() < k) {
          throw UsageError(mode + ": " + std::to_string(k) + " ranks share " + where +
                               ", which has " + std::to_string(complexes.size()) +
                               " core complex(es) (L3 caches) this job may use",
                           "use --numa-binding exclusive to split the cores instead");
        }
        for (const TopologyCore* core : cores) {
          if (core->l3 == complexes[i]) cpus = unite(cpus, core->cpus);
        }
        break;
      }
      case BindMode::kNone:
        break;
    }
    cpus = intersect(cpus, allowed);
    if (cpus.empty()) {
      throw UsageError(mode + ": local rank " + std::to_string(r) + " would get no CPU: " + where +
                           " has none this job may use (CPUs " + cpulist_text(allowed) + ")",
                       std::string(kPlacementHint));
    }
    RankPlacement& placement = placements.emplace_back();
    placement.cpus = std::move(cpus);
    for (const TopologyCore& core : topology.cores) {
      if (!intersect(core.cpus, placement.cpus).empty()) ++placement.cores;
    }
    for (const TopologyNuma& numa : topology.numa_nodes) {
      if (!intersect(numa.cpus, placement.cpus).empty())
        placement.numa_nodes.push_back(numa.os_index);
    }
    for (int gpu : gpus_of_rank[static_cast<std::size_t>(r)]) {
      placement.gpus.push_back(topology.gpus[static_cast<std::size_t>(gpu)].bus_id);
    }
    placement.nic = nearest_nic(topology, gpus_of_rank[static_cast<std::size_t>(r)], home);
  }
  for (RankPlacement& placement : placements) {
    placement.sharers = 0;
    for (const RankPlacement& other : placements) {
      placement.sharers += intersect(placement.cpus, other.cpus).empty() ? 0 : 1;
    }
  }
  return placements;
}

std::map<std::string, std::string> parse_mig_parents(std::string_view text) {
  std::map<std::string, std::string> parents;
  std::string gpu;
  // "(UUID: GPU-...)": the UUID after "UUID: ", up to the parenthesis.
  const auto uuid_in = [](std::string_view line, std::string_view prefix) {
    const auto at = line.find(prefix);
    if (at == std::string_view::npos) return std::string();
    const auto begin = at + 6;
    const auto end = line.find_first_of(") \t", begin);
    return std::string(line.substr(begin, end == std::string_view::npos ? end : end - begin));
  };
  std::size_t start = 0;
  while (start < text.size()) {
    auto end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(start, end - start);
    start = end + 1;
    const std::string gpu_uuid = uuid_in(line, "UUID: GPU-");
    if (!gpu_uuid.empty()) {
      gpu = gpu_uuid;
      continue;
    }
    const std::string mig_uuid = uuid_in(line, "UUID: MIG-");
    if (!mig_uuid.empty() && !gpu.empty()) parents[mig_uuid] = gpu;
  }
  return parents;
}

std::string topology_summary(const NodeTopology& topology) {
  std::size_t cpus = 0;
  for (const TopologyCore& core : topology.cores) cpus += core.cpus.size();
  const auto count = [](std::size_t n, const char* one, const char* many) {
    return std::to_string(n) + " " + (n == 1 ? one : many);
  };
  return count(static_cast<std::size_t>(topology.packages), "package", "packages") + ", " +
         count(topology.numa_nodes.size(), "NUMA node", "NUMA nodes") + ", " +
         count(topology.cores.size(), "core", "cores") + ", " + count(cpus, "CPU", "CPUs") + " (" +
         std::to_string(topology.allowed_cpus.size()) + " allowed), " +
         count(topology.gpus.size(), "GPU", "GPUs") + ", " +
         count(topology.nics.size(), "NIC", "NICs");
}

std::string placement_text(const RankPlacement& placement) {
  std::string text = "CPUs " + cpulist_text(placement.cpus) + " (" +
                     std::to_string(placement.cores) +
                     (placement.cores == 1 ? " core)" : " cores)");
  std::string numa;
  for (int n : placement.numa_nodes) numa += (numa.empty() ? "" : ",") + std::to_string(n);
  text += ", NUMA " + (numa.empty() ? std::string("-") : numa);
  if (!placement.gpus.empty()) {
    text += placement.gpus.size() == 1 ? ", GPU " : ", GPUs ";
    for (std::size_t g = 0; g < placement.gpus.size(); ++g)
      text += (g ? "," : "") + placement.gpus[g];
  }
  if (!placement.nic.empty()) text += ", NIC " + placement.nic;
  return text;
}

}  // namespace ddprun
