// A node's ddprun started again in a lost node's place ends what is left of that node's
// earlier ddprun on the host first. Real processes: a fake agent (bash named ddprun, with an
// agent's command line) with a "guardian" (a fork of it, named as ddprun's own, that kills
// the "worker" once the agent is gone) and a "worker" (the environment of one); beside them
// the same for another node, a worker of another job (another master port), and a worker
// left alone (its agent and guardian gone).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "ddprun/common/files.h"
#include "run/process.h"
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

AgentIdentity node(int rank, int port = 29555) {
  return {"run-a", rank, "node1", port};
}

// The environment of a worker of `who`, for a shell command.
std::string worker_env(const AgentIdentity& who) {
  return "TORCHELASTIC_RUN_ID=" + who.run_id + " GROUP_RANK=" + std::to_string(who.node_rank) +
         " MASTER_ADDR=" + who.master_addr + " MASTER_PORT=" + std::to_string(who.master_port);
}

// A fake agent of `who` started through popen; its first line says its pid, its worker's
// and its guardian's, once all three run.
struct FakeAgent {
  FILE* out = nullptr;
  pid_t agent = 0, worker = 0, guardian = 0;
};

FakeAgent start_fake_agent(const support::TempDir& dir, const AgentIdentity& who) {
  const std::string script = dir.path() + "/agent" + std::to_string(who.node_rank) + ".sh";
  std::ofstream(script) << "fifo=$(mktemp -u " << dir.path() << "/fifo.XXXXXX)\n"
                        << "mkfifo \"$fifo\"\n"
                        << worker_env(who)
                        << " sleep 1000 & worker=$!\n"
                        // The guardian: reads until the agent's end closes the fifo.
                        << "( printf %s " << kGuardianName << " >/proc/$BASHPID/comm\n"
                        << "  read -r _ <\"$fifo\"; kill -9 $worker ) & guardian=$!\n"
                        << "exec 3>\"$fifo\"\n"
                        << "echo \"$$ $worker $guardian\"\n"
                        << "wait\n";
  const std::string command = "exec bash -c 'exec -a ddprun bash " + script + " --agent --run-id " +
                              who.run_id + " --master-addr " + who.master_addr + " --master-port " +
                              std::to_string(who.master_port) + " --node-rank " +
                              std::to_string(who.node_rank) + " -- train.py --node-rank 9'";
  FakeAgent fake;
  fake.out = ::popen(command.c_str(), "r");
  if (fake.out == nullptr) return fake;
  char line[128] = {};
  if (std::fgets(line, sizeof line, fake.out) != nullptr) {
    std::istringstream(line) >> fake.agent >> fake.worker >> fake.guardian;
  }
  return fake;
}

// A worker with `who`'s environment alone, through popen: its pid.
pid_t start_worker(FILE*& out, const AgentIdentity& who) {
  const std::string command = "exec env " + worker_env(who) + " bash -c 'echo $$; exec sleep 1000'";
  out = ::popen(command.c_str(), "r");
  char line[32] = {};
  if (out == nullptr || std::fgets(line, sizeof line, out) == nullptr) return 0;
  return static_cast<pid_t>(std::atoi(line));
}

TEST(StaleAgents, WhatIsLeftOfTheLostNodesDdprunEndsAndNothingElse) {
  if (::system("command -v bash >/dev/null && command -v mkfifo >/dev/null") != 0) {
    if (std::getenv("CI") != nullptr && std::string(std::getenv("CI")) == "true") {
      FAIL() << "bash and mkfifo are needed, and CI=true";
    }
    GTEST_SKIP() << "bash or mkfifo is missing";
  }
  const support::TempDir dir;
  FakeAgent lost = start_fake_agent(dir, node(2));
  FakeAgent other = start_fake_agent(dir, node(3));
  FILE* left_out = nullptr;
  FILE* elsewhere_out = nullptr;
  const pid_t left = start_worker(left_out, node(2));                   // its agent long gone
  const pid_t elsewhere = start_worker(elsewhere_out, node(2, 29556));  // another job's
  ASSERT_GT(lost.guardian, 0) << "the fake agent did not start";
  ASSERT_GT(other.guardian, 0) << "the other fake agent did not start";
  ASSERT_GT(left, 0);
  ASSERT_GT(elsewhere, 0);

  const StaleProcesses stale = stale_processes(node(2));
  EXPECT_EQ(stale.agents, std::vector<pid_t>{lost.agent});
  EXPECT_EQ(stale.guardians, std::vector<pid_t>{lost.guardian}) << "left to kill its workers";
  std::vector<pid_t> workers = stale.workers;
  std::sort(workers.begin(), workers.end());
  std::vector<pid_t> expected = {lost.worker, left};
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(workers, expected);
  EXPECT_TRUE(stale_processes({"run-b", 2, "node1", 29555}).empty()) << "another run's";
  EXPECT_TRUE(end_stale(stale, std::chrono::seconds(10)));
  EXPECT_FALSE(running(lost.agent));
  EXPECT_FALSE(running(lost.guardian));
  EXPECT_FALSE(running(lost.worker));
  EXPECT_FALSE(running(left));
  EXPECT_TRUE(running(other.agent) && running(other.worker)) << "another node's agent ended";
  EXPECT_TRUE(running(elsewhere)) << "another job's worker ended";
  for (const pid_t pid : {lost.worker, left, other.worker, elsewhere}) ::kill(pid, SIGKILL);
  const int lost_status = ::pclose(lost.out);
  EXPECT_TRUE(WIFSIGNALED(lost_status) && WTERMSIG(lost_status) == SIGKILL) << lost_status;
  ::kill(other.agent, SIGKILL);
  for (FILE* out : {other.out, left_out, elsewhere_out}) ::pclose(out);
}

}  // namespace
}  // namespace ddprun
