#include "hostfile.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <map>
#include <string>
#include <system_error>
#include <vector>

#include "case_table.h"
#include "ddprun/contract/errors.h"

namespace ddprun {
namespace {

using Nodes = std::vector<std::pair<std::string, int>>;

Nodes pairs(const std::vector<NodeSlots>& nodes) {
  Nodes result;
  for (const NodeSlots& node : nodes) result.emplace_back(node.host, node.slots);
  return result;
}

struct ValidCase {
  std::string name;
  std::string text;
  Nodes nodes;
};

TEST(Hostfile, FormatsCommentsBlankLinesCrlfAndDuplicates) {
  const std::vector<ValidCase> cases = {
      {"plain", "a\nb\nc\n", {{"a", 1}, {"b", 1}, {"c", 1}}},
      {"no final newline", "a\nb", {{"a", 1}, {"b", 1}}},
      {"open mpi",
       "# cluster\nn1 slots=4 max_slots=8\nn2 slots=2  # small\n",
       {{"n1", 4}, {"n2", 2}}},
      {"open mpi spellings", "n1 count=2 max-slots=2\nn2 cpu = 3\n", {{"n1", 2}, {"n2", 3}}},
      {"max_slots only gives the slots", "n1 max_slots=4\n", {{"n1", 4}}},
      {"deepspeed", "worker-1 slots=8\nworker-2 slots=8\n", {{"worker-1", 8}, {"worker-2", 8}}},
      {"host:N", "a:4\nb:2\n", {{"a", 4}, {"b", 2}}},
      {"hostlist", "gpu[01-03] slots=8\n", {{"gpu01", 8}, {"gpu02", 8}, {"gpu03", 8}}},
      {"hostlist with :N", "n[1-2]:3\n", {{"n1", 3}, {"n2", 3}}},
      {"comma list on a line", "a,b\nc\n", {{"a", 1}, {"b", 1}, {"c", 1}}},
      {"crlf, tabs, blank lines", "\r\n  a\tslots=2\r\n\r\n\t\nb\r\n", {{"a", 2}, {"b", 1}}},
      {"comments", "#a\n   # b\nc#d\nd // e\n/* f\ng */ h\n", {{"c", 1}, {"d", 1}, {"h", 1}}},
      {"a host named again counts one more slot", "a slots=2\nb\na\nb\nb\n", {{"a", 3}, {"b", 3}}},
      {"duplicates within a hostlist", "n[1-2],n1\n", {{"n1", 2}, {"n2", 1}}},
      {"other words are ignored, as mpirun does", "a b 5\n", {{"a", 1}}},
      {"rankfile lines", "rank 0=a slot=0:1\nrank 1=a slot=1\n", {{"a", 2}}},
      {"addresses", "10.0.0.1 slots=2\nfe80::1\n", {{"10.0.0.1", 2}, {"fe80::1", 1}}},
      {"fully qualified", "n1.cluster.org slots=2\n", {{"n1.cluster.org", 2}}},
  };
  for (const ValidCase& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(pairs(parse_hostfile(c.text, "hosts")), c.nodes);
  }
}

struct InvalidCase {
  std::string text;
  std::string message;
};

TEST(Hostfile, ErrorsNameFileLineColumnAndExpectation) {
  const std::vector<InvalidCase> cases = {
      {"",
       "hosts: no hosts: expected at least one line naming a host (all lines are blank or "
       "comments)"},
      {"# only\n\n",
       "hosts: no hosts: expected at least one line naming a host (all lines are "
       "blank or comments)"},
      {"a\nb slots=x\n", "hosts:2:9: expected 'slots=N' with N a number, got 'x'"},
      {"a slots=\n", "hosts:1:9: expected 'slots=N' with N a number, got end of line"},
      {"a slots 2\n", "hosts:1:9: expected 'slots=N' with N a number, got '2'"},
      {"a slots=0\n", "hosts:1:9: expected a slot count from 1 to 1073741824, got '0'"},
      {"a:0\n", "hosts:1:3: expected a slot count from 1 to 1073741824, got '0'"},
      {"  a:x\n", "hosts:1:5: expected a slot count after ':', got 'x'"},
      {"a slots=2147483648\n", "hosts:1:9: number '2147483648' is larger than 2147483647"},
      {"a:2 slots=2\n",
       "hosts:1:11: slots given twice for host 'a' (a host named again counts one more slot "
       "and takes no slots=)"},
      {"a\na slots=2\n",
       "hosts:2:9: slots given twice for host 'a' (a host named again counts one more slot "
       "and takes no slots=)"},
      {"a slots=4 max_slots=2\n", "hosts:1:21: max_slots=2 is less than slots=4 for host 'a'"},
      {"a sockets=2\n",
       "hosts:1:3: unexpected 'sockets': expected slots=N or max_slots=N after "
       "the host"},
      {"a b.c\n", "hosts:1:3: unexpected 'b.c': expected slots=N or max_slots=N after the host"},
      {"a\rb\n",
       "hosts:1:2: unexpected byte 0x0D: expected slots=N or max_slots=N after the "
       "host"},
      {"a port=22\n",
       "hosts:1:3: 'port' is not supported: ddprun reaches every host with the same ssh "
       "settings; set them per host in an ssh config (--ssh-config)"},
      {"bob@a\n",
       "hosts:1:1: user@host is not supported: ddprun runs every host as the same user; set "
       "'User' per host in an ssh config (--ssh-config)"},
      {"n1.example.org:4\n",
       "hosts:1:1: mpirun reads 'n1.example.org' here and ignores ':4'; write the slots as "
       "'slots=N' and one host per line"},
      {"+n0\n",
       "hosts:1:1: relative host '+n0' needs an earlier allocation (mpirun rejects it in a "
       "hostfile too)"},
      {"cpu\n", "hosts:1:1: 'cpu' is a hostfile keyword, not a host name"},
      {"rank 0 a\n", "hosts:1:1: expected 'rank N=host' on one line"},
      {"\n\n  n[1-2\n", "hosts:3:4: unclosed '[': expected ']'"},
      {"n[3-1] slots=2\n",
       "hosts:1:3: reversed range 3-1: the low bound must not exceed the high bound"},
      {"slots=2\n",
       "hosts:1:6: unexpected '=': host names may contain letters, digits, '-', "
       "'.' and '_'"},
      {"a*\n",
       "hosts:1:2: unexpected '*': host names may contain letters, digits, '-', '.' and "
       "'_'"},
  };
  for (const InvalidCase& c : cases) {
    SCOPED_TRACE(c.text);
    try {
      parse_hostfile(c.text, "hosts");
      ADD_FAILURE() << "expected an error";
    } catch (const ConfigError& e) {
      EXPECT_EQ(std::string(e.what()), c.message);
    }
  }
}

// The table recorded from mpirun (hostfile_cases.tsv): ddprun reads every row as Open MPI
// 4.1 does, or as the table's third field says where it knowingly differs. Rejections are
// one line naming the file and the line.
TEST(Hostfile, ReadsEveryRecordedRowAsMpirunDoes) {
  const std::vector<testing::CaseRow> rows = testing::read_case_table("hostfile_cases.tsv");
  ASSERT_GT(rows.size(), 100u);
  std::size_t same = 0;
  for (const testing::CaseRow& row : rows) {
    ASSERT_GE(row.fields.size(), 2u) << "hostfile_cases.tsv:" << row.line;
    SCOPED_TRACE("hostfile_cases.tsv:" + std::to_string(row.line) + ": " + row.fields[0]);
    // The third field is "RESULT: why".
    const std::string want =
        row.fields.size() > 2 ? row.fields[2].substr(0, row.fields[2].find(": ")) : row.fields[1];
    std::string got;
    try {
      got = testing::slots_text(pairs(parse_hostfile(testing::unescape(row.fields[0]), "hosts")));
    } catch (const ConfigError& e) {
      const std::string message = e.what();
      EXPECT_EQ(message.rfind("hosts", 0), 0u) << message;
      EXPECT_EQ(message.find('\n'), std::string::npos) << message;
      got = "rejected";
    }
    EXPECT_EQ(got, want);
    same += row.fields.size() == 2;
  }
  std::printf("%zu rows, %zu read as mpirun reads them\n", rows.size(), same);
}

TEST(Hostfile, CapOnHostsCoversTheWholeFile) {
  EXPECT_EQ(parse_hostfile("n[1-3]\nm[1-3]\n", "h", 6).size(), 6u);
  try {
    parse_hostfile("n[1-3]\nm[1-4]\n", "h", 6);
    ADD_FAILURE() << "expected an error";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), "h:2:1: the hostfile names more than 6 hosts");
  }
}

