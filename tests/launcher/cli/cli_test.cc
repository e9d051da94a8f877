#include <gtest/gtest.h>

#include <signal.h>
#include <map>
#include <set>
#include <sstream>
#include <string_view>

#include "cli/options.h"
#include "ddprun/contract/errors.h"
#include "ddprun/contract/version.h"

namespace ddprun {
namespace {

CommandLine parse(std::vector<const char*> args, const Environment& env = {}) {
  args.insert(args.begin(), "ddprun");
  return parse_command_line(static_cast<int>(args.size()), args.data(), env);
}

TEST(CommandLine, DefaultsAreTorchrunsForOneNode) {
  const auto result = parse({"./worker"});
  ASSERT_TRUE(result.options) << result.message;
  EXPECT_EQ(result.options->nproc_per_node, "1");
  EXPECT_FALSE(result.options->master_port);
  EXPECT_EQ(result.options->max_restarts, 0);
  EXPECT_EQ(result.options->program, std::vector<std::string>{"./worker"});
}

TEST(CommandLine, ProgramArgumentsAreNotParsedAsOurs) {
  const auto result =
      parse({"--nproc-per-node", "4", "python3", "train.py", "--nproc-per-node", "9", "--help"});
  ASSERT_TRUE(result.options) << result.message;
  EXPECT_EQ(result.options->nproc_per_node, "4");
  EXPECT_EQ(result.options->program,
            (std::vector<std::string>{"python3", "train.py", "--nproc-per-node", "9", "--help"}));
}

TEST(CommandLine, DoubleDashSeparatesAProgramThatLooksLikeAnOption) {
  const auto result = parse({"--tag-output", "--", "-weird-name", "x"});
  ASSERT_TRUE(result.options) << result.message;
  EXPECT_TRUE(result.options->tag_output);
  EXPECT_EQ(result.options->program, (std::vector<std::string>{"-weird-name", "x"}));
}

TEST(CommandLine, TorchrunSpellingsAreAccepted) {
  const auto result = parse({"--nproc_per_node=gpu", "--master_port", "29500", "--max_restarts",
                             "3", "--standalone", "--rdzv_id", "job1", "w"});
  ASSERT_TRUE(result.options) << result.message;
  EXPECT_EQ(result.options->nproc_per_node, "gpu");
  EXPECT_EQ(result.options->master_port, 29500);
  EXPECT_EQ(result.options->max_restarts, 3);
  // torchrun replaces --rdzv-id with a fresh id under --standalone; ddprun does too.
  EXPECT_FALSE(result.options->run_id);
  const auto kept = parse({"--rdzv_id", "job1", "w"});
  ASSERT_TRUE(kept.options) << kept.message;
  EXPECT_EQ(kept.options->run_id, "job1");
  // ddprun's own --run-id is what the user asked for, standalone or not.
  const auto own = parse({"--standalone", "--run-id", "job2", "--rdzv-id", "x", "w"});
  ASSERT_TRUE(own.options) << own.message;
  EXPECT_EQ(own.options->run_id, "job2");
  EXPECT_FALSE(parse({"--rdzv-id", "bad/id", "w"}).options);
}

// --restart-on is parsed once, here, into the rule the policy uses.
TEST(CommandLine, RestartOnBecomesATypedRule) {
  const auto result = parse({"--restart-on", "signals,3", "--restart-repeated", "w"});
  ASSERT_TRUE(result.options) << result.message;
  const RestartRule& rule = result.options->restart_on;
  EXPECT_FALSE(rule.any);
  EXPECT_TRUE(rule.signals);
  EXPECT_EQ(rule.exit_codes, std::set<int>{3});
  EXPECT_TRUE(rule.allow_repeats);
  const auto defaults = parse({"w"});
  ASSERT_TRUE(defaults.options) << defaults.message;
  EXPECT_TRUE(defaults.options->restart_on.any);
  EXPECT_FALSE(defaults.options->restart_on.allow_repeats);
  EXPECT_FALSE(parse({"--restart-on", "signals,0", "w"}).options);
}

TEST(CommandLine, RestartScopeIsJobByDefaultOrRankOnAnyNumberOfNodes) {
  const auto defaults = parse({"w"});
  ASSERT_TRUE(defaults.options) << defaults.message;
  EXPECT_EQ(defaults.options->restart_scope, RestartScope::kJob);
  const auto rank = parse({"--restart-scope", "rank", "--max-restarts", "2", "w"});
  ASSERT_TRUE(rank.options) << rank.message;
  EXPECT_EQ(rank.options->restart_scope, RestartScope::kRank);
  EXPECT_TRUE(parse({"--restart-scope", "rank", "--nnodes", "1", "w"}).options);
  const auto nodes = parse({"--restart-scope", "rank", "--nnodes", "2", "w"});
  ASSERT_TRUE(nodes.options) << nodes.message;
  EXPECT_EQ(nodes.options->restart_scope, RestartScope::kRank);
  const auto other = parse({"--restart-scope", "node", "w"});
  EXPECT_FALSE(other.options);
  EXPECT_NE(other.message.find("expected one of job, rank; got 'node'"), std::string::npos)
      << other.message;
}

TEST(CommandLine, LogDirWithTeeAndFormat) {
  const auto result =
      parse({"--log-dir", "/tmp/l", "--tee", "2", "--dry-run", "--format", "json", "w"});
  ASSERT_TRUE(result.options) << result.message;
  EXPECT_EQ(result.options->log_dir, "/tmp/l");
  EXPECT_EQ(result.options->tee.all, 2);
  EXPECT_EQ(result.options->mode, Mode::kDryRun);
  EXPECT_EQ(result.options->format, PlanFormat::kJson);
}

TEST(CommandLine, ReportNamesAFileOnlyForAJobThatRuns) {
  const auto result = parse({"--report", "out/r.json", "w"});
  ASSERT_TRUE(result.options) << result.message;
  EXPECT_EQ(result.options->report, "out/r.json");
  EXPECT_FALSE(parse({"w"}).options->report);
  for (const char* mode : {"--dry-run", "--check", "--doctor", "--print-job-end", "--status"}) {
    const bool program = std::string_view(mode) != "--status";  // it takes a run id
    const auto refused = parse(program ? std::vector<const char*>{mode, "--report", "r.json", "w"}
                                       : std::vector<const char*>{mode, "--report", "r.json"});
    EXPECT_FALSE(refused.options) << mode;
    EXPECT_EQ(refused.exit_code, kExitLauncherError) << mode;
    EXPECT_NE(refused.message.find("--report writes the report of a job that runs"),
              std::string::npos)
        << mode << ": " << refused.message;
  }
}

TEST(CommandLine, HelpAndVersionExitZeroWithText) {
  const auto help = parse({"--help"});
  EXPECT_FALSE(help.options);
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.message.find("Examples:"), std::string::npos);
  const auto version = parse({"--version"});
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_EQ(version.message, std::string("ddprun ") + kVersion + "\n");
}

std::vector<std::string> help_lines() {
  const auto help = parse({"--help"});
  std::vector<std::string> lines;
  std::istringstream in(help.message);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The names an option line of --help starts with: "  -r, --redirects 0|1|2|3|LR:N,...".
std::vector<std::string> names_of_entry(const std::string& line) {
  std::vector<std::string> names;
  if (line.rfind("  -", 0) != 0) return names;
  std::istringstream words(line.substr(0, line.find("   ")));
  for (std::string word; words >> word;) {
    if (word.front() != '-') break;
    if (word.back() == ',') word.pop_back();
    names.push_back(word);
  }
  return names;
}

TEST(CommandLine, HelpIsInSectionsWithoutLibraryNoise) {
  const auto lines = help_lines();
  int headings = 0;
  int usage = 0;
  std::string previous = "-";
  for (const auto& line : lines) {
    SCOPED_TRACE(line);
    EXPECT_LE(line.size(), 100u);
    EXPECT_EQ(line.find("{false}"), std::string::npos);
    EXPECT_EQ(line.find("ENUM:"), std::string::npos);
    EXPECT_EQ(line.find("->"), std::string::npos);
    // CLI11's type names, alone or before a check's description (TEXT:N|auto|cpu|gpu).
    std::istringstream words(line);
    for (std::string word; words >> word;) {
      for (const std::string type : {"TEXT", "INT", "UINT", "FLOAT", "BOOLEAN"}) {
        EXPECT_FALSE(word == type || word.rfind(type + ":", 0) == 0) << word;
      }
    }
    if (line.rfind("Usage:", 0) == 0 || line.find(" Usage:") != std::string::npos) ++usage;
    // A section's heading: a line of its own after an empty one, ending in ':'.
    if (previous.empty() && !line.empty() && line.front() != ' ' && line.back() == ':' &&
        line != "Examples:" && line != "Help:") {
      ++headings;
    }
    previous = line;
  }
  EXPECT_GE(headings, 6);
  EXPECT_EQ(usage, 1);
}

TEST(CommandLine, HelpListsEveryOptionOnce) {
  std::map<std::string, int> shown;
  for (const auto& line : help_lines()) {
    for (const auto& name : names_of_entry(line)) ++shown[name];
  }
  const auto options = help_options();
  EXPECT_GE(options.size(), 60u);
  for (const auto& names : options) {
    for (const auto& name : names) EXPECT_EQ(shown[name], 1) << name;
  }
  for (const auto& [name, count] : shown) EXPECT_EQ(count, 1) << name;
  // torchrun's spellings are listed once in their section, not beside every option.
  const std::string help = parse({"--help"}).message;
  for (const char* spelling : {"--nproc_per_node", "--node_rank", "--no_stacks", "--dry_run"}) {
    EXPECT_NE(help.find(spelling), std::string::npos) << spelling;
  }
  // Hidden: the head's options for its agents, and the unsupported --logs-specs.
  for (const char* hidden : {"--agent", "--restart-count", "--logs-specs"}) {
    EXPECT_EQ(shown.count(hidden), 0u) << hidden;
  }
}

// A value outside a fixed list is named with the list, plainly (CLI11 wrote "ftp not in
// {auto,ssh,...}" and "{json->1,text->0} OR {1,0}").
TEST(CommandLine, AChoiceOutsideItsListNamesTheListPlainly) {
  for (const auto& [args, expected] : std::vector<std::pair<std::vector<const char*>, std::string>>{
           {{"--format", "xml", "w"}, "--format: expected text or json; got 'xml'"},
           {{"--launcher", "ftp", "w"},
            "--launcher: expected one of auto, ssh, mpirun, srun, local; got 'ftp'"},
           {{"--start-method", "thread", "w"},
            "--start-method: expected one of spawn, fork, forkserver; got 'thread'"}}) {
    const auto result = parse(args);
    EXPECT_FALSE(result.options);
    EXPECT_NE(result.message.find(expected), std::string::npos) << result.message;
    EXPECT_EQ(result.message.find('{'), std::string::npos) << result.message;
  }
  const auto json = parse({"--format", "json", "w"});
  ASSERT_TRUE(json.options) << json.message;
  EXPECT_EQ(json.options->format, PlanFormat::kJson);
}

TEST(CommandLine, BadValuesAreOneLineErrors) {
  for (const auto& args : std::vector<std::vector<const char*>>{
           {"--nproc-per-node", "-3", "w"},
           {"--master-port", "0", "w"},
           {"--master-port", "65536", "w"},
           {"--shutdown-timeout", "nan", "w"},
           {"--tee", "4", "--log-dir", "d", "w"},
           {"--nnodes", "1:4", "w"},
           {"--nnodes", "0", "w"},
           {"--nnodes=2:1", "w"},
           {"--rdzv-backend", "etcd-v2", "w"},
           {"--rdzv_backend=zookeeper", "w"},
           {"--rdzv-endpoint", ":29400", "w"},
           {"--rdzv-endpoint", "h:99999", "w"},
           {"--rdzv-endpoint", "::1:5", "w"},
           {"--rdzv-conf", "join_timeout", "w"},
           {"--rdzv-conf", "read_timeout=-1", "w"},
           {"--rdzv-endpoint", "a:1", "--master-addr", "b", "w"},
           {"--rdzv-endpoint", "a:1", "--master-port", "2", "w"},
           {"--standalone", "--nnodes", "2", "w"},
           {"-r", "5", "w"},
           {"-t", "0:1,x:2", "w"},
           {"--local-ranks-filter", "0,,1", "w"},
           {"--local-ranks-filter=", "w"},
           {"--signals-to-handle", "SIGKILL", "w"},
           {"--start-method", "thread", "w"},
           {"--monitor-interval", "-1", "w"},
           {"--exit-timeout", "soon", "w"},
           {"--event-log-handler", "console", "w"},
           {"--logs-specs", "mine", "w"},
           {"--numa-binding", "nodes", "w"},
           {"--cpu-bind", "exclusive", "w"},
           {"--numa-binding", "node", "--cpu-bind", "cores", "w"},
           {"--gpus-per-proc", "0", "w"},
           {"--gpus-per-proc", "two", "w"},
           {"--gpus-per-proc", "2", "--nproc-per-node", "cpu", "w"},
           {"--nproc-per-node", "xpu", "w"},
           {"-m", "--no-python", "w"},
           {"--deadline", "tomorrow", "w"},
           {"--time-limit", "1:60", "w"},
           {"--deadline", "1", "--time-limit", "5", "w"},
           {"--drain-before", "-1", "w"},
           {"--drain-signal", "SIGKILL", "w"},
           {"--drain-signal", "USR1,USR2", "w"},
           {"--restart-on", "sig", "w"},
           {"--run-id", "../../etc", "w"},
           {"--max-restarts"},
           {}}) {
    const auto result = parse(args);
    EXPECT_FALSE(result.options);
    EXPECT_EQ(result.exit_code, kExitLauncherError);
    EXPECT_EQ(result.message.rfind("ddprun: error: ", 0), 0u) << result.message;
    EXPECT_EQ(result.message.find('\n'), result.message.size() - 1) << result.message;
  }
}

TEST(CommandLine, DeviceOptions) {
  const auto plain = parse({"w"});
  ASSERT_TRUE(plain.options) << plain.message;
  EXPECT_FALSE(plain.options->virtual_local_rank);
  EXPECT_FALSE(plain.options->gpus_per_proc);
  // torchrun's flag, in both spellings, is no longer refused.
  for (const char* flag : {"--virtual-local-rank", "--virtual_local_rank"}) {
    const auto narrowed = parse({flag, "--nproc-per-node", "gpu", "w"});
    ASSERT_TRUE(narrowed.options) << narrowed.message;
    EXPECT_TRUE(narrowed.options->virtual_local_rank);
    EXPECT_EQ(narrowed.options->program, std::vector<std::string>{"w"});
  }
  // Without a number of workers, K sets it from the GPUs.
  const auto blocks = parse({"--gpus_per_proc=2", "w"});
  ASSERT_TRUE(blocks.options) << blocks.message;
  EXPECT_EQ(blocks.options->gpus_per_proc, 2);
  EXPECT_EQ(blocks.options->nproc_per_node, "auto");
  const auto counted = parse({"--gpus-per-proc", "2", "--nproc-per-node", "3", "w"});
  ASSERT_TRUE(counted.options) << counted.message;
  EXPECT_EQ(counted.options->nproc_per_node, "3");
  const auto from_pet = parse({"--gpus-per-proc", "4", "w"}, {{"PET_NPROC_PER_NODE", "2"}});
  ASSERT_TRUE(from_pet.options) << from_pet.message;
  EXPECT_EQ(from_pet.options->nproc_per_node, "2");
  const auto cpu = parse({"--gpus-per-proc", "2", "--nproc-per-node", "cpu", "w"});
  EXPECT_EQ(cpu.message,
            "ddprun: error: --gpus-per-proc 2 and --nproc-per-node cpu cannot go together (give "
            "--nproc-per-node gpu, a number, or leave it out)\n");
}

TEST(CommandLine, TorchrunRendezvousOptionsBecomeTheMasterAddressAndPort) {
  const auto c10d = parse({"--nnodes=1", "--nproc_per_node=2", "--rdzv_id=100",
                           "--rdzv_backend=c10d", "--rdzv_endpoint=localhost:29400", "w"});
  ASSERT_TRUE(c10d.options) << c10d.message;
  EXPECT_EQ(c10d.options->nnodes, 1);
  EXPECT_EQ(c10d.options->master_addr, "localhost");
  EXPECT_EQ(c10d.options->master_port, 29400);
  EXPECT_EQ(c10d.options->run_id, "100");
  // c10d's own default port; static has none (ddprun picks one as usual).
  const auto bare = parse({"--rdzv-backend", "c10d", "--rdzv-endpoint", "head", "w"});
  ASSERT_TRUE(bare.options) << bare.message;
  EXPECT_EQ(bare.options->master_port, 29400);
  const auto any = parse({"--rdzv-backend", "c10d", "--rdzv-endpoint", "localhost:0", "w"});
  ASSERT_TRUE(any.options) << any.message;
  EXPECT_FALSE(any.options->master_port);
  EXPECT_TRUE(any.options->free_master_port);
  const auto v6 = parse({"--rdzv-endpoint", "[::1]:29500", "--nnodes", "2:2", "w"});
  ASSERT_TRUE(v6.options) << v6.message;
  EXPECT_EQ(v6.options->master_addr, "::1");
  EXPECT_EQ(v6.options->master_port, 29500);
  EXPECT_EQ(v6.options->nnodes, 2);
}

TEST(CommandLine, StandaloneIsOneLocalNodeOnAFreePort) {
  const auto result = parse({"--standalone", "--rdzv-endpoint", "elsewhere:1", "w"});
  ASSERT_TRUE(result.options) << result.message;
  EXPECT_EQ(result.options->scheduler, "local");
  EXPECT_EQ(result.options->master_addr, "127.0.0.1");
  EXPECT_TRUE(result.options->free_master_port);
}

TEST(CommandLine, EveryTorchrunOptionIsAcceptedInBothSpellings) {
  const auto dashes = parse({"--nproc-per-node",
                             "2",
                             "--rdzv-conf",
                             "join_timeout=900,is_host=1",
                             "--max-restarts",
                             "1",
                             "--monitor-interval",
                             "5",
                             "--start-method",
                             "fork",
                             "--role",
                             "trainer",
                             "--log-dir",
                             "/tmp/l",
                             "--redirects",
                             "3",
                             "--tee",
                             "0:1",
                             "--local-ranks-filter",
                             "0,2",
                             "--node-rank",
                             "0",
                             "--local-addr",
                             "10.0.0.1",
                             "--signals-to-handle",
                             "SIGTERM,SIGUSR1,XCPU",
                             "--event-log-handler",
                             "null",
                             "--exit-timeout",
                             "30",
                             "--run-path",
                             "/abs/train.py"});
  const auto underscores =
      parse({"--nproc_per_node=2", "--rdzv_conf=join_timeout=900,is_host=1", "--max_restarts=1",
             "--monitor_interval=5", "--start_method=fork", "--role=trainer", "--log_dir=/tmp/l",
             "-r", "3", "-t", "0:1", "--local_ranks_filter=0,2", "--node_rank=0",
             "--local_addr=10.0.0.1", "--signals_to_handle=SIGTERM,SIGUSR1,XCPU",
             "--event_log_handler=null", "--exit_timeout=30", "--run_path", "/abs/train.py"});
  for (const auto* result : {&dashes, &underscores}) {
    ASSERT_TRUE(result->options) << result->message;
    const Options& o = *result->options;
    EXPECT_EQ(o.nproc_per_node, "2");
    EXPECT_EQ(o.rdzv_conf.join_timeout_s, 900.0);
    EXPECT_EQ(o.role, "trainer");
    EXPECT_EQ(o.redirects.all, 3);
    EXPECT_EQ(o.tee.for_local_rank(0), 1);
    EXPECT_EQ(o.tee.for_local_rank(1), 0);
    EXPECT_EQ(o.local_ranks_filter, (std::set<int>{0, 2}));
    EXPECT_EQ(o.local_addr, "10.0.0.1");
    EXPECT_EQ(o.signals_to_handle, (std::vector<int>{SIGTERM, SIGUSR1, SIGXCPU}));
    EXPECT_EQ(o.exit_timeout_s, 30.0);
    EXPECT_TRUE(o.run_path);
    EXPECT_EQ(o.program, std::vector<std::string>{"/abs/train.py"});
  }
}

TEST(CommandLine, FoldOutputIsUnsetOnOrOffAndItsTwoFlagsExcludeEachOther) {
  EXPECT_EQ(parse({"x"}).options->fold_output, std::nullopt);  // the default decides
  EXPECT_EQ(parse({"--fold-output", "x"}).options->fold_output, true);
  EXPECT_EQ(parse({"--no_fold_output", "x"}).options->fold_output, false);
  EXPECT_EQ(parse({"x"}).options->fold_window_ms, 150);
  EXPECT_EQ(parse({"--fold-window", "400", "x"}).options->fold_window_ms, 400);
  const auto both = parse({"--fold-output", "--no-fold-output", "x"});
  EXPECT_FALSE(both.options);
  EXPECT_EQ(both.message, "ddprun: error: --fold-output and --no-fold-output exclude each other\n");
  EXPECT_FALSE(parse({"--fold-window", "0", "x"}).options);
}

TEST(CommandLine, TorchrunsDuplicateFiltersAreCommaListsInBothSpellingsAndFromPet) {
  const auto dashes = parse({"--duplicate-stdout-filters", "warning,NaN,,loss=", "x"});
  ASSERT_TRUE(dashes.options) << dashes.message;
  EXPECT_EQ(dashes.options->duplicate_stdout_filters,
            (std::vector<std::string>{"warning", "NaN", "loss="}));  // the empty one is left out
  EXPECT_TRUE(dashes.options->duplicate_stderr_filters.empty());
  const auto underscores = parse({"--duplicate_stderr_filters=Traceback", "x"});
  ASSERT_TRUE(underscores.options) << underscores.message;
  EXPECT_EQ(underscores.options->duplicate_stderr_filters, std::vector<std::string>{"Traceback"});
  const auto pet = parse({"x"}, {{"PET_DUPLICATE_STDOUT_FILTERS", "apple,orange"}});
  ASSERT_TRUE(pet.options) << pet.message;
  EXPECT_EQ(pet.options->duplicate_stdout_filters, (std::vector<std::string>{"apple", "orange"}));
}

TEST(CommandLine, ADoubleDashRightAfterTheProgramIsDroppedAsTorchrunDrops) {
  const auto right_after = parse({"-m", "scripts.base_train", "--", "--depth=20"});
  ASSERT_TRUE(right_after.options) << right_after.message;
  EXPECT_EQ(right_after.options->program,
            (std::vector<std::string>{"scripts.base_train", "--depth=20"}));
  const auto later = parse({"./w", "a", "--", "b"});
  ASSERT_TRUE(later.options) << later.message;
  EXPECT_EQ(later.options->program, (std::vector<std::string>{"./w", "a", "--", "b"}));
}

TEST(CommandLine, ModuleAndNoPythonFlagsComeBeforeTheProgram) {
  const auto module = parse({"--nproc-per-node=2", "-m", "pkg.train", "--epochs", "3"});
  ASSERT_TRUE(module.options) << module.message;
  EXPECT_TRUE(module.options->module);
  EXPECT_EQ(module.options->program, (std::vector<std::string>{"pkg.train", "--epochs", "3"}));
  const auto direct = parse({"--no_python", "./run.sh", "-m"});
  ASSERT_TRUE(direct.options) << direct.message;
  EXPECT_TRUE(direct.options->no_python);
  EXPECT_FALSE(direct.options->module);  // the program's own -m
}

TEST(CommandLine, PetVariablesFillTheOptionsTheCommandLineLeftOut) {
  const Environment env{{"PET_NPROC_PER_NODE", "3"},
                        {"PET_RDZV_BACKEND", "c10d"},
                        {"PET_RDZV_ENDPOINT", "head:29600"},
                        {"PET_STANDALONE", "0"},
                        {"PET_MAX_RESTARTS", "2"}};
  const auto result = parse({"--max-restarts", "5", "w"}, env);
  ASSERT_TRUE(result.options) << result.message;
  EXPECT_EQ(result.options->nproc_per_node, "3");
  EXPECT_EQ(result.options->master_addr, "head");
  EXPECT_EQ(result.options->master_port, 29600);
  EXPECT_EQ(result.options->max_restarts, 5);  // the command line wins
  EXPECT_FALSE(result.options->scheduler);     // PET_STANDALONE=0 is no --standalone
  const auto bad = parse({"w"}, {{"PET_TEE", "9"}});
  EXPECT_FALSE(bad.options);
  EXPECT_NE(bad.message.find("--tee 9: expected"), std::string::npos) << bad.message;
}

// srun passes the whole environment to the agents it starts: an agent's command line is
// the head's, which already took PET_* in, so PET_MODULE must not add a second -m.
TEST(CommandLine, AnAgentNeverReadsPetVariables) {
  const Environment env{{"PET_MODULE", "1"}, {"PET_NPROC_PER_NODE", "3"}};
  const auto agent = parse({"--agent", "--agent-nodes", "n0:2,n1:2", "--nproc-per-node", "2",
                            "python3", "-u", "-m", "json.tool"},
                           env);
  ASSERT_TRUE(agent.options) << agent.message;
  EXPECT_FALSE(agent.options->module);
  EXPECT_EQ(agent.options->nproc_per_node, "2");
  EXPECT_EQ(agent.options->program, (std::vector<std::string>{"python3", "-u", "-m", "json.tool"}));
  const auto head = parse({"train.py"}, env);
  ASSERT_TRUE(head.options) << head.message;
  EXPECT_TRUE(head.options->module);  // the head does read them
}

}  // namespace
}  // namespace ddprun
