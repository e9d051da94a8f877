#include "nodes/agents.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <iostream>

#include "ddprun/contract/errors.h"
#include "job/agent_options.h"
#include "job/job_inputs.h"
#include "plan/shell_quote.h"
#include "run/agent_messages.h"

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

// A node lost below an agent goes up as one event naming how many nodes went with it (the
// nodes below it in the ssh tree); an event without the count is of one node; a count out
// of range is no event.
TEST(AgentMessages, ALostNodeGoesUpWithTheNodesLostWithIt) {
  NodeEvent lost;
  lost.kind = NodeEvent::Kind::kLost;
  lost.node = 2;
  lost.nodes = 3;
  lost.code = 255;
  lost.what = "node 2 (node3) was lost (its ddprun ended: exit code 255)";
  const std::string line = node_event_line(lost);
  const auto read = parse_node_event_line("[n2] " + line.substr(0, line.size() - 1));
  ASSERT_TRUE(read.has_value());
  EXPECT_EQ(read->kind, NodeEvent::Kind::kLost);
  EXPECT_EQ(read->node, 2);
  EXPECT_EQ(read->nodes, 3);
  EXPECT_EQ(read->what, lost.what);
  std::string without = line;
  without.erase(without.find("\"nodes\":3,"), std::string("\"nodes\":3,").size());
  ASSERT_NE(without, line);
  const auto one = parse_node_event_line(without);
  ASSERT_TRUE(one.has_value());
  EXPECT_EQ(one->nodes, 1);
  std::string none = line;
  none.replace(none.find("\"nodes\":3"), std::string("\"nodes\":3").size(), "\"nodes\":0");
  EXPECT_FALSE(parse_node_event_line(none).has_value());
}

// --restart-scope rank over several nodes: a node's part goes up with its answers, the
// whole comes down as one line; each side reads back what the other wrote.
TEST(AgentMessages, MembershipGoesUpInPartsAndComesDownWhole) {
  Membership part;
  part.version = 4;
  part.recoveries = 1;
  part.ranks = {{2, Membership::State::kRunning, 41}, {3, Membership::State::kReplaced, 77}};
  const std::string up = membership_report_line({5, part});
  EXPECT_EQ(up.find('\n'), up.size() - 1) << "one line";
  const auto read = parse_membership_report_line("[n2] " + up.substr(0, up.size() - 1));
  ASSERT_TRUE(read.has_value());
  EXPECT_EQ(read->node, 5);
  EXPECT_EQ(read->part.recoveries, 1);
  ASSERT_EQ(read->part.ranks.size(), 2U);
  EXPECT_EQ(read->part.ranks[1].pid, 77);
  EXPECT_EQ(read->part.ranks[1].state, Membership::State::kReplaced);
  // Not a node event, and a node event is no membership; no node, no report.
  EXPECT_FALSE(parse_node_event_line(up).has_value());
  EXPECT_FALSE(parse_membership_report_line(node_event_line(NodeEvent{})).has_value());
  EXPECT_FALSE(parse_membership_report_line(format_membership(part)).has_value()) << "no marker";
  std::string nodeless = up;
  nodeless.replace(nodeless.find("\"node\":5,"), 9, "");
  EXPECT_FALSE(parse_membership_report_line(nodeless).has_value()) << nodeless;

  Membership whole = part;
  whole.ranks.insert(whole.ranks.begin(),
                     {{0, Membership::State::kDone, 5}, {1, Membership::State::kLost, 6}});
  const std::string down = agent_membership_message(whole);
  EXPECT_EQ(down.find('\n'), down.size() - 1) << "one line";
  const auto message = parse_agent_message(down.substr(0, down.size() - 1));
  ASSERT_TRUE(message.membership.has_value());
  // Every rank comes back; one still in its first process without its pid (its node has it).
  Membership expected = whole;
  expected.ranks[2].pid = -1;
  EXPECT_EQ(format_membership(*message.membership), format_membership(expected));
  EXPECT_EQ(message.signal_number, 0);
  // 8,000 ranks that all run their first process: a line of a few words, not 440 KB.
  Membership many;
  many.version = 1;
  for (int rank = 0; rank < 8000; ++rank)
    many.ranks.push_back({rank, Membership::State::kRunning, 100000 + rank});
  const std::string few = agent_membership_message(many);
  EXPECT_LT(few.size(), 100U) << few;
  const auto read_many = parse_agent_message(few.substr(0, few.size() - 1)).membership;
  ASSERT_TRUE(read_many.has_value());
  EXPECT_EQ(read_many->ranks.size(), 8000U);
  EXPECT_EQ(read_many->ranks[7999].rank, 7999);
  // A rank past the world, a world of none: refused.
  for (
      const char* line :
      {R"({"membership":{"world": 2, "version": 1, "recoveries": 0, "ranks": [{"rank": 2, "state": "done", "pid": 5}]}})",
       R"({"membership":{"world": 0, "version": 1, "recoveries": 0, "ranks": []}})",
       R"({"membership":{"version": 1, "recoveries": 0, "ranks": []}})"}) {
    EXPECT_THROW(parse_agent_message(line), UsageError) << line;
  }
}

