// Grid Engine, PBS and LSF readers from in-memory environments and files.

#include <gtest/gtest.h>

#include "reader_cases.h"
#include "schedulers.h"

namespace ddprun {
namespace {

using testing::expect_invalid;
using testing::expect_valid;
using testing::with_value;

// As Grid Engine 8.1.9 writes it for qsub -pe mpi 6 (seen on a real cell).
const std::string kPeHostfile =
    "fcn1.cluster 2 all.q@fcn1.cluster UNDEFINED\n"
    "fcn2.cluster 2 all.q@fcn2.cluster UNDEFINED\n"
    "fcn1.cluster 1 gpu.q@fcn1.cluster UNDEFINED\n"
    "fcn3.cluster 1 all.q@fcn3.cluster UNDEFINED\n";

Environment sge_env() {
  return {
      {"PE_HOSTFILE", "/spool/pe_hostfile"}, {"NHOSTS", "3"}, {"NSLOTS", "6"}, {"JOB_ID", "77"}};
}

TEST(SgeReader, PeHostfileSumsSlotsPerHostAndMatchesTheHostName) {
  expect_valid(read_sge, "sge",
               {
                   {"pe hostfile",
                    sge_env(),
                    {{"/spool/pe_hostfile", kPeHostfile}},
                    "fcn2",
                    {{"fcn1.cluster", 3}, {"fcn2.cluster", 2}, {"fcn3.cluster", 1}},
                    1,
                    "77"},
                   {"abci job hostlist only",
                    {{"SGE_JOB_HOSTLIST", "/tmp/hl"}, {"NHOSTS", "2"}, {"JOB_ID", "5"}},
                    {{"/tmp/hl", "g0001\ng0002\n"}},
                    "g0002",
                    {{"g0001", 1}, {"g0002", 1}},
                    1,
                    "5"},
                   {"both, short and long names",
                    {{"PE_HOSTFILE", "/pe"}, {"SGE_JOB_HOSTLIST", "/hl"}},
                    {{"/pe", "g1.abci.local 4 q@g1 UNDEFINED\ng2.abci.local 4 q@g2 UNDEFINED\n"},
                     {"/hl", "g1\ng2\n"}},
                    "g1",
                    {{"g1.abci.local", 4}, {"g2.abci.local", 4}},
                    0,
                    ""},
                   {"crlf and blank lines",
                    {{"PE_HOSTFILE", "/pe"}},
                    {{"/pe", "\r\na 1 q UNDEFINED\r\n\r\n"}},
                    "elsewhere",
                    {{"a", 1}},
                    std::nullopt,
                    ""},
               });
}

TEST(SgeReader, BadFilesAndCountsNameFileLineAndExpectation) {
  expect_invalid(
      read_sge,
      {
          {"nothing",
           {{"JOB_ID", "1"}},
           {},
           "a",
           "PE_HOSTFILE is not set: expected Grid Engine's host file (submit with a parallel "
           "environment: qsub -pe NAME N)"},
          {"missing file",
           sge_env(),
           {},
           "a",
           "PE_HOSTFILE=\"/spool/pe_hostfile\": cannot read the file: open /spool/pe_hostfile: "
           "No such file or directory"},
          {"slots not a number",
           {{"PE_HOSTFILE", "/pe"}},
           {{"/pe", "a 1 q U\nb  x q U\n"}},
           "a",
           "/pe:2:4 (PE_HOSTFILE): expected a positive slot count, got 'x'"},
          {"host only",
           {{"PE_HOSTFILE", "/pe"}},
           {{"/pe", "a\n"}},
           "a",
           "/pe:1:2 (PE_HOSTFILE): expected 'host slots queue processors', got only the host"},
          {"empty file",
           {{"PE_HOSTFILE", "/pe"}},
           {{"/pe", "\n"}},
           "a",
           "PE_HOSTFILE=\"/pe\": the file names no host"},
          {"NHOSTS",
           with_value(sge_env(), "NHOSTS", "2"),
           {{"/spool/pe_hostfile", kPeHostfile}},
           "a",
           "NHOSTS=\"2\": expected 3, the number of hosts in PE_HOSTFILE"},
          {"NSLOTS",
           with_value(sge_env(), "NSLOTS", "4"),
           {{"/spool/pe_hostfile", kPeHostfile}},
           "a",
           "NSLOTS=\"4\": expected 6, the sum of the slots in PE_HOSTFILE"},
          {"job hostlist disagrees",
           {{"PE_HOSTFILE", "/pe"}, {"SGE_JOB_HOSTLIST", "/hl"}},
           {{"/pe", "g1 4 q U\ng2 4 q U\n"}, {"/hl", "g2\ng1\n"}},
           "g1",
           "SGE_JOB_HOSTLIST=\"/hl\": expected the same hosts in the same order as "
           "PE_HOSTFILE=\"/pe\" (2 hosts, the first 'g1'), got 2 hosts, the first 'g2'"},
          {"job hostlist with two words",
           {{"SGE_JOB_HOSTLIST", "/hl"}},
           {{"/hl", "g1 g2\n"}},
           "g1",
           "/hl:1:4 (SGE_JOB_HOSTLIST): expected one host name per line, got a second word"},
      });
}

TEST(PbsReader, NodefileLinesAreSlotsInFirstSeenOrder) {
  expect_valid(
      read_pbs, "pbs",
      {
          {"pbs pro",
           {{"PBS_NODEFILE", "/var/spool/pbs/aux/12345.pbs1"}, {"PBS_JOBID", "12345.pbs1"}},
           {{"/var/spool/pbs/aux/12345.pbs1", "n2\nn2\nn1\nn1\nn2\nn3\n"}},
           "n1.example.org",
           {{"n2", 3}, {"n1", 2}, {"n3", 1}},
           1,
           "12345.pbs1"},
          {"torque with PBS_NODENUM and counts",
           {{"PBS_NODEFILE", "/nf"},
            {"PBS_JOBID", "9.torque"},
            {"PBS_NODENUM", "1"},
            {"PBS_NUM_NODES", "2"},
            {"PBS_NP", "4"}},
           {{"/nf", "a\na\nb\nb\n"}},
           "unrelated",
           {{"a", 2}, {"b", 2}},
           1,
           "9.torque"},
      });
}

TEST(PbsReader, BadNodefileAndCountsNameVariableAndExpectation) {
  expect_invalid(
      read_pbs,
      {
          {"no nodefile",
           {{"PBS_JOBID", "1"}},
           {},
           "a",
           "PBS_NODEFILE is not set: expected the job's node file (run ddprun inside a qsub "
           "job)"},
          {"two words",
           {{"PBS_NODEFILE", "/nf"}},
           {{"/nf", "a\n  a b\n"}},
           "a",
           "/nf:2:5 (PBS_NODEFILE): expected one host name per line, got a second word"},
          {"node num",
           {{"PBS_NODEFILE", "/nf"}, {"PBS_NODENUM", "2"}},
           {{"/nf", "a\nb\n"}},
           "a",
           "PBS_NODENUM=\"2\": expected a node index below 2, the number of distinct hosts in "
           "PBS_NODEFILE"},
          {"num nodes",
           {{"PBS_NODEFILE", "/nf"}, {"PBS_NUM_NODES", "3"}},
           {{"/nf", "a\nb\n"}},
           "a",
           "PBS_NUM_NODES=\"3\": expected 2, the number of distinct hosts in PBS_NODEFILE"},
          {"np",
           {{"PBS_NODEFILE", "/nf"}, {"PBS_NP", "3"}},
           {{"/nf", "a\nb\n"}},
           "a",
           "PBS_NP=\"3\": expected 2, the number of lines in PBS_NODEFILE"},
      });
}

TEST(LsfReader, McpuHostsAndDjobHostfile) {
  expect_valid(read_lsf, "lsf",
               {
                   {"mcpu hosts",
                    {{"LSB_MCPU_HOSTS", "hostA 4 hostB 2 hostA 1"}, {"LSB_JOBID", "31"}},
                    {},
                    "hostB",
                    {{"hostA", 5}, {"hostB", 2}},
                    1,
                    "31"},
                   {"djob hostfile only",
                    {{"LSB_DJOB_HOSTFILE", "/h"}, {"LSB_JOBID", "32"}},
                    {{"/h", "x\nx\ny\n"}},
                    "x",
                    {{"x", 2}, {"y", 1}},
                    0,
                    "32"},
                   {"both agree",
                    {{"LSB_MCPU_HOSTS", "x 2 y 1 "}, {"LSB_DJOB_HOSTFILE", "/h"}},
                    {{"/h", "x\nx\ny\n"}},
                    "z",
                    {{"x", 2}, {"y", 1}},
                    std::nullopt,
                    ""},
               });
}

// CSM/JSM machines list the launch node first with one slot: it must not become node 0.
TEST(LsfReader, CsmLaunchNodeIsLeftOut) {
  expect_valid(read_lsf, "lsf",
               {
                   {"summit-style",
                    {{"LSB_MCPU_HOSTS", "batch3 1 a01n01 42 a01n02 42"}, {"LSB_JOBID", "7"}},
                    {},
                    "a01n02",
                    {{"a01n01", 42}, {"a01n02", 42}},
                    1,
                    "7"},
                   {"from the hostfile too",
                    {{"LSB_DJOB_HOSTFILE", "/h"}},
                    {{"/h", "login1\nc1\nc1\nc2\nc2\n"}},
                    "c1",
                    {{"c1", 2}, {"c2", 2}},
                    0,
                    ""},
                   {"a one-slot host among others is not a launch node",
                    {{"LSB_MCPU_HOSTS", "x 1 y 4 z 1"}},
                    {},
                    "x",
                    {{"x", 1}, {"y", 4}, {"z", 1}},
                    0,
                    ""},
                   {"one host of one slot is the job",
                    {{"LSB_MCPU_HOSTS", "x 1"}},
                    {},
                    "x",
                    {{"x", 1}},
                    0,
                    ""},
               });
  Environment env{{"LSB_MCPU_HOSTS", "batch3 1 a01n01 42"}};
  const ReadFile no_files;
  const HostFacts host{"a01n01", 1, 0};
  const Cluster cluster = read_lsf({env, no_files, host, std::nullopt});
  EXPECT_EQ(cluster.sources.at("launch node left out"), "batch3");
}

TEST(LsfReader, MalformedMcpuHostsNameColumn) {
  expect_invalid(
      read_lsf,
      {
          {"nothing",
           {{"LSB_JOBID", "1"}},
           {},
           "a",
           "LSB_MCPU_HOSTS is not set: expected the job's hosts and slots (run ddprun inside a "
           "bsub job)"},
          {"odd",
           {{"LSB_MCPU_HOSTS", "a 2 b"}},
           {},
           "a",
           "LSB_MCPU_HOSTS=\"a 2 b\", column 6: expected a slot count after host 'b'"},
          {"count",
           {{"LSB_MCPU_HOSTS", "a 2 b x"}},
           {},
           "a",
           "LSB_MCPU_HOSTS=\"a 2 b x\", column 7: expected a positive slot count, got 'x'"},
          {"empty",
           {{"LSB_MCPU_HOSTS", " "}},
           {},
           "a",
           "LSB_MCPU_HOSTS=\" \": expected 'host count ...'"},
          {"disagree",
           {{"LSB_MCPU_HOSTS", "x 2"}, {"LSB_DJOB_HOSTFILE", "/h"}},
           {{"/h", "x\n"}},
           "x",
           "LSB_DJOB_HOSTFILE=\"/h\": expected the hosts and slots of LSB_MCPU_HOSTS=\"x 2\", one "
           "line per slot, in the same order"},
      });
}

}  // namespace
}  // namespace ddprun
