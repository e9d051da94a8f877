#pragma once
// Node shapes users have, written as hwloc XML (the format lstopo --of xml saves), so that
// placement is tested on 8-GPU and multi-socket nodes without the hardware.

#include <string>
#include <vector>

namespace ddprun::testing {

struct ShapeGpu {
  int numa = 0;        // the NUMA node (0-based, across packages) it hangs off
  int bus = 0;         // its PCI bus number: GPUs are numbered in bus order
  int pci_switch = 0;  // devices with the same switch number share a PCIe switch
  std::string uuid;    // NVIDIAUUID, as hwloc's NVML support records it; empty: none
};

struct ShapeNic {
  int numa = 0;
  int bus = 0;
  int pci_switch = 0;
  std::string ib_name;   // "mlx5_0"; empty: none
  std::string net_name;  // "ib0"; empty: none
};

struct Shape {
  int packages = 1;
  int numa_per_package = 1;
  int l3_per_numa = 1;  // core complexes
  int cores_per_l3 = 4;
  int threads_per_core = 1;  // CPU numbers: thread t of core c is c + t * (all cores)
  std::vector<ShapeGpu> gpus;
  std::vector<ShapeNic> nics;
  std::string allowed;  // the cgroup's CPUs as a cpulist; empty: all
};

// hwloc v2 XML for `shape`.
std::string shape_xml(const Shape& shape);

// The shapes of the issue: a 2-socket 8-GPU node (16 cores x 2 threads per socket, GPUs
// 0-3 on socket 0 behind two switches with mlx5_0/mlx5_1, GPUs 4-7 on socket 1 with
// mlx5_2/mlx5_3); an 8-GPU node with 4 NUMA domains (2 sockets x 2, 2 core complexes of 4
// cores each per domain, 2 GPUs per domain); a Grace-like node (4 packages of 72 cores,
// one GPU and one NIC each).
Shape two_socket_8gpu();
Shape four_numa_8gpu();
Shape grace_like();

}  // namespace ddprun::testing