TEST(Hostfile, ReadHostfileGivesAHostfileClusterWithoutThisNode) {
  const std::map<std::string, std::string> files = {{"/h", "a slots=2\nb\n"}};
  const ReadFile read = [&](const std::string& path) {
    auto it = files.find(path);
    if (it == files.end()) {
      throw std::system_error(std::make_error_code(std::errc::no_such_file_or_directory),
                              "open " + path);
    }
    return it->second;
  };
  const Cluster cluster = read_hostfile("/h", read);
  EXPECT_EQ(cluster.scheduler, "hostfile");
  EXPECT_EQ(cluster.job_id, "");
  EXPECT_EQ(pairs(cluster.nodes), (Nodes{{"a", 2}, {"b", 1}}));
  EXPECT_FALSE(cluster.this_node);
  EXPECT_EQ(cluster.sources.at("hostfile"), "/h");
  try {
    read_hostfile("/missing", read);
    ADD_FAILURE() << "expected an error";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()),
              "cannot read /missing: open /missing: No such file or directory");
  }
}

TEST(Hostfile, ReadFileFromDiskReadsAndNamesMissingPaths) {
  char pattern[] = "/tmp/ddprun-hostfile-XXXXXX";
  const int fd = ::mkstemp(pattern);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, "a\nb\n", 4), 4);
  ::close(fd);
  EXPECT_EQ(read_file_from_disk(pattern), "a\nb\n");
  ::unlink(pattern);
  try {
    read_file_from_disk(pattern);
    ADD_FAILURE() << "expected an error";
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code(), std::errc::no_such_file_or_directory);
    EXPECT_NE(std::string(e.what()).find(pattern), std::string::npos);
  }
}

}  // namespace
}  // namespace ddprun
