// A node's ddprun started again in a lost node's place ends that node's old ddprun on the
// host first. Real processes: a fake agent (bash named ddprun, with an agent's command line)
// with a "guardian" (a fork of it, as ddprun's own, that kills the "worker" once the agent
// is gone) and a "worker"; another fake agent of another node beside it.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "ddprun/common/files.h"
#include "run/stale_agents.h"
#include "temp_dir.h"

namespace ddprun {
namespace {

// Alive and not a zombie.
bool running(pid_t pid) {
  const std::string stat = read_any_file_head("/proc/" + std::to_string(pid) + "/stat", 512);
  const auto close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] != 'Z';
}

// A fake agent of run "run-a" for `node` started through popen; its first line says its pid,
// its worker's and its guardian's, once all three run.
struct FakeAgent {
  FILE* out = nullptr;
  pid_t agent = 0, worker = 0, guardian = 0;
};

FakeAgent start_fake_agent(const support::TempDir& dir, int node) {
  const std::string script = dir.path() + "/agent" + std::to_string(node) + ".sh";
  std::ofstream(script) << "fifo=$(mktemp -u " << dir.path() << "/fifo.XXXXXX)\n"
                        << "mkfifo \"$fifo\"\n"
                        << "sleep 1000 & worker=$!\n"
                        // The guardian: reads until the agent's end closes the fifo.
                        << "( read -r _ <\"$fifo\"; kill -9 $worker ) & guardian=$!\n"
                        << "exec 3>\"$fifo\"\n"
                        << "echo \"$$ $worker $guardian\"\n"
                        << "wait\n";
  const std::string command = "exec bash -c 'exec -a ddprun bash " + script +
                              " --agent --run-id run-a --node-rank " + std::to_string(node) +
                              " -- train.py --node-rank 9'";
  FakeAgent fake;
  fake.out = ::popen(command.c_str(), "r");
  if (fake.out == nullptr) return fake;
  char line[128] = {};
  if (std::fgets(line, sizeof line, fake.out) != nullptr) {
    std::istringstream(line) >> fake.agent >> fake.worker >> fake.guardian;
  }
  return fake;
}

TEST(StaleAgents, TheLostNodesOldDdprunEndsWithItsWorkersAndNoOtherDoes) {
  if (::system("command -v bash >/dev/null && command -v mkfifo >/dev/null") != 0) {
    if (std::getenv("CI") != nullptr && std::string(std::getenv("CI")) == "true") {
      FAIL() << "bash and mkfifo are needed, and CI=true";
    }
    GTEST_SKIP() << "bash or mkfifo is missing";
  }
  const support::TempDir dir;
  FakeAgent lost = start_fake_agent(dir, 2);
  FakeAgent other = start_fake_agent(dir, 3);
  ASSERT_GT(lost.guardian, 0) << "the fake agent did not start";
  ASSERT_GT(other.guardian, 0) << "the other fake agent did not start";

  const std::vector<pid_t> stale = stale_agents("run-a", 2);
  EXPECT_EQ(stale, std::vector<pid_t>{lost.agent}) << "its guardian is not an agent";
  EXPECT_TRUE(stale_agents("run-b", 2).empty()) << "another run's";
  end_stale_agents(stale, std::chrono::seconds(10));
  // Ended, its guardian too, and the worker the guardian killed once the agent was gone.
  EXPECT_FALSE(running(lost.agent));
  EXPECT_FALSE(running(lost.guardian));
  EXPECT_FALSE(running(lost.worker));
  EXPECT_TRUE(running(other.agent) && running(other.worker)) << "another node's agent ended";
  ::kill(lost.worker, SIGKILL);  // when the test fails: it would hold the pipe pclose reads
  const int lost_status = ::pclose(lost.out);
  EXPECT_TRUE(WIFSIGNALED(lost_status) && WTERMSIG(lost_status) == SIGKILL) << lost_status;

  end_stale_agents(stale_agents("run-a", 3), std::chrono::seconds(10));
  EXPECT_FALSE(running(other.worker));
  ::kill(other.worker, SIGKILL);
  ::pclose(other.out);
}

}  // namespace
}  // namespace ddprun
