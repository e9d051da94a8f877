#include "hostlist.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "case_table.h"

namespace ddprun {
namespace {

using Hosts = std::vector<std::string>;

struct ValidCase {
  std::string expression;
  Hosts hosts;
};

struct InvalidCase {
  std::string expression;
  std::size_t column;
  std::string reason;
};

TEST(Hostlist, ValidExpressionsExpandInSlurmOrder) {
  const std::vector<ValidCase> cases = {
      {"n1", {"n1"}},
      {"a,b,a", {"a", "b", "a"}},
      {"n[1-3]", {"n1", "n2", "n3"}},
      {"n[5]", {"n5"}},
      {"n[5-5]", {"n5"}},
      {"n[0-0]", {"n0"}},
      {"n[01-3]", {"n01", "n02", "n03"}},
      {"n[1-03]", {"n1", "n2", "n3"}},
      {"n[8-11]", {"n8", "n9", "n10", "n11"}},
      {"n[08-11]", {"n08", "n09", "n10", "n11"}},
      {"n[098-101]", {"n098", "n099", "n100", "n101"}},
      {"n[3,1-2]", {"n3", "n1", "n2"}},
      {"n[1-3,2]", {"n1", "n2", "n3", "n2"}},
      {"n[2,2]", {"n2", "n2"}},
      {"[1-2]", {"1", "2"}},
      {"n-[1-2]", {"n-1", "n-2"}},
      {"n1[1-2]", {"n11", "n12"}},
      {"n[1-2]x[3-4]", {"n1x3", "n1x4", "n2x3", "n2x4"}},
      {"n[1-2][3-4]", {"n13", "n14", "n23", "n24"}},
      {"rack[1-2]-node[01-02]", {"rack1-node01", "rack1-node02", "rack2-node01", "rack2-node02"}},
      {"a[1-2]b[3-4]c[5-6]",
       {"a1b3c5", "a1b3c6", "a2b3c5", "a2b3c6", "a1b4c5", "a1b4c6", "a2b4c5", "a2b4c6"}},
      {"a[1,3]b[4-5]c[6-7]",
       {"a1b4c6", "a1b4c7", "a3b4c6", "a3b4c7", "a1b5c6", "a1b5c7", "a3b5c6", "a3b5c7"}},
      {"n[1-2],m[5],x", {"n1", "n2", "m5", "x"}},
      {"a,,b c\td, ", {"a", "b", "c", "d"}},
      {"n[1-]", {"n1"}},
      {"n[+1-2]", {"n01", "n02"}},
      {"n[ 1, 2]", {"n01", "n02"}},
      {"n[1a-3]", {"n01", "n02", "n03"}},
      {"gpu_a.b-c", {"gpu_a.b-c"}},
      {"n[000000000000000001-000000000000000002]", {"n000000000000000001", "n000000000000000002"}},
      {"n[999999999999999998-999999999999999999]", {"n999999999999999998", "n999999999999999999"}},
  };
  for (const ValidCase& c : cases) {
    SCOPED_TRACE(c.expression);
    EXPECT_EQ(parse_hostlist(c.expression), c.hosts);
  }
}

TEST(Hostlist, InvalidExpressionsNameColumnAndExpectation) {
  const std::vector<InvalidCase> cases = {
      {"", 1, "empty hostlist: expected at least one host name"},
      {" , ,", 1, "empty hostlist: expected at least one host name"},
      {"n[1-2", 2, "unclosed '[': expected ']'"},
      {"n[1-2,", 2, "unclosed '[': expected ']'"},
      {"n[", 2, "unclosed '[': expected ']'"},
      {"x,n[1-", 4, "unclosed '[': expected ']'"},
      {"n]", 2, "unexpected ']' without a matching '['"},
      {"n[1-2]]", 7, "unexpected ']' without a matching '['"},
      {"n[]", 3, "expected a number, got ']'"},
      {"n[a-b]", 3, "expected a number, got 'a'"},
      {"n[[1]]", 3, "unexpected '[' inside brackets"},
      {"n[1,,2]", 5, "expected a number, got ','"},
      {"n[-1]", 3, "expected a number, got '-'"},
      {"n[1- ]", 6, "expected a number after '-', got ']'"},
      {"n[1--2]", 5, "expected a number after '-', got '-'"},
      {"n[1-x]", 5, "unexpected 'x' in a range (Slurm's dimension boxes are not supported)"},
      {"n[1-10:2]", 7, "expected ',' or ']' after a range, got ':'"},
      {"n[1-2-3]", 6, "expected ',' or ']' after a range, got '-'"},
      {"n[1 ]", 4, "expected ',' or ']' after a range, got ' '"},
      {"n[3-1]", 3, "reversed range 3-1: the low bound must not exceed the high bound"},
      {"n[010-8]", 3, "reversed range 010-8: the low bound must not exceed the high bound"},
      {"n[1,5-04]", 5, "reversed range 5-04: the low bound must not exceed the high bound"},
      {"n[1-2]-ib:4", 10,
       "unexpected ':': host names may contain letters, digits, '-', '.' and '_'"},
      {"n[1-2]]", 7, "unexpected ']' without a matching '['"},
      {"a!b", 2, "unexpected '!': host names may contain letters, digits, '-', '.' and '_'"},
      {"a\nb", 2, "unexpected byte 0x0A: host names may contain letters, digits, '-', '.' and '_'"},
      {"h\xc3\xa9", 2,
       "unexpected byte 0xC3: host names may contain letters, digits, '-', '.' and '_'"},
      {"a:4", 2, "unexpected ':': host names may contain letters, digits, '-', '.' and '_'"},
      {"n[18446744073709551616]", 3, "number larger than 2^64-1"},
      {"n18446744073709551616", 2, "number at the end of the name is larger than 2^64-1"},
      {"n[1-65537]", 3, "range 1-65537 has more than 65536 hosts (Slurm's limit)"},
      {"a[1-65536,1]b[1]", 2,
       "bracket group has more than 65536 hosts before another group (Slurm's limit)"},
      {"a,n[1-2]x[1-65536,1-65536,1-65536,1-65536,1-65536,1-65536,1-65536,1-65536]", 3,
       "hostlist expands to more than 1048576 hosts"},
      {"n[1-1024]x[1-1025]", 1, "hostlist expands to more than 1048576 hosts"},
      {std::string(250, 'a') + "[99999-100000]", 1, "host name longer than 255 characters"},
  };
  for (const InvalidCase& c : cases) {
    SCOPED_TRACE(c.expression.substr(0, 40));
    try {
      const Hosts hosts = parse_hostlist(c.expression);
      ADD_FAILURE() << "expected an error, got " << hosts.size() << " hosts";
    } catch (const HostlistError& e) {
      EXPECT_EQ(e.column(), c.column);
      EXPECT_EQ(e.reason(), c.reason);
      EXPECT_EQ(std::string(e.what()), "column " + std::to_string(c.column) + ": " + c.reason);
    }
  }
}

TEST(Hostlist, CapCountsEveryElementAndAcceptsExactlyTheLimit) {
  std::string sixteen_ranges = "n[";
  for (int i = 0; i < 16; ++i) sixteen_ranges += (i ? "," : "") + std::string("1-65536");
  EXPECT_EQ(parse_hostlist(sixteen_ranges + "]").size(), kMaxHostlistSize);
  EXPECT_EQ(parse_hostlist("n[1-1024]x[1-1024]").size(), kMaxHostlistSize);
  EXPECT_EQ(parse_hostlist("a,b,c", 3).size(), 3u);
  EXPECT_THROW(parse_hostlist("a,b,c,d", 3), HostlistError);
  EXPECT_THROW(parse_hostlist("n[1-2]x[1-2]", 3), HostlistError);
}

// The table recorded from `scontrol show hostnames` (hostlist_cases.tsv): ddprun expands
// every row as Slurm 24.11 does, or rejects it where the table says why it differs.
TEST(Hostlist, ExpandsEveryRecordedRowAsScontrolDoes) {
  const std::vector<testing::CaseRow> rows = testing::read_case_table("hostlist_cases.tsv");
  ASSERT_GT(rows.size(), 100u);
  std::size_t accepted = 0;
  for (const testing::CaseRow& row : rows) {
    ASSERT_GE(row.fields.size(), 2u) << "hostlist_cases.tsv:" << row.line;
    SCOPED_TRACE("hostlist_cases.tsv:" + std::to_string(row.line) + ": " + row.fields[0]);
    const bool differs = row.fields.size() > 2 && row.fields[2].starts_with("rejected: ");
    const std::string& want = differs ? row.fields[2] : row.fields[1];
    try {
      const Hosts hosts = parse_hostlist(testing::unescape(row.fields[0]));
      EXPECT_EQ(testing::compare_expansion(want, hosts), "");
      ++accepted;
    } catch (const HostlistError& e) {
      EXPECT_EQ(want.substr(0, 8), "rejected") << e.what();
    }
  }
  std::printf("%zu rows: %zu accepted\n", rows.size(), accepted);
}

TEST(Hostlist, ErrorIsAConfigErrorSoMainReportsIt) {
  EXPECT_THROW(parse_hostlist("n[1-"), ConfigError);
}

struct CountsCase {
  std::string expression;
  std::vector<int> counts;
};

TEST(Counts, ValidExpressionsExpand) {
  const std::vector<CountsCase> cases = {
      {"1", {1}},
      {"0", {0}},
      {"2(x3),1", {2, 2, 2, 1}},
      {"72(x2),36", {72, 72, 36}},
      {"4,4,2", {4, 4, 2}},
      {"1(x1)", {1}},
      {"3(x2),1(x2),3", {3, 3, 1, 1, 3}},
      {"999999999", {999999999}},
  };
  for (const CountsCase& c : cases) {
    SCOPED_TRACE(c.expression);
    EXPECT_EQ(parse_counts(c.expression), c.counts);
  }
}

TEST(Counts, InvalidExpressionsNameColumnAndExpectation) {
  const std::vector<InvalidCase> cases = {
      {"", 1, "expected a count, got end of input"},
      {"2,", 3, "expected a count, got end of input"},
      {",2", 1, "expected a count, got ','"},
      {"-1", 1, "expected a count, got '-'"},
      {"2(3)", 3, "expected 'x' after '(', got '3'"},
      {"2(", 3, "expected 'x' after '(', got end of input"},
      {"2(x)", 4, "expected a repeat count, got ')'"},
      {"2(x0)", 4, "repeat count must be at least 1"},
      {"2(x3", 5, "expected ')' after the repeat count, got end of input"},
      {"2(x3)4", 6, "expected ',' after ')', got '4'"},
      {"2;1", 2, "expected ',' or '(' after a count, got ';'"},
      {"2 ", 2, "expected ',' or '(' after a count, got ' '"},
      {"1234567890", 1, "number longer than 9 digits"},
      {"1(x1048576),1", 13, "counts expand to more than 1048576 values"},
      {"1(x999999999)", 1, "counts expand to more than 1048576 values"},
  };
  for (const InvalidCase& c : cases) {
    SCOPED_TRACE(c.expression);
    try {
      parse_counts(c.expression);
      ADD_FAILURE() << "expected an error";
    } catch (const HostlistError& e) {
      EXPECT_EQ(e.column(), c.column);
      EXPECT_EQ(e.reason(), c.reason);
    }
  }
}

TEST(DescribeChar, PrintableQuotedOthersAsBytesAndEnd) {
  EXPECT_EQ(describe_char("a", 0), "'a'");
  EXPECT_EQ(describe_char("\n", 0), "byte 0x0A");
  EXPECT_EQ(describe_char("\x7f", 0), "byte 0x7F");
  EXPECT_EQ(describe_char("a", 1), "end of input");
}

}  // namespace
}  // namespace ddprun
