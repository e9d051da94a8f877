#include <gtest/gtest.h>

#include "reader_cases.h"
#include "schedulers.h"

namespace ddprun {
namespace {

using testing::expect_invalid;
using testing::expect_valid;
using testing::InvalidCase;
using testing::ValidCase;

// What sbatch -N3 --ntasks-per-node=4 gives the batch script (on the first node).
Environment batch_env() {
  return {{"SLURM_JOB_ID", "4242"},
          {"SLURM_JOB_NODELIST", "gpu[01-03]"},
          {"SLURM_JOB_NUM_NODES", "3"},
          {"SLURM_TASKS_PER_NODE", "4(x3)"},
          {"SLURM_JOB_CPUS_PER_NODE", "16(x2),8"},
          {"SLURM_NODEID", "0"}};
}

// srun --ntasks-per-node=1 on the second node of that job.
Environment step_env() {
  Environment env = batch_env();
  env["SLURM_STEP_NODELIST"] = "gpu[01-03]";
  env["SLURM_STEP_NUM_NODES"] = "3";
  env["SLURM_STEP_TASKS_PER_NODE"] = "1(x3)";
  env["SLURM_NODEID"] = "1";
  return env;
}

Environment with(Environment env, const std::string& name, const std::string& value) {
  env[name] = value;
  return env;
}

Environment without(Environment env, const std::string& name) {
  env.erase(name);
  return env;
}

TEST(SlurmReader, BatchScriptsAndStepsGiveNodesSlotsAndThisNode) {
  expect_valid(read_slurm, "slurm",
               {
                   {"batch script",
                    batch_env(),
                    {},
                    "gpu01",
                    {{"gpu01", 4}, {"gpu02", 4}, {"gpu03", 4}},
                    0,
                    "4242"},
                   {"heterogeneous tasks",
                    with(batch_env(), "SLURM_TASKS_PER_NODE", "4(x2),2"),
                    {},
                    "gpu01",
                    {{"gpu01", 4}, {"gpu02", 4}, {"gpu03", 2}},
                    0,
                    "4242"},
                   {"no tasks per node: one slot each",
                    without(batch_env(), "SLURM_TASKS_PER_NODE"),
                    {},
                    "gpu01",
                    {{"gpu01", 1}, {"gpu02", 1}, {"gpu03", 1}},
                    0,
                    "4242"},
                   {"old names",
                    {{"SLURM_JOBID", "7"}, {"SLURM_NODELIST", "a,b"}, {"SLURM_NNODES", "2"}},
                    {},
                    "b",
                    {{"a", 1}, {"b", 1}},
                    1,
                    "7"},
                   {"no SLURM_NODEID: host name",
                    without(batch_env(), "SLURM_NODEID"),
                    {},
                    "gpu03.cluster.org",
                    {{"gpu01", 4}, {"gpu02", 4}, {"gpu03", 4}},
                    2,
                    "4242"},
                   {"no SLURM_NODEID, unknown host",
                    without(batch_env(), "SLURM_NODEID"),
                    {},
                    "login1",
                    {{"gpu01", 4}, {"gpu02", 4}, {"gpu03", 4}},
                    std::nullopt,
                    "4242"},
                   {"step on all nodes, slots from the job",
                    step_env(),
                    {},
                    "gpu02",
                    {{"gpu01", 4}, {"gpu02", 4}, {"gpu03", 4}},
                    1,
                    "4242"},
                   {"step on a subset",
                    with(with(with(with(step_env(), "SLURM_NODEID", "0"), "SLURM_STEP_NODELIST",
                                   "gpu[02-03]"),
                              "SLURM_STEP_NUM_NODES", "2"),
                         "SLURM_STEP_TASKS_PER_NODE", "1(x2)"),
                    {},
                    "gpu02",
                    {{"gpu02", 4}, {"gpu03", 4}},
                    0,
                    "4242"},
                   {"NodeName differs from the host name",
                    step_env(),
                    {},
                    "10-0-0-2",
                    {{"gpu01", 4}, {"gpu02", 4}, {"gpu03", 4}},
                    1,
                    "4242"},
               });
}

TEST(SlurmReader, SourcesAreRecorded) {
  const Environment env = batch_env();
  const ReadFile read = testing::files_from({});
  const HostFacts host{"gpu01", 4, 0};
  const Cluster cluster = read_slurm({env, read, host, std::nullopt});
  EXPECT_EQ(cluster.sources.at("SLURM_JOB_NODELIST"), "gpu[01-03]");
  EXPECT_EQ(cluster.sources.at("SLURM_TASKS_PER_NODE"), "4(x3)");
}

TEST(SlurmReader, InconsistentOrMalformedVariablesNameVariableAndExpectation) {
  expect_invalid(
      read_slurm,
      {
          {"no node list",
           {{"SLURM_JOB_ID", "1"}},
           {},
           "a",
           "SLURM_JOB_NODELIST is not set: expected the job's node list (run ddprun inside an "
           "sbatch script, salloc or srun)"},
          {"bad hostlist",
           with(batch_env(), "SLURM_JOB_NODELIST", "gpu[01-03"),
           {},
           "gpu01",
           "SLURM_JOB_NODELIST=\"gpu[01-03\", column 4: unclosed '[': expected ']'"},
          {"duplicate host",
           with(batch_env(), "SLURM_JOB_NODELIST", "gpu[01-02],gpu01"),
           {},
           "gpu01",
           "SLURM_JOB_NODELIST=\"gpu[01-02],gpu01\": names host 'gpu01' twice (hosts 0 and 2)"},
          {"node count",
           with(batch_env(), "SLURM_JOB_NUM_NODES", "4"),
           {},
           "gpu01",
           "SLURM_JOB_NUM_NODES=\"4\": expected 3, the number of hosts in SLURM_JOB_NODELIST"},
          {"node count not a number",
           with(batch_env(), "SLURM_JOB_NUM_NODES", "three"),
           {},
           "gpu01",
           "SLURM_JOB_NUM_NODES=\"three\": expected a non-negative integer"},
          {"tasks count",
           with(batch_env(), "SLURM_TASKS_PER_NODE", "4(x2)"),
           {},
           "gpu01",
           "SLURM_TASKS_PER_NODE=\"4(x2)\": expected 3 counts, one per host in "
           "SLURM_JOB_NODELIST (got 2)"},
          {"tasks syntax",
           with(batch_env(), "SLURM_TASKS_PER_NODE", "4(3)"),
           {},
           "gpu01",
           "SLURM_TASKS_PER_NODE=\"4(3)\", column 3: expected 'x' after '(', got '3'"},
          {"zero tasks",
           with(batch_env(), "SLURM_TASKS_PER_NODE", "4,0,4"),
           {},
           "gpu01",
           "SLURM_TASKS_PER_NODE=\"4,0,4\": expected at least 1 task on every node"},
          {"cpus count",
           with(batch_env(), "SLURM_JOB_CPUS_PER_NODE", "16"),
           {},
           "gpu01",
           "SLURM_JOB_CPUS_PER_NODE=\"16\": expected 3 counts, one per host in "
           "SLURM_JOB_NODELIST (got 1)"},
          {"node id out of range",
           with(batch_env(), "SLURM_NODEID", "3"),
           {},
           "gpu01",
           "SLURM_NODEID=\"3\": expected a node index below 3, the number of hosts in "
           "SLURM_JOB_NODELIST"},
          {"node id contradicts the host name",
           with(step_env(), "SLURM_NODEID", "0"),
           {},
           "gpu02",
           "SLURM_NODEID=\"0\": expected 1: this host 'gpu02' is node 1 ('gpu02') of "
           "SLURM_STEP_NODELIST"},
          {"step with several tasks per node",
           with(step_env(), "SLURM_STEP_TASKS_PER_NODE", "4(x3)"),
           {},
           "gpu02",
           "SLURM_STEP_TASKS_PER_NODE=\"4(x3)\": expected 1 task per node: ddprun is one agent "
           "per node and starts the workers itself"},
          {"step node count",
           with(step_env(), "SLURM_STEP_NUM_NODES", "2"),
           {},
           "gpu02",
           "SLURM_STEP_NUM_NODES=\"2\": expected 3, the number of hosts in SLURM_STEP_NODELIST"},
          {"step host outside the job",
           with(step_env(), "SLURM_STEP_NODELIST", "gpu[02-04]"),
           {},
           "gpu02",
           "SLURM_STEP_NODELIST=\"gpu[02-04]\": names host 'gpu04', which is not in "
           "SLURM_JOB_NODELIST=\"gpu[01-03]\""},
          {"segment size zero",
           with(batch_env(), "SLURM_JOB_SEGMENT_SIZE", "0"),
           {},
           "gpu01",
           "SLURM_JOB_SEGMENT_SIZE=\"0\": expected a segment size of at least 1"},
          {"segment size not a number",
           with(batch_env(), "SLURM_JOB_SEGMENT_SIZE", "4 nodes"),
           {},
           "gpu01",
           "SLURM_JOB_SEGMENT_SIZE=\"4 nodes\": expected a non-negative integer"},
      });
}

// sbatch -N 8 --segment 4 (Slurm 25.11): eight nodes in two segments of four.
Environment segmented_env() {
  return {{"SLURM_JOB_ID", "77"},
          {"SLURM_JOB_NODELIST", "blk2-n[07-08],blk1-n[01-06]"},
          {"SLURM_JOB_NUM_NODES", "8"},
          {"SLURM_JOB_SEGMENT_SIZE", "4"},
          {"SLURM_NODEID", "0"}};
}

struct SegmentCase {
  const char* name;
  Environment env;
  int segment_size;
  std::vector<std::string> warnings;
};

// SLURM_JOB_SEGMENT_SIZE is read as given; the node order is the scheduler's, untouched;
// a size that does not divide the nodes, or a step on part of the job, is a warning.
TEST(SlurmReader, SegmentSizeIsReadAndTheNodeOrderIsKept) {
  const std::vector<SegmentCase> cases = {
      {"no --segment", batch_env(), 0, {}},
      {"two segments of four", segmented_env(), 4, {}},
      {"one segment larger than the job: no effect, no warning",
       with(segmented_env(), "SLURM_JOB_SEGMENT_SIZE", "16"),
       16,
       {}},
      {"a size that does not divide the nodes",
       with(segmented_env(), "SLURM_JOB_SEGMENT_SIZE", "3"),
       3,
       {"SLURM_JOB_SEGMENT_SIZE=3 does not divide the 8 nodes of SLURM_JOB_NODELIST: the last "
        "segment is short, and ranks follow the node order"}},
      {"a step on part of the job",
       with(with(with(segmented_env(), "SLURM_STEP_NODELIST", "blk1-n[01-03]"),
                 "SLURM_STEP_NUM_NODES", "3"),
            "SLURM_STEP_TASKS_PER_NODE", "1(x3)"),
       4,
       {"SLURM_JOB_SEGMENT_SIZE=4 groups the job's 8 nodes, but SLURM_STEP_NODELIST has 3: the "
        "segments' boundaries among this step's nodes are unknown"}},
      {"a step on the whole job",
       with(with(with(segmented_env(), "SLURM_STEP_NODELIST", "blk2-n[07-08],blk1-n[01-06]"),
                 "SLURM_STEP_NUM_NODES", "8"),
            "SLURM_STEP_TASKS_PER_NODE", "1(x8)"),
       4,
       {}},
  };
  for (const SegmentCase& c : cases) {
    SCOPED_TRACE(c.name);
    const ReadFile read = testing::files_from({});
    const Cluster cluster = read_slurm({c.env, read, HostFacts{"x", 4, 0}, std::nullopt});
    EXPECT_EQ(cluster.segment_size, c.segment_size);
    EXPECT_EQ(cluster.warnings, c.warnings);
    if (c.segment_size > 0) {
      EXPECT_EQ(cluster.sources.at("SLURM_JOB_SEGMENT_SIZE"), c.env.at("SLURM_JOB_SEGMENT_SIZE"));
    }
  }
  // The scheduler's order, not sorted by name: blk2's two nodes first.
  const Cluster cluster =
      read_slurm({segmented_env(), testing::files_from({}), HostFacts{"x", 4, 0}, std::nullopt});
  std::vector<std::string> hosts;
  for (const NodeSlots& node : cluster.nodes) hosts.push_back(node.host);
  EXPECT_EQ(hosts, (std::vector<std::string>{"blk2-n07", "blk2-n08", "blk1-n01", "blk1-n02",
                                             "blk1-n03", "blk1-n04", "blk1-n05", "blk1-n06"}));
}

}  // namespace
}  // namespace ddprun
