// Detection order, --scheduler, the MPI reader and host-name matching.

#include <gtest/gtest.h>

#include "node_match.h"
#include "reader_cases.h"
#include "schedulers.h"

namespace ddprun {
namespace {

using testing::files_from;
using testing::Nodes;
using testing::pairs;

const Environment kSlurm = {{"SLURM_JOB_ID", "1"}, {"SLURM_JOB_NODELIST", "a,b"}};
const Environment kLsf = {{"LSB_JOBID", "2"}, {"LSB_MCPU_HOSTS", "a 1 b 1"}};
const Environment kPbs = {{"PBS_JOBID", "3"}, {"PBS_NODEFILE", "/nf"}};
const Environment kSge = {{"JOB_ID", "4"}, {"PE_HOSTFILE", "/pe"}};
const Environment kOmpi = {{"OMPI_COMM_WORLD_SIZE", "2"},
                           {"OMPI_COMM_WORLD_RANK", "1"},
                           {"OMPI_COMM_WORLD_LOCAL_SIZE", "1"}};
const Environment kMpich = {{"PMI_SIZE", "2"}, {"PMI_RANK", "0"}, {"MPI_LOCALNRANKS", "1"}};

Environment merged(std::initializer_list<Environment> parts) {
  Environment env;
  for (const Environment& part : parts) env.insert(part.begin(), part.end());
  return env;
}

TEST(DetectScheduler, FixedOrderSlurmLsfPbsSgeThenMpiThenLocal) {
  EXPECT_EQ(detect_scheduler({}, std::nullopt, false), "local");
  EXPECT_EQ(detect_scheduler(merged({kSlurm, kLsf, kPbs, kSge, kOmpi}), std::nullopt, false),
            "slurm");
  EXPECT_EQ(detect_scheduler(merged({kLsf, kPbs, kSge, kOmpi}), std::nullopt, false), "lsf");
  EXPECT_EQ(detect_scheduler(merged({kPbs, kSge, kOmpi}), std::nullopt, false), "pbs");
  EXPECT_EQ(detect_scheduler(merged({kSge, kOmpi}), std::nullopt, false), "sge");
  EXPECT_EQ(detect_scheduler(kOmpi, std::nullopt, false), "mpi");
  EXPECT_EQ(detect_scheduler(kMpich, std::nullopt, false), "mpi");
}

TEST(DetectScheduler, HostfileWinsOverDetectionAndForcedNameWinsOverAll) {
  EXPECT_EQ(detect_scheduler(kSlurm, std::nullopt, true), "hostfile");
  EXPECT_EQ(detect_scheduler(merged({kSlurm, kOmpi}), std::nullopt, true), "mpi");
  EXPECT_EQ(detect_scheduler(kSlurm, std::string("sge"), true), "sge");
  EXPECT_EQ(detect_scheduler(kSlurm, std::string("local"), false), "local");
}

TEST(DetectScheduler, UnknownForcedNameIsAUsageError) {
  try {
    detect_scheduler({}, std::string("torque"), false);
    ADD_FAILURE() << "expected an error";
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()),
              "--scheduler: unknown scheduler 'torque': expected one of slurm, lsf, pbs, sge, "
              "mpi, kubeflow, hostfile, local");
  }
}

TEST(DetectCluster, ReadsWithThePickedReader) {
  const ReadFile read =
      files_from({{"/nf", "a\na\nb\n"}, {"/pe", "a 1 q U\n"}, {"/hosts", "a slots=2\nb\n"}});
  const HostFacts host{"b", 4, 0};
  const Cluster slurm = detect_cluster(kSlurm, read, host, std::nullopt, std::nullopt);
  EXPECT_EQ(slurm.scheduler, "slurm");
  EXPECT_EQ(slurm.this_node, 1);
  const Cluster pbs = detect_cluster(kPbs, read, host, std::nullopt, std::nullopt);
  EXPECT_EQ(pairs(pbs.nodes), (Nodes{{"a", 2}, {"b", 1}}));
  const Cluster local = detect_cluster({}, read, host, std::nullopt, std::nullopt);
  EXPECT_EQ(local.scheduler, "local");
  EXPECT_EQ(pairs(local.nodes), (Nodes{{"b", 4}}));
  const Cluster hostfile = detect_cluster(kSlurm, read, host, std::nullopt, "/hosts");
  EXPECT_EQ(hostfile.scheduler, "hostfile");
  EXPECT_EQ(pairs(hostfile.nodes), (Nodes{{"a", 2}, {"b", 1}}));
  EXPECT_EQ(hostfile.this_node, 1);
  const Cluster forced = detect_cluster(merged({kSlurm, kSge}), read, host, "sge", std::nullopt);
  EXPECT_EQ(forced.scheduler, "sge");
  EXPECT_EQ(forced.job_id, "4");
}

TEST(DetectCluster, ForcedReaderWithoutItsVariablesSaysWhatIsMissing) {
  const ReadFile read = files_from({});
  const HostFacts host{"b", 4, 0};
  try {
    detect_cluster({}, read, host, std::string("slurm"), std::nullopt);
    ADD_FAILURE() << "expected an error";
  } catch (const SchedulerEnvError& e) {
    EXPECT_EQ(std::string(e.what()),
              "SLURM_JOB_NODELIST is not set: expected the job's node list (run ddprun inside an "
              "sbatch script, salloc or srun)");
  }
  EXPECT_THROW(detect_cluster({}, read, host, std::string("hostfile"), std::nullopt), UsageError);
  EXPECT_THROW(detect_cluster(kOmpi, read, host, std::string("mpi"), std::nullopt), UsageError);
}

