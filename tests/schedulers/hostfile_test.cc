#include "hostfile.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <map>
#include <string>
#include <system_error>
#include <vector>

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
      {"open mpi max-slots spelling", "n1 slots=2 max-slots=2\n", {{"n1", 2}}},
      {"max_slots only", "n1 max_slots=4\n", {{"n1", 1}}},
      {"deepspeed", "worker-1 slots=8\nworker-2 slots=8\n", {{"worker-1", 8}, {"worker-2", 8}}},
      {"host:N", "a:4\nb:2\n", {{"a", 4}, {"b", 2}}},
      {"hostlist", "gpu[01-03] slots=8\n", {{"gpu01", 8}, {"gpu02", 8}, {"gpu03", 8}}},
      {"hostlist with :N", "n[1-2]:3\n", {{"n1", 3}, {"n2", 3}}},
      {"comma list on a line", "a,b\nc\n", {{"a", 1}, {"b", 1}, {"c", 1}}},
      {"crlf, tabs, blank lines", "\r\n  a\tslots=2\r\n\r\n\t\nb\r\n", {{"a", 2}, {"b", 1}}},
      {"comment-only lines", "#a\n   # b\nc#d\n", {{"c", 1}}},
      {"duplicates merge, first position kept",
       "a slots=2\nb\na slots=3\nb:4\n",
       {{"a", 5}, {"b", 5}}},
      {"duplicates within a hostlist", "n[1-2],n1\n", {{"n1", 2}, {"n2", 1}}},
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
      {"a\nb slots=x\n", "hosts:2:9: expected a positive slot count after 'slots=', got 'x'"},
      {"a slots=0\n", "hosts:1:9: expected a positive slot count after 'slots=', got '0'"},
      {"a slots=\n", "hosts:1:9: expected a positive slot count after 'slots=', got ''"},
      {"a:0\n", "hosts:1:3: expected a positive slot count after ':', got '0'"},
      {"  a:x\n", "hosts:1:5: expected a positive slot count after ':', got 'x'"},
      {"a:2 slots=2\n", "hosts:1:5: slots given twice for this host"},
      {"a slots=1 slots=2\n", "hosts:1:11: slots given twice for this host"},
      {"a max_slots=1 max_slots=2\n", "hosts:1:15: max_slots given twice for this host"},
      {"a max_slots=x\n", "hosts:1:13: expected a positive slot count after 'max_slots=', got 'x'"},
      {"a slots=4 max_slots=2\n", "hosts:1:21: max_slots=2 is less than slots=4"},
      {"a cpu=4\n", "hosts:1:3: unknown key 'cpu': expected slots=N or max_slots=N"},
      {"a b\n", "hosts:1:3: expected slots=N or max_slots=N after the host, got 'b'"},
      {"\n\n  n[1-2\n", "hosts:3:4: unclosed '[': expected ']'"},
      {"n[3-1] slots=2\n",
       "hosts:1:3: reversed range 3-1: the low bound must not exceed the "
       "high bound"},
      {"slots=2\n",
       "hosts:1:6: unexpected '=': host names may contain letters, digits, '-', '.' and '_'"},
      {"a\r\nb,,c\r\n", "hosts:2:3: empty host name: expected a host name before ','"},
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
