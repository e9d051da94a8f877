#include "plan/topology.h"

#include <hwloc.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>

#include "ddprun/contract/errors.h"

namespace ddprun {

namespace {

struct TopologyDeleter {
  void operator()(hwloc_topology* topology) const { hwloc_topology_destroy(topology); }
};
using TopologyHandle = std::unique_ptr<hwloc_topology, TopologyDeleter>;

CpuList cpus_of(hwloc_const_bitmap_t set) {
  CpuList cpus;
  if (set == nullptr) return cpus;
  for (int cpu = hwloc_bitmap_first(set); cpu >= 0; cpu = hwloc_bitmap_next(set, cpu)) {
    cpus.push_back(cpu);
  }
  return cpus;
}

bool is_gpu(const hwloc_obj_attr_u::hwloc_pcidev_attr_s& pci) {
  const bool display = pci.class_id == 0x0300 || pci.class_id == 0x0302;
  return display && (pci.vendor_id == 0x10de || pci.vendor_id == 0x1002);
}

bool is_nic(const hwloc_obj_attr_u::hwloc_pcidev_attr_s& pci) {
  return (pci.class_id >> 8) == 0x02 || pci.class_id == 0x0c06;
}

std::string bus_id_text(const hwloc_obj_attr_u::hwloc_pcidev_attr_s& pci) {
  char text[32];
  std::snprintf(text, sizeof text, "%04x:%02x:%02x.%x", static_cast<unsigned>(pci.domain),
                static_cast<unsigned>(pci.bus), static_cast<unsigned>(pci.dev),
                static_cast<unsigned>(pci.func));
  return text;
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return {};
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

PciDevice pci_device(hwloc_topology_t topology, hwloc_obj_t obj,
                     const std::vector<TopologyNuma>& numa_nodes, bool this_system) {
  PciDevice device;
  const hwloc_obj_attr_u::hwloc_pcidev_attr_s& pci = obj->attr->pcidev;
  device.bus_id = bus_id_text(pci);
  device.class_id = pci.class_id;
  device.vendor_id = pci.vendor_id;
  if (hwloc_obj_t near = hwloc_get_non_io_ancestor_obj(topology, obj)) {
    device.local_cpus = cpus_of(near->cpuset);
    for (std::size_t i = 0; i < numa_nodes.size(); ++i) {
      if (near->nodeset != nullptr &&
          hwloc_bitmap_isset(near->nodeset, static_cast<unsigned>(numa_nodes[i].os_index))) {
        device.numa_nodes.push_back(static_cast<int>(i));
      }
    }
  }
  for (hwloc_obj_t up = obj->parent; up != nullptr && hwloc_obj_type_is_io(up->type);
       up = up->parent) {
    device.path.insert(device.path.begin(), static_cast<unsigned>(up->gp_index));
  }
  if (const char* uuid = hwloc_obj_get_info_by_name(obj, "NVIDIAUUID")) device.uuid = uuid;
  for (hwloc_obj_t child = obj->io_first_child; child != nullptr; child = child->next_sibling) {
    if (child->type != HWLOC_OBJ_OS_DEVICE || child->name == nullptr) continue;
    if (const char* uuid = hwloc_obj_get_info_by_name(child, "NVIDIAUUID")) device.uuid = uuid;
    switch (child->attr->osdev.type) {
      case HWLOC_OBJ_OSDEV_OPENFABRICS:
        if (device.ib_name.empty()) device.ib_name = child->name;
        break;
      case HWLOC_OBJ_OSDEV_NETWORK:
        if (device.net_name.empty()) device.net_name = child->name;
        break;
      default:
        break;
    }
  }
  if (device.uuid.empty() && this_system && pci.vendor_id == 0x10de && is_gpu(pci)) {
    device.uuid = uuid_from_nvidia_information(
        read_text_file("/proc/driver/nvidia/gpus/" + device.bus_id + "/information"));
  }
  return device;
}

NodeTopology convert(hwloc_topology_t topology) {
  NodeTopology node;
  node.allowed_cpus = cpus_of(hwloc_topology_get_allowed_cpuset(topology));
  node.packages = std::max(0, hwloc_get_nbobjs_by_type(topology, HWLOC_OBJ_PACKAGE));
  const auto package_of = [&](hwloc_obj_t obj) {
    hwloc_obj_t package = hwloc_get_ancestor_obj_by_type(topology, HWLOC_OBJ_PACKAGE, obj);
    return package == nullptr ? -1 : static_cast<int>(package->os_index);
  };
  const int numa_count = hwloc_get_nbobjs_by_type(topology, HWLOC_OBJ_NUMANODE);
  for (int i = 0; i < numa_count; ++i) {
    hwloc_obj_t obj = hwloc_get_obj_by_type(topology, HWLOC_OBJ_NUMANODE, static_cast<unsigned>(i));
    node.numa_nodes.push_back(
        {static_cast<int>(obj->os_index), cpus_of(obj->cpuset), package_of(obj)});
  }
  // Cores; a topology without Core objects (some XML) gets one per CPU.
  hwloc_obj_type_t core_type = HWLOC_OBJ_CORE;
  if (hwloc_get_nbobjs_by_type(topology, HWLOC_OBJ_CORE) <= 0) core_type = HWLOC_OBJ_PU;
  const int core_count = hwloc_get_nbobjs_by_type(topology, core_type);
  for (int i = 0; i < core_count; ++i) {
    hwloc_obj_t obj = hwloc_get_obj_by_type(topology, core_type, static_cast<unsigned>(i));
    TopologyCore core;
    core.cpus = cpus_of(obj->cpuset);
    core.package = package_of(obj);
    if (hwloc_obj_t l3 = hwloc_get_ancestor_obj_by_type(topology, HWLOC_OBJ_L3CACHE, obj)) {
      core.l3 = static_cast<int>(l3->logical_index);
    }
    for (std::size_t n = 0; n < node.numa_nodes.size(); ++n) {
      hwloc_obj_t numa =
          hwloc_get_obj_by_type(topology, HWLOC_OBJ_NUMANODE, static_cast<unsigned>(n));
      if (hwloc_bitmap_intersects(numa->cpuset, obj->cpuset)) {
        core.numa = static_cast<int>(n);
        break;
      }
    }
    if (!core.cpus.empty()) node.cores.push_back(std::move(core));
  }
  const bool this_system = hwloc_topology_is_thissystem(topology) != 0;
  node.this_system = this_system;
  for (hwloc_obj_t obj = hwloc_get_next_pcidev(topology, nullptr); obj != nullptr;
       obj = hwloc_get_next_pcidev(topology, obj)) {
    if (is_gpu(obj->attr->pcidev)) {
      node.gpus.push_back(pci_device(topology, obj, node.numa_nodes, this_system));
    } else if (is_nic(obj->attr->pcidev)) {
      node.nics.push_back(pci_device(topology, obj, node.numa_nodes, this_system));
    }
  }
  const auto by_bus = [](const PciDevice& a, const PciDevice& b) { return a.bus_id < b.bus_id; };
  std::sort(node.gpus.begin(), node.gpus.end(), by_bus);
  std::sort(node.nics.begin(), node.nics.end(), by_bus);
  return node;
}

// Loads a topology; `configure` points it at XML when reading a saved one.
template <typename Configure>
NodeTopology load(Configure configure, const std::string& what) {
  hwloc_topology_t raw = nullptr;
  if (hwloc_topology_init(&raw) != 0) throw ConfigError("cannot start hwloc for " + what);
  TopologyHandle topology(raw);
  hwloc_topology_set_io_types_filter(raw, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  // Linux's sysfs gives the PCI devices, their bridges and locality, and the NICs. The
  // plugins below add nothing placement needs: libpciaccess ("pci") leaks from code it
  // unloads; "gl" and "opencl" probe X displays and OpenCL drivers (slow, and the dynamic
  // TLS of the libraries they load crashes LeakSanitizer's tracer at exit).
  for (const char* unneeded : {"pci", "gl", "opencl"}) {
    hwloc_topology_set_components(raw, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, unneeded);
  }
  if (!configure(raw)) throw ConfigError("hwloc cannot read " + what);
  if (hwloc_topology_load(raw) != 0) throw ConfigError("hwloc cannot load " + what);
  return convert(raw);
}

}  // namespace

NodeTopology read_topology(const std::string& xml_path) {
  if (xml_path.empty()) {
    return load([](hwloc_topology_t) { return true; }, "this node's topology");
  }
  return load(
      [&](hwloc_topology_t topology) {
        return hwloc_topology_set_xml(topology, xml_path.c_str()) == 0;
      },
      "the topology file " + xml_path);
}

NodeTopology topology_from_xml(std::string_view xml) {
  const std::string text(xml);
  return load(
      [&](hwloc_topology_t topology) {
        return hwloc_topology_set_xmlbuffer(topology, text.c_str(),
                                            static_cast<int>(text.size() + 1)) == 0;
      },
      "the topology XML");
}

std::string uuid_from_nvidia_information(std::string_view text) {
  constexpr std::string_view kKey = "GPU UUID:";
  const auto at = text.find(kKey);
  if (at == std::string_view::npos) return {};
  auto start = text.find_first_not_of(" \t", at + kKey.size());
  if (start == std::string_view::npos) return {};
  const auto end = text.find_first_of(" \t\r\n", start);
  return std::string(text.substr(start, end == std::string_view::npos ? end : end - start));
}

std::string cpulist_text(const CpuList& cpus) {
  std::string text;
  for (std::size_t i = 0; i < cpus.size();) {
    std::size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!text.empty()) text += ',';
    text += std::to_string(cpus[i]);
    if (j > i) text += "-" + std::to_string(cpus[j]);
    i = j + 1;
  }
  return text;
}

CpuList parse_cpulist(std::string_view text, bool& ok) {
  ok = false;
  CpuList cpus;
  const auto number = [](std::string_view digits, int& value) {
    if (digits.empty() || digits.size() > 6) return false;
    value = 0;
    for (char c : digits) {
      if (c < '0' || c > '9') return false;
      value = value * 10 + (c - '0');
    }
    return true;
  };
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  if (text.empty()) {
    ok = true;
    return cpus;
  }
  std::size_t start = 0;
  while (start <= text.size()) {
    const auto comma = text.find(',', start);
    const std::string_view item = text.substr(
        start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    const auto dash = item.find('-');
    int first = 0;
    int last = 0;
    if (dash == std::string_view::npos) {
      if (!number(item, first)) return {};
      last = first;
    } else if (!number(item.substr(0, dash), first) || !number(item.substr(dash + 1), last) ||
               last < first) {
      return {};
    }
    for (int cpu = first; cpu <= last; ++cpu) cpus.push_back(cpu);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  ok = true;
  return cpus;
}

CpuList intersect(const CpuList& a, const CpuList& b) {
  CpuList both;
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(both));
  return both;
}

}  // namespace ddprun
