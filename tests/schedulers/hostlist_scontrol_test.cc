// Re-runs Slurm's own parser, `scontrol show hostnames EXPR` (Debian package
// slurm-client: 22.05 here; scripts/check-slurm-hostlist.sh runs it with Debian 13's 24.11
// first on PATH), on every row of hostlist_cases.tsv, to show that the recorded table is
// still what Slurm does; hostlist_test.cc checks ddprun against the same table. No daemon
// is needed, but scontrol always runs with SLURM_CONF pointing at a minimal slurm.conf
// written here: without it Slurm looks its controller up in DNS. Skipped when scontrol is
// not installed, and a failure then when CI=true.

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "case_table.h"
#include "temp_dir.h"

namespace ddprun {
namespace {

using testing::CaseRow;

std::optional<std::string> find_in_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "/usr/bin:/bin");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return std::nullopt;
}

// Single quotes for the shell; a quote inside becomes '\''.
std::string shell_quote(const std::string& text) {
  std::string quoted = "'";
  for (char c : text) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

struct ScontrolResult {
  std::vector<std::string> hosts;
  bool rejected = false;  // "Invalid hostlist" or an error (scontrol still exits 0), or a crash
};

class ScontrolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    scontrol_ = find_in_path("scontrol");
    if (!scontrol_) {
      // A test that cannot run must not pass: under CI it fails, elsewhere it is a skip.
      const char* ci = std::getenv("CI");
      if (ci != nullptr && std::string(ci) == "true") {
        FAIL() << "scontrol not installed (Debian package slurm-client), and CI=true";
      }
      GTEST_SKIP() << "scontrol not installed (Debian package slurm-client)";
    }
    dir_ = temp_.path();
    std::ofstream conf(dir_ / "slurm.conf");
    conf << "ClusterName=t\nSlurmctldHost=localhost\nNodeName=localhost\n"
            "PartitionName=p Nodes=localhost\n";
  }
  ScontrolResult run(const std::string& expression) const {
    const std::string command = "SLURM_CONF=" + shell_quote((dir_ / "slurm.conf").string()) + " " +
                                shell_quote(*scontrol_) + " show hostnames " +
                                shell_quote(expression) + " 2>&1";
    struct Closer {
      int* status;
      void operator()(std::FILE* f) const { *status = ::pclose(f); }
    };
    int status = 0;
    ScontrolResult result;
    std::string output;
    {
      std::unique_ptr<std::FILE, Closer> pipe(::popen(command.c_str(), "r"), Closer{&status});
      EXPECT_TRUE(pipe);
      if (!pipe) return result;
      char buffer[65536];
      std::size_t got;
      while ((got = std::fread(buffer, 1, sizeof buffer, pipe.get())) > 0) {
        output.append(buffer, got);
      }
    }
    result.rejected = !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    std::stringstream lines(output);
    std::string line;
    while (std::getline(lines, line)) {
      if (line.find("Invalid hostlist") != std::string::npos ||
          line.find("error:") != std::string::npos) {
        result.rejected = true;
      } else {
        result.hosts.push_back(line);
      }
    }
    return result;
  }

  // Slurm's major version from `scontrol --version` ("slurm 22.05.8"); 0 when unreadable.
  int major_version() const {
    const std::string command = "SLURM_CONF=" + shell_quote((dir_ / "slurm.conf").string()) + " " +
                                shell_quote(*scontrol_) + " --version 2>&1";
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> pipe(::popen(command.c_str(), "r"), ::pclose);
    char line[128] = {};
    if (!pipe || std::fgets(line, sizeof line, pipe.get()) == nullptr) return 0;
    const std::string text = line;
    const auto digit = text.find_first_of("0123456789");
    return digit == std::string::npos ? 0 : std::atoi(text.c_str() + digit);
  }

  std::optional<std::string> scontrol_;
  support::TempDir temp_;
  std::filesystem::path dir_;
};

TEST_F(ScontrolTest, RecordedTableIsWhatScontrolDoes) {
  const std::vector<CaseRow> rows = testing::read_case_table("hostlist_cases.tsv");
  ASSERT_GT(rows.size(), 100u);
  // The table is Slurm 24.11's, with "22.05: ANSWER" where the older Slurm differs.
  const int major = major_version();
  ASSERT_GE(major, 20) << "cannot read the version of " << *scontrol_;
  for (const CaseRow& row : rows) {
    ASSERT_GE(row.fields.size(), 2u) << "hostlist_cases.tsv:" << row.line;
    const std::string expression = testing::unescape(row.fields[0]);
    SCOPED_TRACE("hostlist_cases.tsv:" + std::to_string(row.line) + ": " + row.fields[0]);
    std::string want = row.fields[1];
    for (std::size_t i = 2; major < 23 && i < row.fields.size(); ++i) {
      if (row.fields[i].starts_with("22.05: ")) want = row.fields[i].substr(7);
    }
    const ScontrolResult theirs = run(expression);
    if (want == "rejected") {
      EXPECT_TRUE(theirs.rejected);
    } else {
      EXPECT_FALSE(theirs.rejected);
      EXPECT_EQ(testing::compare_expansion(want, theirs.hosts), "");
    }
  }
  std::printf("compared %zu expressions with scontrol (Slurm %d)\n", rows.size(), major);
}

}  // namespace
}  // namespace ddprun
