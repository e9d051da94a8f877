#include "topology_shapes.h"

#include <cstdio>
#include <map>
#include <set>

namespace ddprun::testing {

namespace {

// hwloc's bitmap text: 32-bit words, highest first ("0x0000000f,0xffffffff").
std::string bitmap(const std::set<int>& bits) {
  const int top = bits.empty() ? 0 : *bits.rbegin();
  std::string text;
  for (int word = top / 32; word >= 0; --word) {
    unsigned value = 0;
    for (int bit = 0; bit < 32; ++bit) {
      if (bits.count(word * 32 + bit) > 0) value |= 1u << bit;
    }
    char part[16];
    std::snprintf(part, sizeof part, "0x%08x", value);
    text += text.empty() ? "" : ",";
    text += part;
  }
  return text;
}

std::set<int> parse_list(const std::string& list) {
  std::set<int> cpus;
  std::size_t start = 0;
  while (start < list.size()) {
    auto comma = list.find(',', start);
    if (comma == std::string::npos) comma = list.size();
    const std::string item = list.substr(start, comma - start);
    const auto dash = item.find('-');
    const int first = std::stoi(item.substr(0, dash));
    const int last = dash == std::string::npos ? first : std::stoi(item.substr(dash + 1));
    for (int cpu = first; cpu <= last; ++cpu) cpus.insert(cpu);
    start = comma + 1;
  }
  return cpus;
}

struct Writer {
  const Shape& shape;
  std::string out;
  int gp = 1;
  int total_cores =
      shape.packages * shape.numa_per_package * shape.l3_per_numa * shape.cores_per_l3;

  std::set<int> core_cpus(int core) const {
    std::set<int> cpus;
    for (int t = 0; t < shape.threads_per_core; ++t) cpus.insert(core + t * total_cores);
    return cpus;
  }
  std::set<int> range_cpus(int first_core, int cores) const {
    std::set<int> cpus;
    for (int c = first_core; c < first_core + cores; ++c) {
      for (int cpu : core_cpus(c)) cpus.insert(cpu);
    }
    return cpus;
  }
  std::string sets(const std::set<int>& cpus, const std::set<int>& nodes) {
    return " cpuset=\"" + bitmap(cpus) + "\" complete_cpuset=\"" + bitmap(cpus) + "\" nodeset=\"" +
           bitmap(nodes) + "\" complete_nodeset=\"" + bitmap(nodes) + "\" gp_index=\"" +
           std::to_string(gp++) + "\"";
  }
  static std::string bus_id(int bus) {
    char text[32];
    std::snprintf(text, sizeof text, "0000:%02x:00.0", bus);
    return text;
  }

