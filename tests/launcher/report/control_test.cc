// The control requests' pure parts: where sockets live and how they are named, the status
// table, the head/agent messages, and the command line that asks.
#include "report/control.h"

#include <gtest/gtest.h>
#include <signal.h>

#include "cli/options.h"
#include "ddprun/contract/errors.h"
#include "nodes/agents.h"
#include "run/agent_messages.h"

namespace ddprun {
namespace {

CommandLine parse(std::vector<const char*> args) {
  args.insert(args.begin(), "ddprun");
  return parse_command_line(static_cast<int>(args.size()), args.data());
}

TEST(ControlRequests, VerbsRoundTripAndNothingElseIsOne) {
  for (const ControlVerb verb :
       {ControlVerb::kStatus, ControlVerb::kStacks, ControlVerb::kStop, ControlVerb::kAttach}) {
    EXPECT_EQ(parse_control_verb(std::string(control_verb_name(verb)) + "\n"), verb);
  }
  EXPECT_FALSE(parse_control_verb("status please"));
  EXPECT_FALSE(parse_control_verb(""));
  EXPECT_FALSE(parse_control_verb("STOP"));
}

TEST(ControlRequests, TheFolderIsTheUsersRuntimeFolderElseOneNamedByUid) {
  EXPECT_EQ(control_folder({{"XDG_RUNTIME_DIR", "/run/user/1000"}, {"TMPDIR", "/scratch"}}, 1000),
            "/run/user/1000/ddprun");
  // A scheduler's per-job TMPDIR would hide the job from the user's other shells.
  EXPECT_EQ(control_folder({{"TMPDIR", "/scratch/job7"}}, 1000), "/tmp/ddprun-1000");
  EXPECT_EQ(control_folder({{"XDG_RUNTIME_DIR", ""}}, 7), "/tmp/ddprun-7");
}

TEST(ControlRequests, AClientLooksWhereAShellWithAnotherRuntimeFolderWouldToo) {
  EXPECT_EQ(control_folders_to_search({{"XDG_RUNTIME_DIR", "/run/user/1000"}}, 1000),
            (std::vector<std::string>{"/run/user/1000/ddprun", "/tmp/ddprun-1000"}));
  EXPECT_EQ(control_folders_to_search({{"XDG_RUNTIME_DIR", "/x"}}, 5),
            (std::vector<std::string>{"/x/ddprun", "/run/user/5/ddprun", "/tmp/ddprun-5"}));
  EXPECT_EQ(control_folders_to_search({}, 5),
            (std::vector<std::string>{"/tmp/ddprun-5", "/run/user/5/ddprun"}));
}

TEST(ControlRequests, SocketNamesAreSafeShortAndPerNode) {
  EXPECT_EQ(control_socket_name("12345", 0), "12345.sock");
  EXPECT_EQ(control_socket_name("12345", 3), "12345.node3.sock");
  EXPECT_EQ(control_socket_name("../etc/x y", 0), "_.._etc_x_y.sock");
  EXPECT_EQ(control_socket_name("", 0), "_.sock");
  EXPECT_EQ(control_socket_name(std::string(200, 'a'), 0), std::string(64, 'a') + ".sock");
}

TEST(ControlRequests, RankStatesSayHowARankEndedOrThatItIsStopped) {
  EXPECT_EQ(rank_state(false, 0, 'S'), "running");
  EXPECT_EQ(rank_state(false, 0, 'T'), "stopped");
  EXPECT_EQ(rank_state(true, 3 << 8, '?'), "exited 3");
  EXPECT_EQ(rank_state(true, SIGKILL, '?'), "killed by SIGKILL");
}

JobStatus two_ranks() {
  JobStatus status;
  status.run_id = "r1";
  status.pid = 42;
  status.restarts = 1;
  status.max_restarts = 3;
  status.up_seconds = 3725;
  status.ranks = {{0, 0, "node-a", 100, "running", 17, "epoch 1 step 17", {}, {}},
                  {1, 1, "node-b", 200, "stopped", std::nullopt, std::string(100, 'x'), {}, {}}};
  status.notes = {"1 of 2 other nodes did not answer in time"};
  return status;
}

TEST(ControlRequests, StatusShowsEveryRankWithItsHostStateStepAndLastLine) {
  const std::string text = format_status(two_ranks());
  EXPECT_NE(text.find("ddprun: run r1 (ddprun pid 42, up 1:02:05), restarts 1 of 3\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("0     node-a  100      running             17       epoch 1 step 17\n"),
            std::string::npos)
      << text;
  // A long line is cut; a rank with no progress shows "-".
  EXPECT_NE(text.find("1     node-b  200      stopped             -        " +
                      std::string(57, 'x') + "...\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("ddprun: 1 of 2 other nodes did not answer in time\n"), std::string::npos);
}

TEST(ControlRequests, StacksAnswerGroupsRanksAndKeepsEachWholeStack) {
  JobStatus status = two_ranks();
  status.ranks[0].stacks =
      StackCapture{"", "Current thread 0x1:\n  File \"t.py\", line 3 in f\n", ""};
  status.ranks[1].stacks =
      StackCapture{"", "Current thread 0x2:\n  File \"t.py\", line 3 in f\n", ""};
  const std::string text = format_stacks_answer(status);
  EXPECT_NE(text.find("ranks 0-1: in f (t.py:3)"), std::string::npos) << text;
  EXPECT_NE(text.find("--- rank 1 (node-b, pid 200) ---\nPython (faulthandler):\n"),
            std::string::npos)
      << text;
  status.ranks[0].stacks.reset();
  status.ranks[1].stacks.reset();
  EXPECT_NE(format_stacks_answer(status).find("no rank of run r1 is running"), std::string::npos);
}

TEST(ControlRequests, AnAgentsAnswerCarriesItsRanksStacksAndTraceToTheHead) {
  std::vector<RankStatus> ranks = two_ranks().ranks;
  ranks[0].stacks = StackCapture{"TID 1:\n#0 0x1 f - /bin/x\n", "", "no Python frames"};
  TraceSnapshot trace{};
  trace.file.planes[1].entries[0].bytes = 4096;
  trace.read_ns = 123456789;
  ranks[1].trace = trace;
  ranks[1].last_line = "bad \xff byte";
  const std::string line = agent_answer_line(7, ranks);
  ASSERT_EQ(line.rfind(kAgentAnswerMarker, 0), 0u);
  ASSERT_EQ(line.find('\n'), line.size() - 1) << "one line";
  const auto answer = parse_agent_answer(line.substr(0, line.size() - 1));
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->id, 7);
  ASSERT_EQ(answer->ranks.size(), 2u);
  EXPECT_EQ(answer->ranks[0].host, "node-a");
  EXPECT_EQ(answer->ranks[0].step, 17);
  ASSERT_TRUE(answer->ranks[0].stacks);
  EXPECT_EQ(answer->ranks[0].stacks->problem, "no Python frames");
  EXPECT_FALSE(answer->ranks[1].step);
  ASSERT_TRUE(answer->ranks[1].trace);
  EXPECT_EQ(answer->ranks[1].trace->file.planes[1].entries[0].bytes, 4096u);
  EXPECT_EQ(answer->ranks[1].trace->read_ns, 123456789);
  EXPECT_EQ(answer->ranks[1].state, "stopped");
}

TEST(ControlRequests, LinesThatAreNotAnswersAreNotTakenForOnes) {
  EXPECT_FALSE(parse_agent_answer("rank 0 step 3"));
  EXPECT_FALSE(parse_agent_answer(std::string(kAgentAnswerMarker) + "{not json"));
  EXPECT_FALSE(parse_agent_answer(std::string(kAgentAnswerMarker) + "{\"id\":1}"));
  EXPECT_FALSE(
      parse_agent_answer(std::string(kAgentAnswerMarker) + "{\"id\":1,\"ranks\":[{\"rank\":0}]}"));
}

TEST(ControlRequests, TheHeadsRequestIsAnAgentMessage) {
  const std::string message = agent_control_message(ControlVerb::kStacks, 12);
  const AgentMessage parsed = parse_agent_message(message.substr(0, message.size() - 1));
  ASSERT_TRUE(parsed.control);
  EXPECT_EQ(*parsed.control, ControlVerb::kStacks);
  EXPECT_EQ(parsed.control_id, 12);
  EXPECT_EQ(parsed.signal_number, 0);
  EXPECT_THROW(parse_agent_message("{\"control\":\"reboot\",\"id\":1}"), UsageError);
  EXPECT_THROW(parse_agent_message("{\"control\":\"status\"}"), UsageError);
}

TEST(ControlRequests, TheCommandLineAsksTheLatestRunOrANamedOneAndTakesNoProgram) {
  auto latest = parse({"--status"});
  ASSERT_TRUE(latest.options) << latest.message;
  EXPECT_EQ(latest.options->mode, Mode::kControl);
  EXPECT_EQ(latest.options->control, ControlVerb::kStatus);
  EXPECT_EQ(latest.options->control_run, "");
  auto named = parse({"--stop", "job-7"});
  ASSERT_TRUE(named.options) << named.message;
  EXPECT_EQ(named.options->control, ControlVerb::kStop);
  EXPECT_EQ(named.options->control_run, "job-7");
  const auto both = parse({"--status", "--stacks"});
  EXPECT_FALSE(both.options);
  EXPECT_NE(both.message.find("exclude each other"), std::string::npos) << both.message;
  EXPECT_FALSE(parse({"--attach", "job-7", "python3", "train.py"}).options);
  const auto program = parse({"--attach", "job-7", "--", "python3", "train.py"});
  EXPECT_FALSE(program.options);
  EXPECT_NE(program.message.find("take a run id, not a program"), std::string::npos)
      << program.message;
}

}  // namespace
}  // namespace ddprun
