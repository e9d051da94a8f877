#include "agents.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>

#include "ddprun/contract/errors.h"
#include "shell_quote.h"

namespace ddprun {
namespace {

Cluster two_nodes(const std::string& scheduler) {
  Cluster cluster;
  cluster.scheduler = scheduler;
  cluster.nodes = {{"n1", 2}, {"n2", 2}};
  cluster.this_node = 0;
  return cluster;
}

TEST(ShellQuote, WrapsInSingleQuotesAndEscapesThem) {
  EXPECT_EQ(shell_quote(""), "''");
  EXPECT_EQ(shell_quote("plain"), "'plain'");
  EXPECT_EQ(shell_quote("it's"), "'it'\\''s'");
  EXPECT_EQ(shell_quote("$(rm -rf /)"), "'$(rm -rf /)'");
}

TEST(ChooseLauncher, AutoPicksSrunInSlurmMpirunInSgeElseSsh) {
  Options options;
  EXPECT_EQ(choose_launcher(options, two_nodes("slurm"), {}, true), LauncherKind::kSrun);
  EXPECT_EQ(choose_launcher(options, two_nodes("sge"), {}, true), LauncherKind::kMpirun);
  EXPECT_EQ(choose_launcher(options, two_nodes("sge"), {}, false), LauncherKind::kSsh);
  EXPECT_EQ(choose_launcher(options, two_nodes("hostfile"), {}, true), LauncherKind::kSsh);
  options.launcher = "mpirun";
  EXPECT_EQ(choose_launcher(options, two_nodes("hostfile"), {}, true), LauncherKind::kMpirun);
}

TEST(ChooseLauncher, NeverFansOutWhenStartedPerNodeOrOnOneNode) {
  Options options;
  EXPECT_EQ(choose_launcher(options, two_nodes("slurm"), {{"SLURM_STEP_ID", "0"}}, true),
            LauncherKind::kLocal);
  EXPECT_EQ(choose_launcher(options, two_nodes("hostfile"), {{"OMPI_COMM_WORLD_SIZE", "2"}}, true),
            LauncherKind::kLocal);
  EXPECT_EQ(choose_launcher(options, two_nodes("mpi"), {}, true), LauncherKind::kLocal);
  Cluster one = two_nodes("hostfile");
  one.nodes.pop_back();
  EXPECT_EQ(choose_launcher(options, one, {}, true), LauncherKind::kLocal);
  options.launcher = "local";
  EXPECT_EQ(choose_launcher(options, two_nodes("hostfile"), {}, true), LauncherKind::kLocal);
  options.launcher = "ssh";
  options.node_rank = 0;
  EXPECT_EQ(choose_launcher(options, two_nodes("hostfile"), {}, true), LauncherKind::kLocal);
}

TEST(ForwardedEnvironment, DefaultSetPlusExplicitNamesAndValues) {
  const Environment env = {{"PATH", "/bin"},  {"NCCL_DEBUG", "INFO"},
                           {"SECRET", "s"},   {"CUDA_VISIBLE_DEVICES", "0"},
                           {"HOME", "/root"}, {"MY_FLAG", "1"}};
  const Environment forwarded = forwarded_environment(env, {"MY_FLAG", "EXTRA=a=b c"});
  const Environment expected = {
      {"PATH", "/bin"}, {"NCCL_DEBUG", "INFO"}, {"MY_FLAG", "1"}, {"EXTRA", "a=b c"}};
  EXPECT_EQ(forwarded, expected);
}

TEST(ForwardedEnvironment, RejectsUnsetNamesAndBadNames) {
  EXPECT_THROW(forwarded_environment({}, {"NOT_SET"}), UsageError);
  EXPECT_THROW(forwarded_environment({}, {"1BAD=x"}), UsageError);
  EXPECT_THROW(forwarded_environment({}, {"=x"}), UsageError);
  EXPECT_THROW(forwarded_environment({}, {"A;B=x"}), UsageError);
}

TEST(AgentMessages, HelloAndSignalsRoundTrip) {
  const Environment env = {{"A", "line1\nline2"}, {"B", "'\"$(x)`y`;"}};
  const std::string hello = agent_hello(env);
  ASSERT_EQ(hello.back(), '\n');
  EXPECT_EQ(hello.find('\n'), hello.size() - 1) << "one line whatever the values hold";
  EXPECT_EQ(parse_agent_message(hello.substr(0, hello.size() - 1)).env, env);
  const std::string signal = agent_signal_message(SIGUSR1);
  EXPECT_EQ(parse_agent_message(signal.substr(0, signal.size() - 1)).signal_number, SIGUSR1);
}

TEST(AgentMessages, AnythingElseIsRefused) {
  for (const char* line : {"", "garbage", "[]", "{}", "{\"signal\":0}", "{\"signal\":\"9\"}",
                           "{\"env\":{\"A B\":\"x\"}}", "{\"env\":{\"A\":1}}", "{\"env\":[]}"}) {
    EXPECT_THROW(parse_agent_message(line), UsageError) << line;
  }
}

TEST(AgentArguments, CarryTheHeadsDecisionsAndTheProgramAfterDashDash) {
  Options options;
  options.tag_output = true;
  LaunchPlan plan;
  plan.master_addr = "n1";
  plan.master_port = 29500;
  plan.run_id = "job";
  plan.restart_count = 1;
  plan.max_restarts = 3;
  plan.nodes = {{"n1", 0, 2, 0}, {"n2", 1, 3, 2}};
  plan.program = {"--weird", "a b"};
  const auto args = agent_arguments(options, plan, &plan.nodes[1]);
  const std::vector<std::string> expected = {"--agent",
                                             "--agent-nodes",
                                             "n1:2,n2:3",
                                             "--master-addr",
                                             "n1",
                                             "--master-port",
                                             "29500",
                                             "--run-id",
                                             "job",
                                             "--restart-count",
                                             "1",
                                             "--max-restarts",
                                             "3",
                                             "--shutdown-timeout",
                                             "15",
                                             "--node-rank",
                                             "1",
                                             "--agent-stdin",
                                             "--tag-output",
                                             "--",
                                             "--weird",
                                             "a b"};
  EXPECT_EQ(args, expected);
}

TEST(SshCommand, QuotesEveryWordOnceAndEndsOptionsBeforeTheHost) {
  Options options;
  options.ssh_config = "/tmp/cfg";
  const auto argv = ssh_command("-oProxyCommand=x", options, "/work dir", {"/bin/ddprun", "it's"});
  ASSERT_GE(argv.size(), 4u);
  EXPECT_EQ(argv[1], "-F");
  EXPECT_EQ(argv[2], "/tmp/cfg");
  EXPECT_EQ(argv[argv.size() - 3], "--");
  EXPECT_EQ(argv[argv.size() - 2], "-oProxyCommand=x");
  EXPECT_EQ(argv.back(), "cd -- '/work dir' && exec '/bin/ddprun' 'it'\\''s'");
}

TEST(SshCommand, RendezvousJoinTimeoutBoundsTheConnection) {
  Options options;
  const auto plain = ssh_command("n1", options, "/", {"x"});
  EXPECT_EQ(std::count_if(plain.begin(), plain.end(),
                          [](const std::string& w) { return w.rfind("ConnectTimeout", 0) == 0; }),
            0);
  options.rdzv_conf = parse_rendezvous_conf("join_timeout=12.5");
  const auto argv = ssh_command("n1", options, "/", {"x"});
  EXPECT_NE(std::find(argv.begin(), argv.end(), "ConnectTimeout=13"), argv.end());
}

TEST(AgentArguments, TorchrunOptionsReachEveryNode) {
  Options options;
  options.role = "trainer";
  options.redirects = parse_stream_choice("-r", "3");
  options.tee = parse_stream_choice("-t", "0:1");
  options.local_ranks_filter = std::set<int>{0};
  options.signals_to_handle = {SIGXCPU};
  options.exit_timeout_s = 30;
  options.gpus_per_proc = 2;
  options.virtual_local_rank = true;
  LaunchPlan plan;
  plan.nodes = {{"n1", 0, 2, 0}, {"n2", 1, 2, 2}};
  plan.program = {"python3", "-u", "train.py"};
  const auto args = agent_arguments(options, plan, nullptr);
  const auto after = [&](const std::string& flag) {
    const auto it = std::find(args.begin(), args.end(), flag);
    return it == args.end() || it + 1 == args.end() ? std::string("(missing)") : *(it + 1);
  };
  EXPECT_EQ(after("--role"), "trainer");
  EXPECT_EQ(after("--redirects"), "3");
  EXPECT_EQ(after("--tee"), "0:1");
  EXPECT_EQ(after("--local-ranks-filter"), "0");
  EXPECT_EQ(after("--signals-to-handle"), "SIGXCPU");
  EXPECT_EQ(after("--exit-timeout"), "30");
  EXPECT_EQ(after("--gpus-per-proc"), "2");
  EXPECT_NE(std::find(args.begin(), args.end(), "--virtual-local-rank"), args.end());
  EXPECT_EQ(std::vector<std::string>(args.end() - 4, args.end()),
            (std::vector<std::string>{"--", "python3", "-u", "train.py"}));
  options.check = true;
  options.check_paths = {"/ckpt", "/data"};
  const auto check = agent_arguments(options, plan, nullptr);
  const auto at = std::find(check.begin(), check.end(), "--check");
  ASSERT_NE(at, check.end());
  EXPECT_EQ(
      std::vector<std::string>(at, at + 5),
      (std::vector<std::string>{"--check", "--check-path", "/ckpt", "--check-path", "/data"}));
}

TEST(LauncherCommands, SrunAndMpirunStartOneAgentPerNode) {
  LaunchPlan plan;
  plan.nodes = {{"n1", 0, 2, 0}, {"n2", 1, 2, 2}};
  const auto srun = srun_command(plan, {"/bin/ddprun", "--agent"});
  EXPECT_EQ(srun.front(), "srun");
  EXPECT_NE(std::find(srun.begin(), srun.end(), "--ntasks-per-node=1"), srun.end());
  EXPECT_EQ(srun.back(), "--agent");
  const auto mpirun = mpirun_command(plan, {{"PATH", "/secret/bin"}}, {"/bin/ddprun"});
  const std::vector<std::string> expected = {"mpirun", "-np",   "2",  "-npernode", "1",
                                             "--host", "n1,n2", "-x", "PATH",      "/bin/ddprun"};
  EXPECT_EQ(mpirun, expected) << "names only: values stay out of the command line";
}

}  // namespace
}  // namespace ddprun