  // The PCI tree of NUMA node `numa`: a host bridge, then a switch (a PCI bridge) per
  // switch number, with the GPUs and NICs behind it.
  void io(int numa, int indent) {
    std::map<int, std::vector<std::string>> switches;
    for (const ShapeGpu& gpu : shape.gpus) {
      if (gpu.numa != numa) continue;
      std::string dev =
          "<object type=\"PCIDev\" gp_index=\"" + std::to_string(gp++) + "\" pci_busid=\"" +
          bus_id(gpu.bus) +
          "\" pci_type=\"0302 [10de:2330] [10de:16c1] a1\" pci_link_speed=\"0.000000\"";
      if (gpu.uuid.empty()) {
        dev += "/>";
      } else {
        dev += "><object type=\"OSDev\" gp_index=\"" + std::to_string(gp++) + "\" name=\"nvml" +
               std::to_string(gpu.bus) + "\" osdev_type=\"1\"><info name=\"NVIDIAUUID\" value=\"" +
               gpu.uuid + "\"/></object></object>";
      }
      switches[gpu.pci_switch].push_back(dev);
    }
    for (const ShapeNic& nic : shape.nics) {
      if (nic.numa != numa) continue;
      std::string dev =
          "<object type=\"PCIDev\" gp_index=\"" + std::to_string(gp++) + "\" pci_busid=\"" +
          bus_id(nic.bus) +
          "\" pci_type=\"0207 [15b3:101b] [15b3:0007] 00\" pci_link_speed=\"0.000000\">";
      if (!nic.ib_name.empty()) {
        dev += "<object type=\"OSDev\" gp_index=\"" + std::to_string(gp++) + "\" name=\"" +
               nic.ib_name + "\" osdev_type=\"3\"/>";
      }
      if (!nic.net_name.empty()) {
        dev += "<object type=\"OSDev\" gp_index=\"" + std::to_string(gp++) + "\" name=\"" +
               nic.net_name + "\" osdev_type=\"2\"/>";
      }
      switches[nic.pci_switch].push_back(dev + "</object>");
    }
    if (switches.empty()) return;
    const std::string pad(static_cast<std::size_t>(indent), ' ');
    char range[64];
    std::snprintf(range, sizeof range, "0000:[%02x-%02x]", numa * 32, numa * 32 + 31);
    out += pad + "<object type=\"Bridge\" gp_index=\"" + std::to_string(gp++) +
           "\" bridge_type=\"0-1\" depth=\"0\" bridge_pci=\"" + range + "\">\n";
    for (const auto& [number, devices] : switches) {
      char bridge[256];
      std::snprintf(bridge, sizeof bridge,
                    "<object type=\"Bridge\" gp_index=\"%d\" bridge_type=\"1-1\" depth=\"1\" "
                    "bridge_pci=\"0000:[%02x-%02x]\" pci_busid=\"0000:%02x:%02x.0\" "
                    "pci_type=\"0604 [1000:c010] [0000:0000] b0\" pci_link_speed=\"0.000000\">",
                    gp++, numa * 32 + 1, numa * 32 + 31, numa * 32, number % 32);
      out += pad + "  " + bridge + "\n";
      for (const std::string& device : devices) out += pad + "    " + device + "\n";
      out += pad + "  </object>\n";
    }
    out += pad + "</object>\n";
  }

  void numa_contents(int numa, int first_core, int indent) {
    const std::string pad(static_cast<std::size_t>(indent), ' ');
    const int cores = shape.l3_per_numa * shape.cores_per_l3;
    out += pad + "<object type=\"NUMANode\" os_index=\"" + std::to_string(numa) + "\"" +
           sets(range_cpus(first_core, cores), {numa}) + " local_memory=\"68719476736\"/>\n";
    for (int l3 = 0; l3 < shape.l3_per_numa; ++l3) {
      const int l3_first = first_core + l3 * shape.cores_per_l3;
      out += pad + "<object type=\"L3Cache\"" +
             sets(range_cpus(l3_first, shape.cores_per_l3), {numa}) +
             " cache_size=\"33554432\" depth=\"3\" cache_linesize=\"64\" "
             "cache_associativity=\"16\" cache_type=\"0\">\n";
      for (int c = l3_first; c < l3_first + shape.cores_per_l3; ++c) {
        out += pad + "  <object type=\"Core\" os_index=\"" + std::to_string(c) + "\"" +
               sets(core_cpus(c), {numa}) + ">\n";
        for (int cpu : core_cpus(c)) {
          out += pad + "    <object type=\"PU\" os_index=\"" + std::to_string(cpu) + "\"" +
                 sets({cpu}, {numa}) + "/>\n";
        }
        out += pad + "  </object>\n";
      }
      out += pad + "</object>\n";
    }
    io(numa, indent);
  }

