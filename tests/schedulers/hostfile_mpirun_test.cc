// Re-runs Open MPI's own hostfile reader on every row of hostfile_cases.tsv, to show that
// the recorded table is still what `mpirun` does; hostfile_test.cc checks ddprun against
// the same table. mpirun only prints its allocation (ras_base_verbose) and launches
// nothing (--do-not-launch), so no host needs to exist. Skipped when mpirun is missing or
// is not Open MPI 4.1, and a failure then when CI=true.

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "case_table.h"
#include "temp_dir.h"

namespace ddprun {
namespace {

// stdout and stderr of `command` together, and whether it exited 0.
std::pair<std::string, bool> run_command(const std::string& command) {
  struct Closer {
    int* status;
    void operator()(std::FILE* f) const { *status = ::pclose(f); }
  };
  int status = -1;
  std::string output;
  {
    std::unique_ptr<std::FILE, Closer> pipe(::popen((command + " 2>&1").c_str(), "r"),
                                            Closer{&status});
    if (!pipe) return {"", false};
    char buffer[4096];
    std::size_t got;
    while ((got = std::fread(buffer, 1, sizeof buffer, pipe.get())) > 0) output.append(buffer, got);
  }
  return {output, WIFEXITED(status) && WEXITSTATUS(status) == 0};
}

bool ci() {
  const char* value = std::getenv("CI");
  return value != nullptr && std::string(value) == "true";
}

class MpirunHostfileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto [version, ok] = run_command("mpirun --version");
    if (!ok || version.find("(Open MPI) 4.1") == std::string::npos) {
      // A test that cannot run must not pass: under CI it fails, elsewhere it is a skip.
      if (ci())
        FAIL() << "Open MPI 4.1's mpirun not found (Debian package openmpi-bin), and CI=true";
      GTEST_SKIP() << "Open MPI 4.1's mpirun not found (Debian package openmpi-bin)";
    }
    dir_ = temp_.path();
  }

  // "host=slots ..." as mpirun lists its allocation, or "rejected".
  std::string allocation(const std::string& text) const {
    const std::filesystem::path file = dir_ / "hosts";
    std::ofstream(file, std::ios::binary) << text;
    const auto [output, ok] =
        run_command("mpirun --allow-run-as-root --hostfile '" + file.string() +
                    "' --mca ras_base_verbose 5 --mca orte_keep_fqdn_hostnames 1 --do-not-launch "
                    "--oversubscribe -np 1 true");
    static const std::regex kError(
        "parse error|bad parameter|multiple definitions|relative host|Signal:|"
        "ras_base_allocate|No nodes are available|Unhandled");
    const std::size_t list = output.find("ALLOCATED NODES");
    if (!ok || list == std::string::npos || std::regex_search(output, kError)) return "rejected";
    static const std::regex kNode(R"(\n\s*(\S+): flags=\S+ slots=(\d+) )");
    std::string result;
    const std::string nodes = output.substr(list, output.find("\n=====", list + 1) - list);
    for (std::sregex_iterator it(nodes.begin(), nodes.end(), kNode), end; it != end; ++it) {
      result += (result.empty() ? "" : " ") + (*it)[1].str() + "=" + (*it)[2].str();
    }
    return result;
  }

  support::TempDir temp_;
  std::filesystem::path dir_;
};

TEST_F(MpirunHostfileTest, RecordedTableIsWhatMpirunDoes) {
  const std::vector<testing::CaseRow> rows = testing::read_case_table("hostfile_cases.tsv");
  ASSERT_GT(rows.size(), 100u);
  for (const testing::CaseRow& row : rows) {
    ASSERT_GE(row.fields.size(), 2u) << "hostfile_cases.tsv:" << row.line;
    SCOPED_TRACE("hostfile_cases.tsv:" + std::to_string(row.line) + ": " + row.fields[0]);
    EXPECT_EQ(allocation(testing::unescape(row.fields[0])), row.fields[1]);
  }
  std::printf("compared %zu hostfiles with mpirun\n", rows.size());
}

}  // namespace
}  // namespace ddprun
