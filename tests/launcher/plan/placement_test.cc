// Placement on node shapes users have (topology_shapes.h), loaded through hwloc's XML
// reader as a saved topology would be: which CPUs, NUMA node and NIC each rank gets.

#include "plan/placement.h"

#include <gtest/gtest.h>

#include "ddprun/contract/errors.h"
#include "plan/topology.h"
#include "topology_shapes.h"

namespace ddprun {
namespace {

using testing::Shape;

CpuList cpus(const std::string& text) {
  bool ok = false;
  CpuList list = parse_cpulist(text, ok);
  EXPECT_TRUE(ok) << text;
  return list;
}

// Each of `nproc` ranks owns one GPU, named as CUDA_VISIBLE_DEVICES entries `visible`.
PlacementRequest one_gpu_each(BindMode mode, const std::vector<std::string>& visible) {
  PlacementRequest request;
  request.mode = mode;
  request.nproc = static_cast<int>(visible.size());
  for (const auto& entry : visible) request.rank_gpus.push_back({entry});
  return request;
}

std::vector<std::string> indices(int n) {
  std::vector<std::string> list;
  for (int i = 0; i < n; ++i) list.push_back(std::to_string(i));
  return list;
}

std::string error_of(const NodeTopology& topology, const PlacementRequest& request) {
  try {
    place_ranks(topology, request);
  } catch (const UsageError& error) {
    return error.what();
  }
  return "no error";
}

TEST(Topology, ReadsTheTwoSocketShapeFromXml) {
  const NodeTopology topology = topology_from_xml(shape_xml(testing::two_socket_8gpu()));
  EXPECT_FALSE(topology.this_system);
  EXPECT_EQ(topology.packages, 2);
  ASSERT_EQ(topology.numa_nodes.size(), 2u);
  EXPECT_EQ(cpulist_text(topology.numa_nodes[1].cpus), "16-31,48-63");
  EXPECT_EQ(topology.cores.size(), 32u);
  EXPECT_EQ(cpulist_text(topology.cores[0].cpus), "0,32");
  ASSERT_EQ(topology.gpus.size(), 8u);
  EXPECT_EQ(topology.gpus[5].bus_id, "0000:23:00.0");
  EXPECT_EQ(topology.gpus[5].uuid, "GPU-00000005-aaaa-bbbb-cccc-000000000005");
  EXPECT_EQ(topology.gpus[5].numa_nodes, std::vector<int>{1});
  ASSERT_EQ(topology.nics.size(), 4u);
  EXPECT_EQ(topology.nics[2].ib_name, "mlx5_2");
  EXPECT_EQ(topology.nics[2].net_name, "ib2");
  EXPECT_EQ(topology_summary(topology),
            "2 packages, 2 NUMA nodes, 32 cores, 64 CPUs (64 allowed), 8 GPUs, 4 NICs");
}

TEST(Topology, ThisMachineHasCoresAndAllowedCpus) {
  const NodeTopology topology = read_topology();
  EXPECT_TRUE(topology.this_system);
  EXPECT_FALSE(topology.cores.empty());
  EXPECT_FALSE(topology.allowed_cpus.empty());
  EXPECT_GE(topology.numa_nodes.size(), 1u);
}

TEST(Topology, BadXmlIsOneConfigError) {
  EXPECT_THROW(topology_from_xml("<topology>not hwloc"), ConfigError);
  EXPECT_THROW(read_topology("/nonexistent/topology.xml"), ConfigError);
}

TEST(Placement, NodeModeFollowsEachGpuToItsSocket) {
  const NodeTopology topology = topology_from_xml(shape_xml(testing::two_socket_8gpu()));
  const auto placed = place_ranks(topology, one_gpu_each(BindMode::kNode, indices(8)));
  ASSERT_EQ(placed.size(), 8u);
  for (int r = 0; r < 8; ++r) {
    const auto& p = placed[static_cast<std::size_t>(r)];
    EXPECT_EQ(cpulist_text(p.cpus), r < 4 ? "0-15,32-47" : "16-31,48-63") << r;
    EXPECT_EQ(p.numa_nodes, std::vector<int>{r / 4});
    EXPECT_EQ(p.cores, 16);
    EXPECT_EQ(p.sharers, 4) << "four ranks on each socket";
    EXPECT_EQ(p.nic, "mlx5_" + std::to_string(r / 2)) << "the NIC behind the same switch";
  }
  EXPECT_EQ(placement_text(placed[6]),
            "CPUs 16-31,48-63 (16 cores), NUMA 1, GPU 0000:24:00.0, NIC mlx5_3");
}

TEST(Placement, ShuffledVisibleDevicesAreFollowedNotLocalRank) {
  const NodeTopology topology = topology_from_xml(shape_xml(testing::two_socket_8gpu()));
  const auto placed = place_ranks(topology, one_gpu_each(BindMode::kNode, {"4", "0", "7", "1"}));
  EXPECT_EQ(placed[0].numa_nodes, std::vector<int>{1});
  EXPECT_EQ(placed[0].gpus, std::vector<std::string>{"0000:22:00.0"});
  EXPECT_EQ(placed[1].numa_nodes, std::vector<int>{0});
  EXPECT_EQ(placed[2].numa_nodes, std::vector<int>{1});
  EXPECT_EQ(placed[2].nic, "mlx5_3");
  EXPECT_EQ(placed[3].numa_nodes, std::vector<int>{0});
}

TEST(Placement, UuidsAndUniquePrefixesNameTheirGpu) {
  const NodeTopology topology = topology_from_xml(shape_xml(testing::two_socket_8gpu()));
  const auto placed = place_ranks(
      topology,
      one_gpu_each(BindMode::kNode, {"GPU-00000006-aaaa-bbbb-cccc-000000000006", "GPU-00000002"}));
  EXPECT_EQ(placed[0].gpus, std::vector<std::string>{"0000:24:00.0"});
  EXPECT_EQ(placed[0].numa_nodes, std::vector<int>{1});
  EXPECT_EQ(placed[1].gpus, std::vector<std::string>{"0000:04:00.0"});
  EXPECT_NE(
      error_of(topology, one_gpu_each(BindMode::kNode, {"GPU-0000000"})).find("more than one"),
      std::string::npos);
  EXPECT_NE(
      error_of(topology, one_gpu_each(BindMode::kNode, {"GPU-ffff"})).find("no GPU of this node"),
      std::string::npos);
}

TEST(Placement, MigDevicesAreOnTheirParentGpu) {
  const NodeTopology topology = topology_from_xml(shape_xml(testing::two_socket_8gpu()));
  const auto parents = parse_mig_parents(
      "GPU 0: NVIDIA H100 (UUID: GPU-00000005-aaaa-bbbb-cccc-000000000005)\n"
      "  MIG 1g.10gb     Device  0: (UUID: MIG-1111)\n"
      "  MIG 1g.10gb     Device  1: (UUID: MIG-2222)\n"
      "GPU 1: NVIDIA H100 (UUID: GPU-00000001-aaaa-bbbb-cccc-000000000001)\n"
      "  MIG 3g.40gb     Device  0: (UUID: MIG-3333)\n");
  ASSERT_EQ(parents.size(), 3u);
  EXPECT_EQ(parents.at("MIG-2222"), "GPU-00000005-aaaa-bbbb-cccc-000000000005");
  PlacementRequest request = one_gpu_each(BindMode::kNode, {"MIG-1111", "MIG-3333"});
  request.mig_parents = parents;
  const auto placed = place_ranks(topology, request);
  EXPECT_EQ(placed[0].numa_nodes, std::vector<int>{1});
  EXPECT_EQ(placed[1].numa_nodes, std::vector<int>{0});
  request.mig_parents.clear();
  EXPECT_NE(error_of(topology, request).find("MIG device belongs to is unknown"),
            std::string::npos);
}

TEST(Placement, SchedulerRenumberingInsideADeviceCgroup) {
  // Slurm gave GPUs 5 and 6; inside the cgroup CUDA calls them 0 and 1.
  EXPECT_EQ(cuda_renumbering({"0", "1"}, {6, 5}), (std::vector<int>{5, 6}));
  EXPECT_TRUE(cuda_renumbering({"5", "6"}, {5, 6}).empty()) << "no cgroup: the ids are CUDA's";
  EXPECT_TRUE(cuda_renumbering({"0", "1"}, {0, 1}).empty());
  EXPECT_TRUE(cuda_renumbering({"0", "1"}, {}).empty());
  const NodeTopology topology = topology_from_xml(shape_xml(testing::two_socket_8gpu()));
  PlacementRequest request = one_gpu_each(BindMode::kNode, {"0", "1"});
  request.renumbered = {3, 4};
  const auto placed = place_ranks(topology, request);
  EXPECT_EQ(placed[0].numa_nodes, std::vector<int>{0});
  EXPECT_EQ(placed[1].numa_nodes, std::vector<int>{1});
  EXPECT_EQ(placed[1].gpus, std::vector<std::string>{"0000:22:00.0"});
}

TEST(Placement, ExclusiveSplitsEachSocketsCoresAmongItsGpus) {
  const NodeTopology topology = topology_from_xml(shape_xml(testing::two_socket_8gpu()));
  const auto placed = place_ranks(topology, one_gpu_each(BindMode::kExclusive, indices(8)));
  EXPECT_EQ(cpulist_text(placed[0].cpus), "0-3,32-35");
  EXPECT_EQ(cpulist_text(placed[3].cpus), "12-15,44-47");
  EXPECT_EQ(cpulist_text(placed[4].cpus), "16-19,48-51");
  CpuList seen;
  for (const auto& p : placed) {
    EXPECT_EQ(p.cores, 4);
    EXPECT_EQ(p.sharers, 1) << "its cores are its own";
    EXPECT_TRUE(intersect(seen, p.cpus).empty()) << "no CPU given twice";
    seen.insert(seen.end(), p.cpus.begin(), p.cpus.end());
    std::sort(seen.begin(), seen.end());
  }
  EXPECT_EQ(seen.size(), 64u);
}

TEST(Placement, SocketModeOnFourNumaDomainsTakesTheWholePackage) {
  const NodeTopology topology = topology_from_xml(shape_xml(testing::four_numa_8gpu()));
  ASSERT_EQ(topology.numa_nodes.size(), 4u);
  const auto placed = place_ranks(topology, one_gpu_each(BindMode::kSocket, indices(8)));
  EXPECT_EQ(cpulist_text(placed[0].cpus), "0-15");
  EXPECT_EQ(placed[0].numa_nodes, (std::vector<int>{0, 1}));
  EXPECT_EQ(cpulist_text(placed[5].cpus), "16-31");
  const auto by_node = place_ranks(topology, one_gpu_each(BindMode::kNode, indices(8)));
  EXPECT_EQ(cpulist_text(by_node[2].cpus), "8-15");
  EXPECT_EQ(by_node[2].nic, "mlx5_1");
  const auto exclusive = place_ranks(topology, one_gpu_each(BindMode::kExclusive, indices(8)));
  EXPECT_EQ(cpulist_text(exclusive[2].cpus), "8-11");
  EXPECT_EQ(cpulist_text(exclusive[3].cpus), "12-15");
}

TEST(Placement, CoreComplexGivesEachRankItsOwnL3) {
  const NodeTopology topology = topology_from_xml(shape_xml(testing::four_numa_8gpu()));
  const auto placed = place_ranks(topology, one_gpu_each(BindMode::kCoreComplex, indices(8)));
  EXPECT_EQ(cpulist_text(placed[0].cpus), "0-3");
  EXPECT_EQ(cpulist_text(placed[1].cpus), "4-7");
  EXPECT_EQ(cpulist_text(placed[7].cpus), "28-31");
  // Three ranks on GPUs of one domain, which has two core complexes.
  const std::string error =
      error_of(topology, one_gpu_each(BindMode::kCoreComplex, {"0", "1", "0"}));
  EXPECT_NE(error.find("3 ranks share NUMA node 0, which has 2 core complex(es)"),
            std::string::npos)
      << error;
}

TEST(Placement, GraceLikeNodeGivesEachRankItsPackage) {
  const NodeTopology topology = topology_from_xml(shape_xml(testing::grace_like()));
  const auto placed = place_ranks(topology, one_gpu_each(BindMode::kNode, indices(4)));
  for (int r = 0; r < 4; ++r) {
    const auto& p = placed[static_cast<std::size_t>(r)];
    EXPECT_EQ(cpulist_text(p.cpus), std::to_string(72 * r) + "-" + std::to_string(72 * r + 71));
    EXPECT_EQ(p.cores, 72);
    EXPECT_EQ(p.nic, "mlx5_" + std::to_string(r));
  }
}

TEST(Placement, PartialCpusetIsNeverLeft) {
  // The cgroup leaves out half of socket 1: cores 24-31 and their siblings.
  Shape shape = testing::two_socket_8gpu();
  shape.allowed = "0-23,32-55";
  const NodeTopology topology = topology_from_xml(shape_xml(shape));
  EXPECT_EQ(cpulist_text(topology.allowed_cpus), "0-23,32-55");
  const auto placed = place_ranks(topology, one_gpu_each(BindMode::kExclusive, indices(8)));
  EXPECT_EQ(cpulist_text(placed[0].cpus), "0-3,32-35");
  EXPECT_EQ(cpulist_text(placed[4].cpus), "16-17,48-49") << "8 cores left on socket 1, 2 each";
  EXPECT_EQ(cpulist_text(placed[7].cpus), "22-23,54-55");
  for (const auto& p : placed) EXPECT_EQ(intersect(p.cpus, topology.allowed_cpus), p.cpus);
  const auto node = place_ranks(topology, one_gpu_each(BindMode::kNode, indices(8)));
  EXPECT_EQ(cpulist_text(node[5].cpus), "16-23,48-55");
}

TEST(Placement, InheritedMaskIsNeverLeft) {
  const NodeTopology topology = topology_from_xml(shape_xml(testing::two_socket_8gpu()));
  PlacementRequest request = one_gpu_each(BindMode::kNode, indices(4));
  request.inherited = cpus("2-9");  // e.g. taskset -c 2-9, or Slurm's --cpu-bind
  for (const auto& p : place_ranks(topology, request)) EXPECT_EQ(cpulist_text(p.cpus), "2-9");
  // A GPU whose socket the mask leaves out entirely: one clear error, no fallback.
  request = one_gpu_each(BindMode::kNode, {"0", "5"});
  request.inherited = cpus("2-9");
  const std::string error = error_of(topology, request);
  EXPECT_NE(
      error.find("local rank 1 would get no CPU: NUMA node 1 has none this job may use (CPUs 2-9)"),
      std::string::npos)
      << error;
  request = one_gpu_each(BindMode::kExclusive, indices(4));
  request.inherited = cpus("0-2");
  EXPECT_NE(error_of(topology, request).find("4 ranks share NUMA node 0, which has 3 CPU(s)"),
            std::string::npos);
  // One core of two threads for two ranks: a thread each, still their own.
  request = one_gpu_each(BindMode::kExclusive, indices(2));
  request.inherited = cpus("0,32");
  const auto threads = place_ranks(topology, request);
  EXPECT_EQ(cpulist_text(threads[0].cpus), "0");
  EXPECT_EQ(cpulist_text(threads[1].cpus), "32");
  EXPECT_EQ(threads[1].sharers, 1);
}

TEST(Placement, CpuOnlyRanksSpreadOverNumaNodesInBlocks) {
  const NodeTopology topology = topology_from_xml(shape_xml(testing::two_socket_8gpu()));
  PlacementRequest request;
  request.mode = BindMode::kExclusive;
  request.nproc = 4;
  const auto placed = place_ranks(topology, request);
  EXPECT_EQ(cpulist_text(placed[0].cpus), "0-7,32-39");
  EXPECT_EQ(cpulist_text(placed[1].cpus), "8-15,40-47");
  EXPECT_EQ(cpulist_text(placed[2].cpus), "16-23,48-55");
  EXPECT_TRUE(placed[0].gpus.empty());
  request.mode = BindMode::kNuma;
  EXPECT_EQ(cpulist_text(place_ranks(topology, request)[3].cpus), "16-31,48-63");
}

TEST(Placement, CpuBindCoresSplitsTheNodeEvenly) {
  const NodeTopology topology = topology_from_xml(shape_xml(testing::four_numa_8gpu()));
  PlacementRequest request;
  request.mode = BindMode::kCores;
  request.nproc = 3;  // 32 cores: 10, 11, 11
  const auto placed = place_ranks(topology, request);
  EXPECT_EQ(cpulist_text(placed[0].cpus), "0-9");
  EXPECT_EQ(cpulist_text(placed[1].cpus), "10-20");
  EXPECT_EQ(cpulist_text(placed[2].cpus), "21-31");
  EXPECT_EQ(placed[1].numa_nodes, (std::vector<int>{1, 2}));
  request.nproc = 33;
  EXPECT_NE(error_of(topology, request).find("33 ranks share this node, which has 32 CPU(s)"),
            std::string::npos);
}

TEST(Placement, GpuIndexBeyondTheTopologyIsAnError) {
  const NodeTopology topology = topology_from_xml(shape_xml(testing::grace_like()));
  EXPECT_NE(error_of(topology, one_gpu_each(BindMode::kNode, {"4"})).find("this node has 4 GPU(s)"),
            std::string::npos);
}

TEST(Placement, ModesParseAsTorchrunSpellsThem) {
  EXPECT_EQ(parse_numa_binding("core-complex"), BindMode::kCoreComplex);
  EXPECT_EQ(parse_numa_binding("none"), BindMode::kNone);
  EXPECT_FALSE(parse_numa_binding("cores"));
  EXPECT_EQ(parse_cpu_bind("cores"), BindMode::kCores);
  EXPECT_FALSE(parse_cpu_bind("exclusive"));
}

TEST(Cpulist, ParsesAndPrintsTheKernelsForm) {
  EXPECT_EQ(cpulist_text(cpus("0-3,8,10-11")), "0-3,8,10-11");
  EXPECT_EQ(cpulist_text(cpus("3,1,2,2")), "1-3");
  EXPECT_EQ(cpulist_text(cpus("5\n")), "5");
  bool ok = true;
  for (const char* bad : {"1-", "a", "3-1", "1,,2", "-1"}) {
    parse_cpulist(bad, ok);
    EXPECT_FALSE(ok) << bad;
  }
}

TEST(Topology, UuidFromTheNvidiaDriversInformationFile) {
  EXPECT_EQ(uuid_from_nvidia_information("Model: \t\t NVIDIA H100\nIRQ: 1\n"
                                         "GPU UUID: \t GPU-5d5ba0d6-d33d\nVideo BIOS: 96\n"),
            "GPU-5d5ba0d6-d33d");
  EXPECT_EQ(uuid_from_nvidia_information("Model: x\n"), "");
}

}  // namespace
}  // namespace ddprun