TEST(MpiReader, OneDdprunPerNodeWithAHostfile) {
  const ReadFile read = files_from({{"/hosts", "n1 slots=4\nn2 slots=4\n"}});
  for (const Environment& env : {kOmpi, kMpich}) {
    // Rank 1 (Open MPI) or 0 (MPICH) does not matter: the host name does.
    const Cluster cluster =
        detect_cluster(env, read, HostFacts{"n2.lan", 4, 0}, std::nullopt, std::string("/hosts"));
    EXPECT_EQ(cluster.scheduler, "mpi");
    EXPECT_EQ(pairs(cluster.nodes), (Nodes{{"n1", 4}, {"n2", 4}}));
    EXPECT_EQ(cluster.this_node, 1);
  }
}

TEST(MpiReader, WrongProcessLayoutsAreErrors) {
  const ReadFile read = files_from({{"/hosts", "n1 slots=4\nn2 slots=4\n"}});
  const HostFacts host{"n1", 4, 0};
  auto message = [&](const Environment& env, std::optional<std::string> hostfile) {
    try {
      detect_cluster(env, read, host, std::nullopt, hostfile);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message(testing::with_value(kOmpi, "OMPI_COMM_WORLD_SIZE", "8"), "/hosts"),
            "OMPI_COMM_WORLD_SIZE=\"8\": expected 2, one ddprun per node of --hostfile /hosts "
            "(2 nodes)");
  EXPECT_EQ(message(testing::with_value(kMpich, "MPI_LOCALNRANKS", "2"), "/hosts"),
            "MPI_LOCALNRANKS=\"2\": expected 1: one ddprun per node");
  EXPECT_EQ(message(testing::with_value(kOmpi, "OMPI_COMM_WORLD_RANK", "2"), "/hosts"),
            "OMPI_COMM_WORLD_RANK=\"2\": expected a rank below OMPI_COMM_WORLD_SIZE=2");
  EXPECT_EQ(message(kOmpi, std::nullopt),
            "OMPI_COMM_WORLD_SIZE=\"2\": mpirun started 2 copies of ddprun but no node list is "
            "known: expected --hostfile");
  EXPECT_EQ(message(testing::with_value(kOmpi, "OMPI_COMM_WORLD_SIZE", "1"), std::nullopt),
            "no error");
}

TEST(NodeMatch, ShortAndQualifiedNamesMatchIpAddressesOnlyExactly) {
  EXPECT_TRUE(host_names_match("n1", "n1"));
  EXPECT_TRUE(host_names_match("N1", "n1"));
  EXPECT_TRUE(host_names_match("n1", "n1.cluster.org"));
  EXPECT_TRUE(host_names_match("n1.cluster.org", "n1"));
  EXPECT_TRUE(host_names_match("n1.cluster", "n1.cluster.org"));
  EXPECT_FALSE(host_names_match("n1", "n10"));
  EXPECT_FALSE(host_names_match("n1.a", "n1.b"));
  EXPECT_FALSE(host_names_match("10.0.0.1", "10.0.0.1.x"));
  EXPECT_FALSE(host_names_match("10", "10.0.0.1"));
  EXPECT_FALSE(host_names_match("", "n1"));
}

TEST(NodeMatch, ExactMatchWinsOverRelatedOnes) {
  const std::vector<NodeSlots> nodes = {{"n1", 1}, {"n1.lan", 1}, {"n2.lan", 1}};
  EXPECT_EQ(match_host(nodes, "n1").unique(), 0);
  EXPECT_EQ(match_host(nodes, "n2").unique(), 2);
  EXPECT_EQ(match_host(nodes, "n1.lan").unique(), 1);
  EXPECT_EQ(match_host(nodes, "n1.lan.org").unique(), std::nullopt);  // n1 and n1.lan
  EXPECT_EQ(match_host(nodes, "n3").unique(), std::nullopt);
}

TEST(NodeMatch, ThisNodeOrThrowExplainsMissingAndAmbiguousHosts) {
  Cluster cluster;
  cluster.scheduler = "hostfile";
  cluster.nodes = {{"n1.a", 1}, {"n1.b", 1}, {"n2", 1}};
  cluster.sources["hostfile"] = "/hosts";
  EXPECT_EQ(this_node_or_throw(cluster, HostFacts{"n2.a", 1, 0}), 2);
  try {
    this_node_or_throw(cluster, HostFacts{"n1", 1, 0});
    ADD_FAILURE() << "expected an error";
  } catch (const SchedulerEnvError& e) {
    EXPECT_EQ(std::string(e.what()),
              "this host's name 'n1' matches several nodes from hostfile (hostfile): 'n1.a' "
              "(node 0), 'n1.b' (node 1)");
    EXPECT_NE(e.hint().find("--node-rank"), std::string::npos);
  }
  try {
    this_node_or_throw(cluster, HostFacts{"login1", 1, 0});
    ADD_FAILURE() << "expected an error";
  } catch (const SchedulerEnvError& e) {
    EXPECT_EQ(std::string(e.what()),
              "this host's name 'login1' is not one of the 3 nodes from hostfile (hostfile) (the "
              "first is 'n1.a')");
  }
  cluster.this_node = 0;
  EXPECT_EQ(this_node_or_throw(cluster, HostFacts{"login1", 1, 0}), 0);
}

}  // namespace
}  // namespace ddprun
