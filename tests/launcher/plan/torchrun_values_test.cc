// torchrun's compound option values (torchrun_values.h) and how PROGRAM becomes the
// worker's command (program_command.h): pure functions, table-driven.
#include <gtest/gtest.h>
#include <signal.h>

#include <map>

#include "cli/program_command.h"
#include "ddprun/contract/errors.h"
#include "plan/torchrun_values.h"

namespace ddprun {
namespace {

TEST(TorchrunValues, StreamChoicesAreOneNumberOrPerLocalRank) {
  EXPECT_EQ(parse_stream_choice("-t", "3").for_local_rank(7), 3);
  const StreamChoice per_rank = parse_stream_choice("-r", "0:1, 2:3");
  EXPECT_EQ(per_rank.for_local_rank(0), 1);
  EXPECT_EQ(per_rank.for_local_rank(1), 0);  // not named: nothing
  EXPECT_EQ(per_rank.for_local_rank(2), 3);
  EXPECT_EQ(format_stream_choice(per_rank), "0:1,2:3");
  EXPECT_EQ(format_stream_choice(parse_stream_choice("-t", "2")), "2");
  for (const char* bad : {"", "4", "-1", "a", "0:", ":1", "0:1,", "0:4", "1 2"}) {
    EXPECT_THROW(parse_stream_choice("-r", bad), UsageError) << bad;
  }
}

TEST(TorchrunValues, NnodesIsFixedOrAnEqualRange) {
  EXPECT_EQ(parse_nnodes("4"), 4);
  EXPECT_EQ(parse_nnodes("2:2"), 2);
  for (const char* bad : {"0", "-1", "1:2", "2:1", "a", "1:", ":1", "1:1:1", ""}) {
    EXPECT_THROW(parse_nnodes(bad), UsageError) << bad;
  }
}

TEST(TorchrunValues, EndpointsTakeHostsPortsAndBracketedIpv6) {
  const std::map<std::string, std::pair<std::string, std::optional<int>>> good = {
      {"localhost:29400", {"localhost", 29400}}, {"head", {"head", std::nullopt}},
      {"localhost:0", {"localhost", 0}},         {"[::1]:5", {"::1", 5}},
      {"[fe80::1]", {"fe80::1", std::nullopt}},  {"10.0.0.1:1", {"10.0.0.1", 1}}};
  for (const auto& [text, expected] : good) {
    const Endpoint endpoint = parse_endpoint("--rdzv-endpoint", text);
    EXPECT_EQ(endpoint.host, expected.first) << text;
    EXPECT_EQ(endpoint.port, expected.second) << text;
  }
  for (const char* bad : {"", ":1", "h:", "h:x", "h:65536", "::1", "[::1", "[::1]x", "[]:1"}) {
    EXPECT_THROW(parse_endpoint("--rdzv-endpoint", bad), UsageError) << bad;
  }
}

TEST(TorchrunValues, RendezvousConfChecksTimeoutsAndKeepsTheJoinTimeout) {
  EXPECT_FALSE(parse_rendezvous_conf("").join_timeout_s);
  EXPECT_EQ(parse_rendezvous_conf("join_timeout=900").join_timeout_s, 900.0);
  EXPECT_EQ(parse_rendezvous_conf("timeout=60,is_host=0").join_timeout_s, 60.0);
  EXPECT_FALSE(parse_rendezvous_conf("read_timeout=30,store_type=file").join_timeout_s);
  for (const char* bad : {"x", "=1", "read_timeout=", "join_timeout=abc", "close_timeout=0",
                          "timeout=inf", "a=1,,b=2"}) {
    EXPECT_THROW(parse_rendezvous_conf(bad), UsageError) << bad;
  }
}

TEST(TorchrunValues, LocalRankFiltersAndSignalLists) {
  EXPECT_EQ(parse_local_ranks_filter("0"), (std::set<int>{0}));
  EXPECT_EQ(parse_local_ranks_filter("3,1,3"), (std::set<int>{1, 3}));
  EXPECT_EQ(format_rank_set({1, 3}), "1,3");
  for (const char* bad : {"", ",", "a", "-1", "1,,2"}) {
    EXPECT_THROW(parse_local_ranks_filter(bad), UsageError) << bad;
  }
  EXPECT_EQ(parse_signal_list("SIGTERM,USR1,SIGXCPU"),
            (std::vector<int>{SIGTERM, SIGUSR1, SIGXCPU}));
  EXPECT_EQ(format_signal_list({SIGTERM, SIGUSR2}), "SIGTERM,SIGUSR2");
  for (const char* bad : {"", "SIGKILL", "STOP", "SIGCHLD", "TERM,", "sigterm"}) {
    EXPECT_THROW(parse_signal_list(bad), UsageError) << bad;
  }
}

TEST(TorchrunValues, OnlyStaticAndC10dBackends) {
  EXPECT_NO_THROW(check_rendezvous_backend("static"));
  EXPECT_NO_THROW(check_rendezvous_backend("c10d"));
  for (const char* bad : {"etcd", "etcd-v2", "", "C10D", "zeus"}) {
    EXPECT_THROW(check_rendezvous_backend(bad), UsageError) << bad;
  }
}

struct CommandCase {
  const char* name;
  std::vector<std::string> program;
  bool module = false;
  bool no_python = false;
  bool run_path = false;
  std::vector<std::string> expected;
};

TEST(ProgramCommand, PythonIsPrependedAsTorchrunDoes) {
  // "script" is a file here that is not executable; "tool" is executable; "python3" and
  // "ddp-train" are no file here (found in PATH later).
  const ExecutableProbe probe = [](const std::string& path) -> std::optional<bool> {
    if (path == "script" || path == "train.py") return false;
    if (path == "./tool" || path == "run.py") return true;
    return std::nullopt;
  };
  const std::vector<CommandCase> cases = {
      {"ScriptEndingInPy",
       {"train.py", "--lr", "1"},
       false,
       false,
       false,
       {"python3", "-u", "train.py", "--lr", "1"}},
      {"ExecutablePyStillGoesThroughPython",
       {"run.py"},
       false,
       false,
       false,
       {"python3", "-u", "run.py"}},
      {"NotExecutableFile", {"script"}, false, false, false, {"python3", "-u", "script"}},
      {"ExecutableRunsAsIs", {"./tool", "x"}, false, false, false, {"./tool", "x"}},
      {"CommandInPath",
       {"ddp-train", "--config", "c.json"},
       false,
       false,
       false,
       {"ddp-train", "--config", "c.json"}},
      {"ExplicitPython", {"python3", "train.py"}, false, false, false, {"python3", "train.py"}},
      {"Module",
       {"pkg.train", "--x"},
       true,
       false,
       false,
       {"python3", "-u", "-m", "pkg.train", "--x"}},
      {"NoPython", {"train.py"}, false, true, false, {"train.py"}},
      {"RunPath", {"/abs/train.py"}, false, false, true, {"python3", "/abs/train.py"}},
      {"RunPathWinsOverNoPython", {"/abs/t"}, false, true, true, {"python3", "/abs/t"}},
  };
  for (const auto& c : cases) {
    Options options;
    options.program = c.program;
    options.module = c.module;
    options.no_python = c.no_python;
    options.run_path = c.run_path;
    EXPECT_EQ(worker_command(options, {}, probe), c.expected) << c.name;
  }
  Options options;
  options.program = {"train.py"};
  EXPECT_EQ(worker_command(options, {{"PYTHON_EXEC", "/opt/py/bin/python"}}, probe),
            (std::vector<std::string>{"/opt/py/bin/python", "-u", "train.py"}));
}

}  // namespace
}  // namespace ddprun