TEST(AgentArguments, EachNodeReplacesItsOwnRanksUnderRankScope) {
  Options options;
  LaunchPlan plan;
  plan.nodes = {{"n1", 0, 2, 0}, {"n2", 1, 2, 2}};
  plan.program = {"w"};
  const auto has = [](const std::vector<std::string>& args, const std::string& word) {
    return std::find(args.begin(), args.end(), word) != args.end();
  };
  EXPECT_FALSE(has(agent_arguments(agent_options(options), plan, nullptr), "--restart-scope"));
  options.restart_scope = RestartScope::kRank;
  options.warm_spare = true;
  const auto args = agent_arguments(agent_options(options), plan, nullptr);
  const auto at = std::find(args.begin(), args.end(), "--restart-scope");
  ASSERT_NE(at, args.end());
  EXPECT_EQ(*(at + 1), "rank");
  EXPECT_TRUE(has(args, "--warm-spare"));
}

TEST(AgentMessages, AnythingElseIsRefused) {
  for (const char* line : {"", "garbage", "[]", "{}", "{\"signal\":0}", "{\"signal\":\"9\"}",
                           "{\"membership\":{}}", "{\"membership\":\"x\"}",
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
  const auto args = agent_arguments(agent_options(options), plan, &plan.nodes[1]);
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
                                             "--head-beats",
                                             "--tag-output",
                                             "--",
                                             "--weird",
                                             "a b"};
  EXPECT_EQ(args, expected);
}

TEST(AgentArguments, EveryNodeFoldsAsTheHeadDecidedAndCopiesWhatTheFiltersMatch) {
  Options options;
  LaunchPlan plan;
  plan.nodes = {{"n1", 0, 2, 0}, {"n2", 1, 3, 2}};
  const auto has = [](const std::vector<std::string>& args, std::vector<std::string> words) {
    return std::search(args.begin(), args.end(), words.begin(), words.end()) != args.end();
  };
  options.fold_output = true;
  options.fold_window_ms = 300;
  options.duplicate_stdout_filters = {"warning", "NaN"};
  options.duplicate_stderr_filters = {"Traceback"};
  auto args = agent_arguments(agent_options(options), plan, &plan.nodes[1]);
  EXPECT_TRUE(has(args, {"--fold-output", "--fold-window", "300"}));
  EXPECT_TRUE(has(args, {"--duplicate-stdout-filters", "warning,NaN"}));
  EXPECT_TRUE(has(args, {"--duplicate-stderr-filters", "Traceback"}));
  // Off at the head (a pipe, few ranks): off on every node, whatever its own console.
  options.fold_output = false;
  args = agent_arguments(agent_options(options), plan, &plan.nodes[1]);
  EXPECT_TRUE(has(args, {"--no-fold-output"}));
  EXPECT_FALSE(has(args, {"--fold-window"}));
}

TEST(SshCommand, QuotesEveryWordOnceAndEndsOptionsBeforeTheHost) {
  Options options;
  options.ssh_config = "/tmp/cfg";
  const auto argv =
      ssh_command("-oProxyCommand=x", agent_options(options), "/work dir", {"/bin/ddprun", "it's"});
  ASSERT_GE(argv.size(), 4u);
  EXPECT_EQ(argv[1], "-F");
  EXPECT_EQ(argv[2], "/tmp/cfg");
  EXPECT_EQ(argv[argv.size() - 3], "--");
  EXPECT_EQ(argv[argv.size() - 2], "-oProxyCommand=x");
  EXPECT_EQ(argv.back(), "cd -- '/work dir' && exec '/bin/ddprun' 'it'\\''s'");
}

TEST(SshCommand, RendezvousJoinTimeoutBoundsTheConnection) {
  Options options;
  const auto plain = ssh_command("n1", agent_options(options), "/", {"x"});
  EXPECT_EQ(std::count_if(plain.begin(), plain.end(),
                          [](const std::string& w) { return w.rfind("ConnectTimeout", 0) == 0; }),
            0);
  options.rdzv_conf = parse_rendezvous_conf("join_timeout=12.5");
  const auto argv = ssh_command("n1", agent_options(options), "/", {"x"});
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
  const auto args = agent_arguments(agent_options(options), plan, nullptr);
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
  options.mode = Mode::kCheck;
  options.check_paths = {"/ckpt", "/data"};
  const auto check = agent_arguments(agent_options(options), plan, nullptr);
  const auto at = std::find(check.begin(), check.end(), "--check");
  ASSERT_NE(at, check.end());
  EXPECT_EQ(
      std::vector<std::string>(at, at + 5),
      (std::vector<std::string>{"--check", "--check-path", "/ckpt", "--check-path", "/data"}));
}

// The ssh tree: at most `fanout` children per node, consecutive ranges of near-equal size,
// every node reached exactly once.
TEST(SshTree, ChildrenTakeConsecutiveRangesOfNearlyEqualSize) {
  using Ranges = std::vector<std::pair<int, int>>;
  EXPECT_EQ(subtree_children(0, 6, 2), (Ranges{{1, 3}, {4, 6}}));
  EXPECT_EQ(subtree_children(1, 3, 2), (Ranges{{2, 2}, {3, 3}}));
  EXPECT_EQ(subtree_children(0, 3, 32), (Ranges{{1, 1}, {2, 2}, {3, 3}}));  // flat
  EXPECT_EQ(subtree_children(0, 10, 3), (Ranges{{1, 4}, {5, 7}, {8, 10}}));
  EXPECT_EQ(subtree_children(5, 5, 2), Ranges{});
  for (const int nodes : {2, 33, 1000, 16384}) {
    std::vector<int> reached(static_cast<std::size_t>(nodes), 0);
    std::vector<std::pair<int, int>> todo = {{0, nodes - 1}};
    reached[0] = 1;
    while (!todo.empty()) {
      const auto [first, last] = todo.back();
      todo.pop_back();
      const auto children = subtree_children(first, last, 32);
      EXPECT_LE(children.size(), 32u);
      for (const auto& child : children) {
        ++reached[static_cast<std::size_t>(child.first)];
        todo.push_back(child);
      }
    }
    EXPECT_EQ(std::count(reached.begin(), reached.end(), 1), nodes) << nodes << " nodes";
  }
}

// When the last node of the tree has started, if each node starts its children one after
// the other and each start costs `per_ssh` seconds of that node's time (the ssh client's
// handshake: about 0.1 s on these 2-core machines).
double tree_start_seconds(int nodes, int fanout, double per_ssh) {
  double latest = 0;
  std::vector<std::pair<std::pair<int, int>, double>> todo = {{{0, nodes - 1}, 0.0}};
  while (!todo.empty()) {
    const auto [range, started] = todo.back();
    todo.pop_back();
    latest = std::max(latest, started);
    double t = started;
    for (const auto& child : subtree_children(range.first, range.second, fanout)) {
      t += per_ssh;
      todo.push_back({child, t});
    }
  }
  return latest;
}

// Simulated to 16,384 nodes: flat, the start time grows with the node count; as a tree it
// grows with the depth (3 levels of at most 32 for 16,384 nodes).
TEST(SshTree, StartTimeGrowsWithTheDepthNotTheNodeCount) {
  const double flat = tree_start_seconds(16384, 16384, 0.1);
  EXPECT_NEAR(flat, 1638.3, 0.01);
  const double tree_1k = tree_start_seconds(1024, 32, 0.1);
  const double tree_16k = tree_start_seconds(16384, 32, 0.1);
  EXPECT_LE(tree_16k, 3 * 32 * 0.1 + 1e-9);
  EXPECT_LT(tree_16k, 2 * tree_1k);  // 16 times the nodes, one more level
  EXPECT_LT(tree_16k * 100, flat);
  std::cout << "simulated start of the last agent, 0.1 s per ssh: flat 16,384 nodes " << flat
            << " s; tree of 32: 1,024 nodes " << tree_1k << " s, 16,384 nodes " << tree_16k
            << " s\n";
}

// An agent inside the tree is told its range, the fan-out and what the head uses to reach
// nodes; --env values stay off the command line (names only: values come in the hello).
TEST(SshTree, AnInnerAgentIsToldItsRangeAndHowToReachIt) {
  Options options;
  options.ssh_fanout = 2;
  options.ssh_config = "/etc/ddp_ssh";
  options.env_vars = {"SECRET=s3cret", "DDPC_MARK"};
  LaunchPlan plan;
  plan.master_addr = "n1";
  plan.master_port = 29500;
  plan.run_id = "job";
  for (int i = 0; i < 7; ++i) plan.nodes.push_back({"n" + std::to_string(i + 1), i, 1, i});
  plan.program = {"w"};
  const auto args = agent_arguments(agent_options(options), plan, &plan.nodes[1], 3);
  const auto after = [&](const std::string& flag) {
    const auto at = std::find(args.begin(), args.end(), flag);
    return at == args.end() || at + 1 == args.end() ? std::string("(none)") : *(at + 1);
  };
  EXPECT_EQ(after("--agent-subtree"), "3");
  EXPECT_EQ(after("--ssh-fanout"), "2");
  EXPECT_EQ(after("--ssh-config"), "/etc/ddp_ssh");
  EXPECT_EQ(std::count(args.begin(), args.end(), "SECRET"), 1);
  EXPECT_EQ(std::count(args.begin(), args.end(), "DDPC_MARK"), 1);
  for (const auto& arg : args) EXPECT_EQ(arg.find("s3cret"), std::string::npos) << arg;
  // A leaf is told nothing of the tree.
  const auto leaf = agent_arguments(agent_options(options), plan, &plan.nodes[2], 2);
  EXPECT_EQ(std::find(leaf.begin(), leaf.end(), "--agent-subtree"), leaf.end());
}

TEST(LauncherCommands, SrunAndMpirunStartOneAgentPerNode) {
  LaunchPlan plan;
  plan.nodes = {{"n1", 0, 2, 0}, {"n2", 1, 2, 2}};
  const auto srun = srun_command(plan, {"/bin/ddprun", "--agent"});
  EXPECT_EQ(srun.front(), "srun");
  EXPECT_NE(std::find(srun.begin(), srun.end(), "--ntasks-per-node=1"), srun.end());
  EXPECT_EQ(srun.back(), "--agent");
  // Signals reach the agents as messages on stdin, which srun gives every task.
  EXPECT_NE(std::find(srun.begin(), srun.end(), "--input=all"), srun.end());
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
