#include "job/job_inputs.h"

#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>

#include "ddprun/contract/errors.h"
#include "plan/plan_format.h"

namespace ddprun {
namespace {

// Name resolution and ports as a small cluster would see them, without touching the system.
SystemServices fake_services(std::map<std::string, std::string> hosts = {}) {
  SystemServices services;
  services.pick_free_port = [] { return 41000; };
  services.port_is_free = [](int port) { return port != 29999; };
  services.random_run_id = [] { return std::string("random"); };
  services.describe_port_user = [](int port) {
    return port == 29999 ? std::string("pid 7 (train.py, run job-a)") : std::string();
  };
  services.resolve_host = [hosts](const std::string& host) -> std::vector<std::string> {
    const auto it = hosts.find(host);
    if (it == hosts.end()) return {};
    return {it->second};
  };
  return services;
}

const std::map<std::string, std::string> kHosts = {
    {"node1", "10.0.0.1"}, {"node2", "10.0.0.2"}, {"node3", "10.0.0.3"}, {"lonely", "127.0.1.1"}};

ReadFile files(std::map<std::string, std::string> contents) {
  return [contents](const std::string& path) {
    const auto it = contents.find(path);
    if (it == contents.end()) throw std::runtime_error("open " + path + ": no such file");
    return it->second;
  };
}

Options options_for(const std::string& nproc = "2") {
  Options options;
  options.nproc_per_node = nproc;
  options.program = {"./train"};
  return options;
}

HostFacts host_named(const std::string& name) {
  return HostFacts{name, 8, 0};
}

// The JSON plan node `host` computes, without the one field that must differ.
nlohmann::json plan_on(const std::string& host, const Environment& env, const ReadFile& read_file,
                       const Options& options) {
  const auto inputs =
      resolve_plan_inputs(options, env, read_file, host_named(host), fake_services(kHosts), true);
  auto doc =
      nlohmann::json::parse(format_plan_json(build_plan(plan_options(options), inputs, env)));
  EXPECT_EQ(doc["this_node"], std::stoi(host.substr(4)) - 1) << host;
  doc.erase("this_node");
  return doc;
}

void expect_nodes_agree(const Environment& env, const ReadFile& read_file,
                        const Options& options = options_for()) {
  const auto first = plan_on("node1", env, read_file, options);
  EXPECT_EQ(first["world_size"], 6);
  EXPECT_EQ(first["master_addr"], "node1");
  EXPECT_EQ(first["nodes"][2]["first_rank"], 4);
  EXPECT_EQ(first["ranks"][5]["host"], "node3");
  EXPECT_EQ(plan_on("node2", env, read_file, options), first);
  EXPECT_EQ(plan_on("node3", env, read_file, options), first);
}

TEST(JobInputs, ThreeSlurmNodesDeriveTheSamePlan) {
  const Environment env = {{"SLURM_JOB_ID", "4242"},
                           {"SLURM_JOB_NODELIST", "node[1-3]"},
                           {"SLURM_JOB_NUM_NODES", "3"},
                           {"SLURM_TASKS_PER_NODE", "2(x3)"},
                           {"SLURM_JOB_CPUS_PER_NODE", "2(x3)"}};
  expect_nodes_agree(env, files({}));
  const auto doc = plan_on("node2", env, files({}), options_for());
  EXPECT_EQ(doc["master_port"], port_for_job("4242"));
  EXPECT_EQ(doc["run_id"], "4242");
}

TEST(JobInputs, ThreeGridEngineNodesDeriveTheSamePlan) {
  const Environment env = {
      {"JOB_ID", "99"}, {"PE_HOSTFILE", "/sge/pe"}, {"NHOSTS", "3"}, {"NSLOTS", "6"}};
  expect_nodes_agree(env, files({{"/sge/pe",
                                  "node1 2 all.q@node1 UNDEFINED\nnode2 2 all.q@node2 UNDEFINED\n"
                                  "node3 2 all.q@node3 UNDEFINED\n"}}));
}

TEST(JobInputs, ThreePbsNodesDeriveTheSamePlan) {
  const Environment env = {{"PBS_JOBID", "12345.pbs1"}, {"PBS_NODEFILE", "/pbs/nodes"}};
  expect_nodes_agree(env, files({{"/pbs/nodes", "node1\nnode1\nnode2\nnode2\nnode3\nnode3\n"}}));
}

TEST(JobInputs, ThreeHostfileNodesUnderMpirunDeriveTheSamePlan) {
  Options options = options_for();
  options.hostfile = "/hosts";
  options.master_port = 29400;
  // What mpirun --hostfile /hosts -npernode 1 gives each copy of ddprun.
  const Environment env = {{"OMPI_COMM_WORLD_SIZE", "3"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "1"}};
  expect_nodes_agree(env, files({{"/hosts", "node1 slots=2\nnode2 slots=2\nnode3 slots=2\n"}}),
                     options);
}

// torchrun's by-hand form: one command per node, no scheduler, each with its own
// --node-rank. Every node derives the same plan (run id included) from the same options,
// but for the names of the nodes: each knows its own.
TEST(JobInputs, ByHandNodesWithNodeRanksDeriveTheSamePlan) {
  std::vector<nlohmann::json> plans;
  for (int node = 0; node < 3; ++node) {
    Options options = options_for();
    options.nnodes = 3;
    options.node_rank = node;
    options.master_addr = "node1";
    options.master_port = 29500;
    const std::string host = "machine-" + std::to_string(node);
    const auto inputs =
        resolve_plan_inputs(options, {}, files({}), host_named(host), fake_services(kHosts), true);
    EXPECT_EQ(inputs.cluster.scheduler, "static");
    EXPECT_EQ(inputs.cluster.this_node, node);
    auto doc =
        nlohmann::json::parse(format_plan_json(build_plan(plan_options(options), inputs, {})));
    EXPECT_EQ(doc["this_node"], node);
    EXPECT_EQ(doc["world_size"], 6);
    EXPECT_EQ(doc["master_addr"], "node1");
    const auto first = static_cast<std::size_t>(2 * node);
    EXPECT_EQ(doc["ranks"][first]["rank"], 2 * node);
    EXPECT_EQ(doc["ranks"][first]["host"], host);  // this node by its name
    doc.erase("this_node");
    doc.erase("nodes");
    for (auto& rank : doc["ranks"]) {
      rank.erase("host");
      rank["env"].erase("DDPRUN_HOST");
    }
    plans.push_back(doc);
  }
  EXPECT_EQ(plans[1], plans[0]);
  EXPECT_EQ(plans[2], plans[0]);
}

TEST(JobInputs, ByHandNodesNeedANodeRankOrC10dAndNode0sAddress) {
  Options options = options_for();
  options.nnodes = 2;
  options.master_addr = "node1";
  try {
    resolve_plan_inputs(options, {}, files({}), host_named("node2"), fake_services(kHosts), true);
    ADD_FAILURE() << "no error";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("needs this node's --node-rank"), std::string::npos)
        << e.what();
  }
  options.node_rank = 1;
  options.master_addr.reset();
  EXPECT_THROW(
      resolve_plan_inputs(options, {}, files({}), host_named("node1"), fake_services(kHosts), true),
      UsageError);
}

// c10d without --node-rank: the node the endpoint names is node 0; the others wait for
// the launchers' rendezvous to place them, standing in node 1's place meanwhile.
TEST(JobInputs, ByHandC10dNodesAreNode0WhereTheEndpointIsAndTheOthersByArrival) {
  Options options = options_for();
  options.nnodes = 3;
  options.master_addr = "node1";
  options.master_port = 29400;
  options.rdzv_backend = "c10d";
  options.run_id = "job-7";
  const auto host0 =
      resolve_plan_inputs(options, {}, files({}), host_named("node1"), fake_services(kHosts), true);
  EXPECT_EQ(host0.cluster.this_node, 0);
  EXPECT_FALSE(host0.rank_by_arrival);
  const auto other =
      resolve_plan_inputs(options, {}, files({}), host_named("node3"), fake_services(kHosts), true);
  EXPECT_TRUE(other.rank_by_arrival);
  EXPECT_EQ(other.cluster.this_node, 1);
  Cluster placed = other.cluster;
  place_by_hand_node(placed, "node1", "node3", 2);
  EXPECT_EQ(placed.this_node, 2);
  EXPECT_EQ(placed.nodes[2].host, "node3");
  EXPECT_EQ(placed.nodes[1].host, "node-rank-1");
  EXPECT_EQ(placed.nodes[0].host, "node1");
}

TEST(JobInputs, KubeflowPodsDeriveTheSamePlanFromANodeLevelWorld) {
  for (const Environment& base :
       {Environment{{"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "23456"}, {"WORLD_SIZE", "3"}},
        Environment{
            {"PET_MASTER_ADDR", "10.0.0.1"}, {"PET_MASTER_PORT", "23456"}, {"PET_NNODES", "3"}}}) {
    std::vector<nlohmann::json> plans;
    for (int node = 0; node < 3; ++node) {
      Environment env = base;
      env[base.count("PET_NNODES") ? "PET_NODE_RANK" : "RANK"] = std::to_string(node);
      SystemServices services = fake_services({{"10.0.0.1", "10.0.0.1"}});
      const auto inputs = resolve_plan_inputs(
          options_for(), env, files({}), host_named("pod-" + std::to_string(node)), services, true);
      EXPECT_EQ(inputs.cluster.scheduler, "kubeflow");
      EXPECT_EQ(inputs.cluster.this_node, node);
      auto doc = nlohmann::json::parse(
          format_plan_json(build_plan(plan_options(options_for()), inputs, env)));
      EXPECT_EQ(doc["world_size"], 6);
      EXPECT_EQ(doc["master_addr"], "10.0.0.1");
      EXPECT_EQ(doc["master_port"], 23456);
      doc.erase("this_node");
      plans.push_back(doc);
    }
    EXPECT_EQ(plans[1], plans[0]);
    EXPECT_EQ(plans[2], plans[0]);
  }
}

TEST(JobInputs, AProcessLevelWorldIsNotTakenForKubeflow) {
  // ddprun started inside another launcher's worker sees LOCAL_RANK too.
  const Environment env = {{"MASTER_ADDR", "127.0.0.1"},
                           {"MASTER_PORT", "23456"},
                           {"WORLD_SIZE", "4"},
                           {"RANK", "2"},
                           {"LOCAL_RANK", "2"}};
  const auto inputs = resolve_plan_inputs(options_for(), env, files({}), host_named("laptop"),
                                          fake_services(), true);
  EXPECT_EQ(inputs.cluster.scheduler, "local");
}

TEST(JobInputs, PortDerivedFromTheJobIdIsInItsRangeAndStable) {
  for (const std::string id : {"1", "4242", "12345.pbs1", "a-very-long-job-identifier"}) {
    const int port = port_for_job(id);
    EXPECT_GE(port, kDerivedPortBase);
    EXPECT_LT(port, kDerivedPortBase + kDerivedPortSpan);
    EXPECT_EQ(port, port_for_job(id));
  }
  EXPECT_NE(port_for_job("4242"), port_for_job("4243"));
}

TEST(JobInputs, OneNodeUsesLoopbackAFreePortAndARandomId) {
  const auto inputs = resolve_plan_inputs(options_for(), {}, files({}), host_named("laptop"),
                                          fake_services(), true);
  EXPECT_EQ(inputs.master_addr, "127.0.0.1");
  EXPECT_EQ(inputs.master_port, 41000);
  EXPECT_FALSE(inputs.fixed_port);
  EXPECT_EQ(inputs.run_id, "random");
}

TEST(JobInputs, EnvironmentMasterIsRespectedAndOptionsWin) {
  const Environment env = {{"MASTER_ADDR", "10.1.1.1"}, {"MASTER_PORT", "23456"}};
  auto inputs = resolve_plan_inputs(options_for(), env, files({}), host_named("pod-0"),
                                    fake_services(), true);
  EXPECT_EQ(inputs.master_addr, "10.1.1.1");
  EXPECT_EQ(inputs.master_port, 23456);
  EXPECT_TRUE(inputs.fixed_port);
  Options options = options_for();
  options.master_addr = "10.2.2.2";
  options.master_port = 24000;
  inputs = resolve_plan_inputs(options, env, files({}), host_named("pod-0"), fake_services(), true);
  EXPECT_EQ(inputs.master_addr, "10.2.2.2");
  EXPECT_EQ(inputs.master_port, 24000);
}

TEST(JobInputs, TorchrunsFreePortAndLocalAddressFeedTheMaster) {
  Options options = options_for();
  options.free_master_port = true;
  options.local_addr = "10.9.9.9";
  const auto inputs =
      resolve_plan_inputs(options, {}, files({}), host_named("laptop"), fake_services(), true);
  EXPECT_EQ(inputs.master_addr, "10.9.9.9");  // this node runs rank 0
  EXPECT_EQ(inputs.master_port, 41000);
  EXPECT_FALSE(inputs.fixed_port);  // a restart may pick anew
}

struct BadJob {
  std::string name;
  Environment env;
  std::map<std::string, std::string> files;
  std::string host;
  std::function<void(Options&)> tweak;
  std::string message_part;
};

void PrintTo(const BadJob& job, std::ostream* out) {
  *out << job.name;
}

class BadJobTest : public ::testing::TestWithParam<BadJob> {};

TEST_P(BadJobTest, FailsWithOneClearLine) {
  const auto& job = GetParam();
  Options options = options_for();
  if (job.tweak) job.tweak(options);
  try {
    resolve_plan_inputs(options, job.env, files(job.files), host_named(job.host),
                        fake_services(kHosts), true);
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string message = std::string(e.what()) + " (" + e.hint() + ")";
    EXPECT_NE(message.find(job.message_part), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

const Environment kTwoNodeSlurm = {{"SLURM_JOB_ID", "7"},
                                   {"SLURM_JOB_NODELIST", "node[1-2]"},
                                   {"SLURM_JOB_NUM_NODES", "2"},
                                   {"SLURM_TASKS_PER_NODE", "1(x2)"}};

INSTANTIATE_TEST_SUITE_P(
    Launcher, BadJobTest,
    ::testing::Values(
        BadJob{"NnodesMismatch",
               kTwoNodeSlurm,
               {},
               "node1",
               [](Options& o) { o.nnodes = 3; },
               "--nnodes 3 does not match the slurm allocation, which has 2 node(s)"},
        BadJob{"NnodesWithoutNodes",
               {},
               {},
               "laptop",
               [](Options& o) { o.nnodes = 2; },
               "--nnodes 2 without a scheduler or a hostfile needs this node's --node-rank"},
        BadJob{"FreePortOnANodeThatDoesNotStartTheOthers",
               kTwoNodeSlurm,
               {},
               "node2",
               [](Options& o) {
                 o.launcher = "local";
                 o.free_master_port = true;
               },
               "a free master port (port 0) needs one node"},
        BadJob{"NodeRankOutOfRange",
               kTwoNodeSlurm,
               {},
               "node1",
               [](Options& o) { o.node_rank = 2; },
               "--node-rank 2 is out of range"},
        BadJob{"HostNotInAllocation",
               {{"PBS_JOBID", "1"}, {"PBS_NODEFILE", "/n"}},
               {{"/n", "node1\nnode2\n"}},
               "stranger",
               nullptr,
               "stranger"},
        BadJob{"LoopbackMaster",
               {{"PBS_JOBID", "1"}, {"PBS_NODEFILE", "/n"}},
               {{"/n", "lonely\nnode2\n"}},
               "node2",
               nullptr,
               "loopback"},
        BadJob{"UnresolvableMaster",
               {{"PBS_JOBID", "1"}, {"PBS_NODEFILE", "/n"}},
               {{"/n", "ghost\nnode2\n"}},
               "node2",
               nullptr,
               "does not resolve"},
        BadJob{"NoPortNoJobId",
               {},
               {{"/h", "node1\nnode2\n"}},
               "node1",
               [](Options& o) {
                 o.hostfile = "/h";
                 o.launcher = "local";  // one copy per node, started by hand
               },
               "give --master-port"},
        BadJob{"NoPortNoJobIdOnSecondNode",
               {},
               {{"/h", "node1\nnode2\n"}},
               "node2",
               [](Options& o) { o.hostfile = "/h"; },
               "give --master-port"},
        BadJob{"BadEnvPort", {{"MASTER_PORT", "http"}}, {}, "laptop", nullptr, "MASTER_PORT"},
        BadJob{"BusyPort",
               {},
               {},
               "laptop",
               [](Options& o) { o.master_port = 29999; },
               "already in use on this host by pid 7 (train.py, run job-a)"}),
    [](const auto& test_info) { return test_info.param.name; });

}  // namespace
}  // namespace ddprun

namespace ddprun {
namespace {

TEST(HeadNode, FirstNodeOfAHostfileBecomesTheHeadAndPicksThePort) {
  Options options = options_for();
  options.hostfile = "/h";
  const auto inputs = resolve_plan_inputs(options, {}, files({{"/h", "node1\nnode2\n"}}),
                                          host_named("node1"), fake_services(kHosts), true);
  EXPECT_EQ(inputs.launcher, LauncherKind::kSsh);
  EXPECT_EQ(inputs.master_port, 41000);
  EXPECT_FALSE(inputs.fixed_port);
  EXPECT_EQ(inputs.master_addr, "node1");
}

// --nnodes below the nodes given: a head keeps the rest as spares; one ddprun per node
// cannot (no one would start a spare), and says so.
TEST(HeadNode, NodesBeyondNnodesAreSparesForAHeadOnly) {
  Options options = options_for();
  options.hostfile = "/h";
  options.nnodes = 2;
  const auto read = files({{"/h", "node1\nnode2\nnode3\n"}});
  const auto inputs =
      resolve_plan_inputs(options, {}, read, host_named("node1"), fake_services(kHosts), true);
  EXPECT_EQ(inputs.launcher, LauncherKind::kSsh);
  ASSERT_EQ(inputs.cluster.nodes.size(), 2u);
  ASSERT_EQ(inputs.spare_nodes.size(), 1u);
  EXPECT_EQ(inputs.spare_nodes[0].host, "node3");
  EXPECT_EQ(build_plan(plan_options(options), inputs, {}).world_size, 4);
  options.launcher = "local";
  try {
    resolve_plan_inputs(options, {}, read, host_named("node1"), fake_services(kHosts), true);
    ADD_FAILURE() << "one ddprun per node with spares";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--nnodes 2 does not match"), std::string::npos);
    EXPECT_NE(e.hint().find("spare nodes need one ddprun on the first node"), std::string::npos);
  }
}

TEST(HeadNode, AgentPlansFromTheHeadsNodeListAndCounts) {
  Options options = options_for("auto");
  options.agent = true;
  options.agent_nodes = "node1:3,node2:1,node3:2";
  options.node_rank = 2;
  options.master_addr = "node1";
  options.master_port = 29500;
  options.run_id = "r1";
  const Environment env = {{"SLURM_JOB_ID", "77"}, {"SLURM_JOB_NODELIST", "other[1-9]"}};
  const auto inputs = resolve_plan_inputs(options, env, files({}), host_named("node3"),
                                          fake_services(kHosts), true);
  EXPECT_EQ(inputs.launcher, LauncherKind::kLocal);
  const LaunchPlan plan = build_plan(plan_options(options), inputs, env);
  ASSERT_EQ(plan.nodes.size(), 3u);
  EXPECT_EQ(plan.world_size, 6);
  EXPECT_EQ(plan.this_node, 2);
  EXPECT_EQ(plan.nodes[2].first_rank, 4);
  EXPECT_EQ(plan.nodes[2].nproc, 2);
  EXPECT_EQ(plan.master_port, 29500);
  EXPECT_EQ(plan.run_id, "r1");
}

}  // namespace
}  // namespace ddprun