  std::string write() {
    const int numa_count = shape.packages * shape.numa_per_package;
    std::set<int> all_nodes;
    for (int n = 0; n < numa_count; ++n) all_nodes.insert(n);
    const std::set<int> all_cpus = range_cpus(0, total_cores);
    const std::set<int> allowed = shape.allowed.empty() ? all_cpus : parse_list(shape.allowed);
    out =
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<!DOCTYPE topology SYSTEM \"hwloc2.dtd\">\n"
        "<topology version=\"2.0\">\n";
    out += "  <object type=\"Machine\" os_index=\"0\" cpuset=\"" + bitmap(all_cpus) +
           "\" complete_cpuset=\"" + bitmap(all_cpus) + "\" allowed_cpuset=\"" + bitmap(allowed) +
           "\" nodeset=\"" + bitmap(all_nodes) + "\" complete_nodeset=\"" + bitmap(all_nodes) +
           "\" allowed_nodeset=\"" + bitmap(all_nodes) + "\" gp_index=\"" + std::to_string(gp++) +
           "\">\n";
    const int cores_per_numa = shape.l3_per_numa * shape.cores_per_l3;
    for (int p = 0; p < shape.packages; ++p) {
      const int first_numa = p * shape.numa_per_package;
      std::set<int> nodes;
      for (int n = first_numa; n < first_numa + shape.numa_per_package; ++n) nodes.insert(n);
      const int first_core = first_numa * cores_per_numa;
      out += "    <object type=\"Package\" os_index=\"" + std::to_string(p) + "\"" +
             sets(range_cpus(first_core, cores_per_numa * shape.numa_per_package), nodes) + ">\n";
      for (int n = first_numa; n < first_numa + shape.numa_per_package; ++n) {
        const int numa_first_core = n * cores_per_numa;
        if (shape.numa_per_package == 1) {
          numa_contents(n, numa_first_core, 6);
        } else {
          out += "      <object type=\"Group\"" +
                 sets(range_cpus(numa_first_core, cores_per_numa), {n}) +
                 " kind=\"1001\" subkind=\"0\">\n";
          numa_contents(n, numa_first_core, 8);
          out += "      </object>\n";
        }
      }
      out += "    </object>\n";
    }
    out += "  </object>\n</topology>\n";
    return out;
  }
};

}  // namespace

std::string shape_xml(const Shape& shape) {
  Writer writer{shape, {}};
  return writer.write();
}

Shape two_socket_8gpu() {
  Shape shape;
  shape.packages = 2;
  shape.cores_per_l3 = 16;
  shape.threads_per_core = 2;
  for (int g = 0; g < 8; ++g) {
    const int numa = g / 4;
    char uuid[64];
    std::snprintf(uuid, sizeof uuid, "GPU-%08d-aaaa-bbbb-cccc-%012d", g, g);
    shape.gpus.push_back({numa, numa * 32 + 2 + g % 4, numa * 2 + (g % 4) / 2, uuid});
  }
  for (int n = 0; n < 4; ++n) {
    shape.nics.push_back({n / 2, (n / 2) * 32 + 10 + n % 2, n, "mlx5_" + std::to_string(n),
                          "ib" + std::to_string(n)});
  }
  return shape;
}

Shape four_numa_8gpu() {
  Shape shape;
  shape.packages = 2;
  shape.numa_per_package = 2;
  shape.l3_per_numa = 2;
  shape.cores_per_l3 = 4;
  for (int g = 0; g < 8; ++g) {
    const int numa = g / 2;
    shape.gpus.push_back({numa, numa * 32 + 2 + g % 2, numa, ""});
  }
  for (int n = 0; n < 4; ++n)
    shape.nics.push_back({n, n * 32 + 10, n, "mlx5_" + std::to_string(n), ""});
  return shape;
}

Shape grace_like() {
  Shape shape;
  shape.packages = 4;
  shape.cores_per_l3 = 72;
  for (int g = 0; g < 4; ++g) {
    shape.gpus.push_back({g, g * 32 + 1, g, ""});
    shape.nics.push_back({g, g * 32 + 3, g, "mlx5_" + std::to_string(g), ""});
  }
  return shape;
}

}  // namespace ddprun::testing
