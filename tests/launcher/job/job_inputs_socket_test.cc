// NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME on multi-homed nodes: the interface that
// routes to the master, never over the user's own choice. Routes and interfaces are faked.
#include <gtest/gtest.h>

#include <map>

#include "job/job_inputs.h"
#include "plan/rank_environment.h"

namespace ddprun {
namespace {

const std::vector<NetworkInterface> kTwoHomed = {{"lo", "127.0.0.1", true},
                                                 {"eth0", "192.168.1.5", false},
                                                 {"ib0", "10.0.0.5", false},
                                                 {"ib0", "fd00::5", false}};

// The kernel's answer: 10.0.0.0/8 and fd00::/8 through ib0, anything else through eth0.
std::string fake_route(const std::string& address) {
  if (address.rfind("10.", 0) == 0) return "10.0.0.5";
  if (address.rfind("fd00:", 0) == 0) return "fd00::5";
  if (address.rfind("127.", 0) == 0) return "127.0.0.1";
  if (address == "203.0.113.9") return "";  // unreachable
  return "192.168.1.5";
}

struct InterfaceCase {
  const char* name;
  Environment env;
  std::vector<std::string> master_addresses;
  std::vector<NetworkInterface> interfaces;
  std::string chosen;
  std::string reason;
};

TEST(ChooseSocketInterface, PicksTheInterfaceThatRoutesToTheMaster) {
  const std::vector<InterfaceCase> cases = {
      {"routed through ib0",
       {},
       {"10.0.0.1"},
       kTwoHomed,
       "ib0",
       "routes to the master 10.0.0.1 (node1)"},
      {"routed through eth0",
       {},
       {"192.168.1.1"},
       kTwoHomed,
       "eth0",
       "routes to the master 192.168.1.1 (node1)"},
      {"IPv6", {}, {"fd00::1"}, kTwoHomed, "ib0", "routes to the master fd00::1 (node1)"},
      {"the master is this host",
       {},
       {"10.0.0.5"},
       kTwoHomed,
       "ib0",
       "routes to the master 10.0.0.5 (node1)"},
      {"loopback addresses skipped",
       {},
       {"127.0.1.1", "10.0.0.1"},
       kTwoHomed,
       "ib0",
       "routes to the master 10.0.0.1 (node1)"},
      {"the user's NCCL value is kept",
       {{"NCCL_SOCKET_IFNAME", "eth0"}},
       {"10.0.0.1"},
       kTwoHomed,
       "",
       "the user's NCCL_SOCKET_IFNAME=eth0 (kept)"},
      {"the user's gloo value alone keeps both unset",
       {{"GLOO_SOCKET_IFNAME", "ib0"}},
       {"10.0.0.1"},
       kTwoHomed,
       "",
       "the user's GLOO_SOCKET_IFNAME=ib0 (kept)"},
      {"both the user's",
       {{"NCCL_SOCKET_IFNAME", "^docker"}, {"GLOO_SOCKET_IFNAME", "eth0"}},
       {"10.0.0.1"},
       kTwoHomed,
       "",
       "the user's NCCL_SOCKET_IFNAME=^docker, GLOO_SOCKET_IFNAME=eth0 (kept)"},
      {"one interface",
       {},
       {"10.0.0.1"},
       {{"lo", "127.0.0.1", true}, {"eth0", "10.0.0.5", false}, {"eth0", "fe80::1", false}},
       "",
       "not set: one network interface (eth0)"},
      {"loopback only",
       {},
       {"127.0.0.1"},
       {{"lo", "127.0.0.1", true}},
       "",
       "not set: no network interface besides loopback"},
      {"master on loopback",
       {},
       {"127.0.0.1", "::1"},
       kTwoHomed,
       "",
       "not set: the master (node1) is on loopback, one node"},
      {"master unresolved",
       {},
       {},
       kTwoHomed,
       "",
       "not set: the master address 'node1' does not resolve here"},
      {"no route",
       {},
       {"203.0.113.9"},
       kTwoHomed,
       "",
       "not set: no route to the master (node1) found here"},
  };
  for (const auto& c : cases) {
    const auto chosen =
        choose_socket_interface(c.env, "node1", c.master_addresses, c.interfaces, fake_route);
    EXPECT_EQ(chosen.name, c.chosen) << c.name;
    EXPECT_EQ(chosen.reason, c.reason) << c.name;
  }
}

TEST(ChooseSocketInterface, ANumericMasterIsNotNamedTwice) {
  const auto chosen = choose_socket_interface({}, "10.0.0.1", {"10.0.0.1"}, kTwoHomed, fake_route);
  EXPECT_EQ(chosen.reason, "routes to the master 10.0.0.1");
}

SystemServices two_homed_services() {
  SystemServices services;
  services.pick_free_port = [] { return 41000; };
  services.port_is_free = [](int) { return true; };
  services.random_run_id = [] { return std::string("random"); };
  services.resolve_host = [](const std::string& host) -> std::vector<std::string> {
    const std::map<std::string, std::string> hosts = {
        {"node1", "10.0.0.1"}, {"node2", "10.0.0.2"}, {"127.0.0.1", "127.0.0.1"}};
    const auto it = hosts.find(host);
    return it == hosts.end() ? std::vector<std::string>{} : std::vector<std::string>{it->second};
  };
  services.network_interfaces = [] { return kTwoHomed; };
  services.source_address = fake_route;
  return services;
}

TEST(ResolvePlanInputs, WorkersOfAMultiHomedNodeGetTheRoutedInterface) {
  Options options;
  options.nproc_per_node = "1";
  options.program = {"./train"};
  options.launcher = "local";
  options.hostfile = "hosts";
  options.master_port = 29500;
  const Environment env;
  const ReadFile no_files = [](const std::string&) { return std::string("node1\nnode2\n"); };
  const auto inputs = resolve_plan_inputs(options, env, no_files, HostFacts{"node2", 4, 0},
                                          two_homed_services(), false);
  EXPECT_EQ(inputs.master_addr, "node1");
  EXPECT_EQ(inputs.socket_interface.name, "ib0");
  const auto plan = build_plan(plan_options(options), inputs, env);
  const auto vars = rank_environment(plan, plan.ranks[1]);
  const std::map<std::string, std::string> worker(vars.begin(), vars.end());
  EXPECT_EQ(worker.at("NCCL_SOCKET_IFNAME"), "ib0");
  EXPECT_EQ(worker.at("GLOO_SOCKET_IFNAME"), "ib0");

  // The user's value stays: ddprun sets neither variable.
  Environment user = env;
  user["NCCL_SOCKET_IFNAME"] = "eth0";
  const auto kept = resolve_plan_inputs(options, user, no_files, HostFacts{"node2", 4, 0},
                                        two_homed_services(), false);
  const auto kept_plan = build_plan(plan_options(options), kept, user);
  const auto kept_vars = rank_environment(kept_plan, kept_plan.ranks[1]);
  for (const auto& [key, value] : kept_vars) {
    EXPECT_NE(key, "NCCL_SOCKET_IFNAME");
    EXPECT_NE(key, "GLOO_SOCKET_IFNAME");
  }
}

TEST(ResolvePlanInputs, OneNodeOnLoopbackSetsNoInterface) {
  Options options;
  options.nproc_per_node = "2";
  options.program = {"./train"};
  const ReadFile no_files = [](const std::string& path) -> std::string {
    throw std::runtime_error("open " + path);
  };
  const auto inputs = resolve_plan_inputs(options, {}, no_files, HostFacts{"laptop", 4, 0},
                                          two_homed_services(), false);
  EXPECT_EQ(inputs.master_addr, "127.0.0.1");
  EXPECT_EQ(inputs.socket_interface.name, "");
  EXPECT_EQ(inputs.socket_interface.reason,
            "not set: the master (127.0.0.1) is on loopback, one node");
}

}  // namespace
}  // namespace ddprun
