#pragma once
// This node's hardware as placement needs it (placement.h): cores and their CPUs, NUMA
// nodes, packages, L3 caches, and the PCI GPUs and network cards with the CPUs near them.
// Read with hwloc, the only file that includes it; the rest of ddprun sees plain values.

#include <string>
#include <string_view>
#include <vector>

namespace ddprun {

// Logical CPU numbers (the kernel's, as in /proc/self/status Cpus_allowed_list), sorted,
// each once.
using CpuList = std::vector<int>;

struct TopologyCore {
  CpuList cpus;      // its hardware threads
  int numa = -1;     // index into NodeTopology::numa_nodes; -1: none known
  int package = -1;  // the package's OS index
  int l3 = -1;       // index of its L3 cache (a core complex) on this node; -1: none
};

struct TopologyNuma {
  int os_index = 0;  // the kernel's NUMA node number
  CpuList cpus;
  int package = -1;  // the package's OS index; -1: spans several or none
};

struct PciDevice {
  std::string bus_id;           // "0000:17:00.0"
  unsigned class_id = 0;        // 0x0302 3D controller, 0x0207 InfiniBand, 0x0200 Ethernet
  unsigned vendor_id = 0;       // 0x10de NVIDIA, 0x1002 AMD, 0x15b3 Mellanox
  CpuList local_cpus;           // the CPUs of the nearest non-I/O object (its locality)
  std::vector<int> numa_nodes;  // indices into NodeTopology::numa_nodes near it
  std::vector<unsigned> path;   // hwloc ids of the bridges above it, root first
  std::string uuid;             // a GPU's "GPU-..." UUID when known; empty otherwise
  std::string ib_name;          // an OpenFabrics device on it ("mlx5_0"); empty if none
  std::string net_name;         // a network interface on it ("ib0", "eth0"); empty if none
};

struct NodeTopology {
  std::vector<TopologyCore> cores;  // in hwloc's logical order: neighbours stay together
  std::vector<TopologyNuma> numa_nodes;
  int packages = 0;
  CpuList allowed_cpus;         // what the cgroup cpuset lets this job use
  std::vector<PciDevice> gpus;  // NVIDIA and AMD display/3D controllers, in PCI bus order
  std::vector<PciDevice> nics;  // network and InfiniBand controllers, in PCI bus order
  bool this_system = true;      // false: read from XML (HWLOC_XMLFILE), another machine's
};

// This machine's topology, or the one in the hwloc XML file `xml_path` when not empty
// (lstopo --of xml writes one; hwloc itself also reads the file HWLOC_XMLFILE names). GPUs get
// their UUIDs from the NVIDIA driver's /proc/driver/nvidia/gpus/BUS/information when read from this
// machine, and from NVIDIAUUID infos in the XML. Throws ConfigError naming what failed.
NodeTopology read_topology(const std::string& xml_path = {});

// The same from XML text (tests write their node shapes so).
NodeTopology topology_from_xml(std::string_view xml);

// "GPU UUID" from the NVIDIA driver's information file; empty when absent.
std::string uuid_from_nvidia_information(std::string_view text);

// "0-3,8,10-11" for {0,1,2,3,8,10,11}; "" for none.
std::string cpulist_text(const CpuList& cpus);

// The inverse; nullopt-like empty result and `ok` false for text that is not a cpulist.
CpuList parse_cpulist(std::string_view text, bool& ok);

// The CPUs in both lists.
CpuList intersect(const CpuList& a, const CpuList& b);

}  // namespace ddprun