namespace ddprun {
namespace {

// Hostile words through a real /bin/sh, as ssh's remote shell would run them: each must
// come back as exactly one argument, unchanged, with nothing executed.
TEST(ShellQuote, HostileWordsSurviveARealShellUnchanged) {
  const std::vector<std::string> corpus = {"",
                                           "plain",
                                           "two words",
                                           "tab\there",
                                           "new\nline",
                                           "'",
                                           "\"",
                                           "it's \"quoted\"",
                                           "$(touch /tmp/ddprun-pwned)",
                                           "`touch /tmp/ddprun-pwned`",
                                           "; touch /tmp/ddprun-pwned",
                                           "a && b || c",
                                           "$HOME",
                                           "${PATH}",
                                           "*",
                                           "~",
                                           "back\\slash",
                                           "> /tmp/ddprun-pwned",
                                           "# comment",
                                           "-rf",
                                           "\xc3\xa9t\xc3\xa9 \xe2\x9c\x93",
                                           "'\\''",
                                           "!!",
                                           "a|b",
                                           "\x01\x7f",
                                           "(subshell)"};
  std::string command = "printf '%s\\0'";
  for (const auto& word : corpus) command += " " + shell_quote(word);
  FILE* pipe = ::popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char buffer[4096];
  std::size_t got = 0;
  while ((got = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) output.append(buffer, got);
  ASSERT_EQ(::pclose(pipe), 0);
  std::vector<std::string> words;
  std::size_t start = 0;
  for (std::size_t end; (end = output.find('\0', start)) != std::string::npos; start = end + 1) {
    words.push_back(output.substr(start, end - start));
  }
  EXPECT_EQ(words, corpus);
  EXPECT_NE(::access("/tmp/ddprun-pwned", F_OK), 0) << "something ran";
}

}  // namespace
}  // namespace ddprun
