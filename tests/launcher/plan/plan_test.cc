#include "plan/plan.h"
#include "job/job_inputs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <ostream>
#include <streambuf>

#include "ddprun/contract/errors.h"
#include "plan/plan_format.h"
#include "plan/rank_environment.h"
#include "plan/shell_quote.h"

namespace ddprun {
namespace {

PlanInputs local_inputs(int cpus = 8) {
  PlanInputs inputs;
  inputs.host = HostFacts{"node-a", cpus, 0};
  inputs.cluster = local_cluster(inputs.host);
  inputs.run_id = "run1";
  inputs.master_addr = "127.0.0.1";
  inputs.master_port = 29500;
  inputs.scratch_dir = "/tmp/s";
  return inputs;
}

Options options_with(const std::string& nproc) {
  Options options;
  options.nproc_per_node = nproc;
  options.program = {"./w", "--flag"};
  return options;
}

std::map<std::string, std::string> env_map(const LaunchPlan& plan, const RankPlan& rank) {
  const auto vars = rank_environment(plan, rank);
  return {vars.begin(), vars.end()};
}

TEST(ResolveNproc, NumbersCpuGpuAndAuto) {
  const HostFacts host{"h", 6, 0};
  const Cluster local = local_cluster(host);
  const Cluster slurm{"slurm", "1", {{"h", 3}}, 0, {}};
  EXPECT_EQ(resolve_nproc("5", 0, local.nodes[0], local, host), 5);
  EXPECT_EQ(resolve_nproc("cpu", 0, local.nodes[0], local, host), 6);
  EXPECT_EQ(resolve_nproc("gpu", 4, local.nodes[0], local, host), 4);
  EXPECT_EQ(resolve_nproc("auto", 2, local.nodes[0], local, host), 2);
  EXPECT_EQ(resolve_nproc("auto", 0, local.nodes[0], local, host), 6);  // torchrun: CPUs
  EXPECT_EQ(resolve_nproc("auto", 0, slurm.nodes[0], slurm, host), 3);
  EXPECT_THROW(resolve_nproc("gpu", 0, local.nodes[0], local, host), UsageError);
}

TEST(BuildPlan, RanksAreContiguousAndCarryTheContract) {
  const auto plan = build_plan(plan_options(options_with("4")), local_inputs(8), {});
  EXPECT_EQ(plan.world_size, 4);
  ASSERT_EQ(plan.nodes.size(), 1u);
  EXPECT_EQ(plan.nodes[0].first_rank, 0);
  ASSERT_EQ(plan.ranks.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    const auto& rank = plan.ranks[static_cast<std::size_t>(i)];
    EXPECT_EQ(rank.rank, i);
    EXPECT_EQ(rank.local_rank, i);
    const auto env = env_map(plan, rank);
    EXPECT_EQ(env.at("RANK"), std::to_string(i));
    EXPECT_EQ(env.at("LOCAL_RANK"), std::to_string(i));
    EXPECT_EQ(env.at("WORLD_SIZE"), "4");
    EXPECT_EQ(env.at("MASTER_PORT"), "29500");
    EXPECT_EQ(env.at("TORCHELASTIC_RUN_ID"), "run1");
    EXPECT_EQ(env.at("OMP_NUM_THREADS"), "1");          // torchrun's rule
    EXPECT_EQ(env.at("DDPRUN_THREADS_PER_RANK"), "2");  // 8 CPUs over 4 workers
    EXPECT_EQ(env.count("OPENBLAS_NUM_THREADS"), 0u);
    EXPECT_EQ(env.at("ROLE_NAME"), "default");
    EXPECT_EQ(env.at("TORCH_NCCL_ASYNC_ERROR_HANDLING"), "1");
    EXPECT_EQ(env.count("NCCL_ASYNC_ERROR_HANDLING"), 0u);  // PyTorch 2.2+ warns about it
    EXPECT_EQ(env.count("TORCHELASTIC_USE_AGENT_STORE"), 0u);
    EXPECT_EQ(env.at("TORCHELASTIC_ERROR_FILE"),
              "/tmp/s/attempt_0/rank_" + std::to_string(i) + ".error.json");
    EXPECT_TRUE(rank_file(plan, i, RankFile::kStdoutLog).empty());
  }
}

TEST(BuildPlan, ThreadsFollowTorchrunAndUserSettingsWin) {
  const auto crowded = build_plan(plan_options(options_with("16")), local_inputs(2), {});
  EXPECT_EQ(env_map(crowded, crowded.ranks[0]).at("DDPRUN_THREADS_PER_RANK"), "1");
  // One worker: torchrun leaves OMP_NUM_THREADS alone; ddp-train still gets its share.
  const auto single = build_plan(plan_options(options_with("1")), local_inputs(8), {});
  EXPECT_EQ(env_map(single, single.ranks[0]).count("OMP_NUM_THREADS"), 0u);
  EXPECT_EQ(env_map(single, single.ranks[0]).at("DDPRUN_THREADS_PER_RANK"), "8");
  // The user's own setting: neither variable is set, whatever the worker count.
  const auto user =
      build_plan(plan_options(options_with("2")), local_inputs(8), {{"OMP_NUM_THREADS", "3"}});
  EXPECT_EQ(env_map(user, user.ranks[0]).count("OMP_NUM_THREADS"), 0u);
  EXPECT_EQ(env_map(user, user.ranks[0]).count("DDPRUN_THREADS_PER_RANK"), 0u);
}

TEST(BuildPlan, RoleAndNcclErrorHandlingFollowTheUser) {
  Options options = options_with("2");
  options.role = "trainer";
  const auto plan =
      build_plan(plan_options(options), local_inputs(), {{"TORCH_NCCL_ASYNC_ERROR_HANDLING", "3"}});
  const auto env = env_map(plan, plan.ranks[1]);
  EXPECT_EQ(env.at("ROLE_NAME"), "trainer");
  EXPECT_EQ(env.at("TORCH_NCCL_ASYNC_ERROR_HANDLING"), "3");
  EXPECT_EQ(env.count("NCCL_ASYNC_ERROR_HANDLING"), 0u);
  // A user's older name (PyTorch before 2.2 reads only that one) stays as it is, the workers
  // inheriting it, and nothing overrides it: 2.2 and later read the newer name first.
  const auto own =
      build_plan(plan_options(options), local_inputs(), {{"NCCL_ASYNC_ERROR_HANDLING", "0"}});
  EXPECT_EQ(env_map(own, own.ranks[0]).count("NCCL_ASYNC_ERROR_HANDLING"), 0u);
  EXPECT_EQ(env_map(own, own.ranks[0]).count("TORCH_NCCL_ASYNC_ERROR_HANDLING"), 0u);
}

TEST(BuildPlan, ConsoleStreamsFollowRedirectsTeeAndTheFilter) {
  Options options = options_with("4");
  options.redirects = parse_stream_choice("-r", "3");
  options.tee = parse_stream_choice("-t", "0:1,2:3");
  options.local_ranks_filter = std::set<int>{0, 1, 3};
  const auto plan = build_plan(plan_options(options), local_inputs(), {});
  // rank: redirected 3 everywhere; teed stdout on 0, both on 2; 2 filtered out.
  const int expected[] = {1, 0, 0, 0};
  for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(plan.ranks[i].console_streams, expected[i]) << i;
  const auto plain = build_plan(plan_options(options_with("2")), local_inputs(), {});
  EXPECT_EQ(plain.ranks[0].console_streams, 3);
  Options errors_off = options_with("2");
  errors_off.redirects = parse_stream_choice("-r", "2");
  EXPECT_EQ(build_plan(plan_options(errors_off), local_inputs(), {}).ranks[1].console_streams, 1);
}

TEST(BuildPlan, LogDirAndRestartRoundNameTheFiles) {
  Options options = options_with("2");
  options.log_dir = "/logs";
  options.max_restarts = 3;
  PlanInputs inputs = local_inputs();
  inputs.restart_count = 2;
  const auto plan = build_plan(plan_options(options), inputs, {});
  EXPECT_EQ(rank_file(plan, 1, RankFile::kStdoutLog), "/logs/attempt_2/rank_1.stdout.log");
  EXPECT_EQ(rank_file(plan, 1, RankFile::kStderrLog), "/logs/attempt_2/rank_1.stderr.log");
  EXPECT_EQ(rank_file(plan, 1, RankFile::kErrorFile), "/logs/attempt_2/rank_1.error.json");
  EXPECT_EQ(rank_file(plan, 1, RankFile::kProgressFile), "/logs/attempt_2/rank_1.progress");
  const auto env = env_map(plan, plan.ranks[1]);
  EXPECT_EQ(env.at("TORCHELASTIC_RESTART_COUNT"), "2");
  EXPECT_EQ(env.at("TORCHELASTIC_MAX_RESTARTS"), "3");
  EXPECT_EQ(env.at("DDPRUN_LOG_DIR"), "/logs/attempt_2");
}

TEST(BuildPlan, SeveralNodesGetContiguousRankBlocks) {
  PlanInputs inputs = local_inputs();
  inputs.cluster = Cluster{"hostfile", "", {{"a", 2}, {"b", 2}, {"c", 2}}, 1, {}};
  const auto plan = build_plan(plan_options(options_with("2")), inputs, {});
  EXPECT_EQ(plan.world_size, 6);
  EXPECT_EQ(plan.this_node, 1);
  EXPECT_EQ(plan.nodes[2].first_rank, 4);
  EXPECT_EQ(plan.ranks[3].host, "b");
  EXPECT_EQ(plan.ranks[3].local_rank, 1);
  EXPECT_EQ(env_map(plan, plan.ranks[3]).at("GROUP_RANK"), "1");
  EXPECT_EQ(env_map(plan, plan.ranks[3]).at("GROUP_WORLD_SIZE"), "3");
}

// A warm spare has the round's environment less what names a rank; when it takes one, it is
// given that rank's whole environment, NUL-ended entries that may hold any other byte.
TEST(SpareEnvironment, LeavesOutWhatNamesARankAndTheAssignmentCarriesItAll) {
  const std::vector<std::string> rank1 = {"PATH=/bin",
                                          "RANK=1",
                                          "LOCAL_RANK=1",
                                          "WORLD_SIZE=2",
                                          "GROUP_RANK=0",
                                          "ROLE_RANK=1",
                                          "MASTER_PORT=29500",
                                          "TORCHELASTIC_ERROR_FILE=/e/1.json",
                                          "DDPRUN_PROGRESS_FILE=/p/1",
                                          "DDPRUN_TRACE_FILE=/t/1",
                                          "DDPRUN_DEVICES=1",
                                          "CUDA_VISIBLE_DEVICES=1",
                                          "X=a=b\nc"};
  EXPECT_EQ(spare_environment(rank1),
            (std::vector<std::string>{"PATH=/bin", "WORLD_SIZE=2", "MASTER_PORT=29500", "X=a=b\nc",
                                      "DDPRUN_SPARE=1"}));
  const std::string assignment = spare_assignment(rank1);
  EXPECT_EQ(std::count(assignment.begin(), assignment.end(), '\0'), 13);
  EXPECT_EQ(assignment.substr(0, 17), std::string("PATH=/bin\0RANK=1\0", 17));
  EXPECT_EQ(assignment.back(), '\0');
}

TEST(MergeEnvironment, ContractOverridesInheritedValues) {
  const auto merged = merge_environment({{"PATH", "/bin"}, {"RANK", "99"}}, {{"RANK", "0"}});
  EXPECT_EQ(merged, (std::vector<std::string>{"PATH=/bin", "RANK=0"}));
}

// Workers, relays, agents and tools all get their environment here: none gets the
// launchers' secret.
TEST(MergeEnvironment, TheRendezvousSecretIsLeftOut) {
  const auto merged =
      merge_environment({{"PATH", "/bin"}, {"DDPRUN_RDZV_TOKEN", "s3cret"}}, {{"RANK", "0"}});
  EXPECT_EQ(merged, (std::vector<std::string>{"PATH=/bin", "RANK=0"}));
}

TEST(PlanFormat, JsonHasTheStableFieldNames) {
  const auto doc = nlohmann::json::parse(
      format_plan_json(build_plan(plan_options(options_with("2")), local_inputs(), {})));
  for (const char* key :
       {"run_id", "scheduler", "master_addr", "master_port", "world_size", "nodes", "ranks"}) {
    EXPECT_TRUE(doc.contains(key)) << key;
  }
  for (const char* key : {"host", "node_rank", "nproc", "first_rank"}) {
    EXPECT_TRUE(doc["nodes"][0].contains(key)) << key;
  }
  for (const char* key : {"rank", "local_rank", "node_rank", "host", "env"}) {
    EXPECT_TRUE(doc["ranks"][1].contains(key)) << key;
  }
  EXPECT_EQ(doc["ranks"][1]["env"]["RANK"], "1");
}

TEST(PlanFormat, TextNamesTheMasterAndEveryRank) {
  const auto text =
      format_plan_text(build_plan(plan_options(options_with("2")), local_inputs(), {}));
  EXPECT_NE(text.find("127.0.0.1:29500"), std::string::npos);
  EXPECT_NE(text.find("rank 1"), std::string::npos);
  EXPECT_NE(text.find("./w --flag"), std::string::npos);
}

// The JSON plan is written by hand, streamed (plan_format.cc): each case is compared byte
// for byte with its golden file (tests/launcher/plan/golden/NAME.json; rewritten by a run
// with DDPRUN_UPDATE_GOLDEN=1, to be read in the diff), and read back: it parses, and
// every rank's variables are its rank_environment, escapes and odd bytes included.
void expect_golden_json(const LaunchPlan& plan, const std::string& name) {
  const std::string json = format_plan_json(plan);
  const std::string path = std::string(DDPRUN_PLAN_GOLDEN_DIR) + "/" + name + ".json";
  if (std::getenv("DDPRUN_UPDATE_GOLDEN") != nullptr) {
    std::ofstream(path, std::ios::binary) << json;
  }
  std::ifstream file(path, std::ios::binary);
  ASSERT_TRUE(file) << "no golden file " << path;
  const std::string golden((std::istreambuf_iterator<char>(file)),
                           std::istreambuf_iterator<char>());
  EXPECT_EQ(json, golden) << name
                          << ": the plan's JSON changed; if on purpose, run again with "
                             "DDPRUN_UPDATE_GOLDEN=1 and read the golden file's diff";
  const auto doc = nlohmann::json::parse(json);
  ASSERT_EQ(doc["ranks"].size(), plan.ranks.size());
  for (std::size_t i = 0; i < plan.ranks.size(); ++i) {
    std::map<std::string, std::string> env;
    for (const auto& [key, value] : doc["ranks"][i]["env"].items()) {
      env[key] = value.get<std::string>();
    }
    std::map<std::string, std::string> expected;
    for (const auto& [key, value] : rank_environment(plan, plan.ranks[i])) {
      // Bytes that are not UTF-8 are written as U+FFFD, as the library's dump does.
      expected[key] =
          nlohmann::json(value).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      expected[key] = nlohmann::json::parse(expected[key]).get<std::string>();
    }
    EXPECT_EQ(env, expected) << "rank " << i;
  }
}

// Slurm's --segment: the nodes keep the scheduler's order, ranks follow it, and the plan
// says which segment each node is in (node i: segment i / size).
TEST(PlanFormat, SlurmSegmentsAreShownAndRanksStayInNodeOrder) {
  PlanInputs inputs = local_inputs();
  inputs.cluster = Cluster{"slurm", "7", {}, 0, {}};
  for (const char* host : {"b07", "b02", "a11", "a03", "c01", "c02"}) {
    inputs.cluster.nodes.push_back({host, 2});
  }
  inputs.cluster.segment_size = 2;
  const LaunchPlan plan = build_plan(plan_options(options_with("2")), inputs, {});
  EXPECT_EQ(plan.segment_size, 2);
  ASSERT_EQ(plan.nodes.size(), 6u);
  EXPECT_EQ(plan.nodes[2].host, "a11");
  EXPECT_EQ(plan.nodes[2].first_rank, 4);
  const std::string text = format_plan_text(plan);
  EXPECT_NE(text.find("segments     2 nodes each (Slurm's --segment): 3 segments, ranks in "
                      "node order within each\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(" a03  ranks 6..7  segment 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find(" b07  ranks 0..1  segment 0  (this node)\n"), std::string::npos) << text;
  EXPECT_EQ(nlohmann::json::parse(format_plan_json(plan))["segment_size"], 2);
  inputs.cluster.segment_size = 4;
  EXPECT_NE(format_plan_text(build_plan(plan_options(options_with("2")), inputs, {}))
                .find("2 segments, ranks in node order within each; the last one is short\n"),
            std::string::npos);
  // Without --segment, no line and null.
  inputs.cluster.segment_size = 0;
  const LaunchPlan plain = build_plan(plan_options(options_with("2")), inputs, {});
  EXPECT_EQ(format_plan_text(plain).find("segment"), std::string::npos);
  EXPECT_TRUE(nlohmann::json::parse(format_plan_json(plain))["segment_size"].is_null());
}

TEST(PlanFormat, JsonIsByteForByteTheGoldenFileAndReadsBack) {
  Options options = options_with("2");
  options.role = "tab\there \"quoted\" back\\slash caf\xc3\xa9 bad\xff end\x01";
  options.log_dir = "/logs/it's";
  options.virtual_local_rank = true;
  PlanInputs inputs = local_inputs();
  inputs.cluster = Cluster{"hostfile", "", {{"a", 2}, {"b", 2}}, 1, {}};
  inputs.gpus.devices = {"GPU-\"a\"", "1"};
  inputs.gpus.source = "CUDA_VISIBLE_DEVICES";
  inputs.visible_gpus = 2;
  inputs.socket_interface = {"ib0", "routes to the master"};
  inputs.job_end_unix = 1790000000;
  const LaunchPlan plan = build_plan(plan_options(options), inputs, {{"OMP_NUM_THREADS", "3"}});
  expect_golden_json(plan, "two_nodes_odd_values");
  // No GPUs, no interface, one node, the defaults.
  const LaunchPlan plain = build_plan(plan_options(options_with("3")), local_inputs(), {});
  expect_golden_json(plain, "one_node_defaults");
  // This node's ranks bound (--numa-binding exclusive), the other node's not.
  Options bound = options;
  bound.bind = BindMode::kExclusive;
  auto topology = std::make_shared<NodeTopology>();
  topology->allowed_cpus = {0, 1, 2, 3};
  topology->numa_nodes = {{0, {0, 1, 2, 3}, 0}};
  topology->cores = {{{0, 2}, 0, 0, -1}, {{1, 3}, 0, 0, -1}};
  topology->gpus = {{"0000:01:00.0", 0x302, 0x10de, {0, 1, 2, 3}, {0}, {1}, "GPU-\"a\"", "", ""},
                    {"0000:02:00.0", 0x302, 0x10de, {0, 1, 2, 3}, {0}, {1}, "", "", ""}};
  topology->nics = {{"0000:03:00.0", 0x207, 0x15b3, {0, 1, 2, 3}, {0}, {1}, "", "mlx5_0", "ib0"}};
  inputs.topology = topology;
  const LaunchPlan placed = build_plan(plan_options(bound), inputs, {});
  ASSERT_EQ(placed.placement.local.size(), 2u);
  EXPECT_EQ(cpulist_text(placed.placement.local[1].cpus), "1,3");
  expect_golden_json(placed, "bound_ranks");
  EXPECT_NE(format_plan_json(placed).find("\"nic\": \"mlx5_0\""), std::string::npos);
}

TEST(PlanFormat, TextQuotesEachValueAsAShellWould) {
  Options options = options_with("1");
  options.role = "it's mine";
  const std::string text = format_plan_text(build_plan(plan_options(options), local_inputs(), {}));
  EXPECT_NE(text.find("\n  rank 0       RANK=0 LOCAL_RANK=0 WORLD_SIZE=1 "), std::string::npos)
      << text;
  EXPECT_NE(text.find(" ROLE_NAME='it'\\''s mine' MASTER_ADDR=127.0.0.1 "), std::string::npos)
      << text;
  EXPECT_NE(text.find(" DDPRUN_THREADS_PER_RANK=8\n"), std::string::npos) << text;
}

// 16,384 nodes of 8 ranks: each rank's values computed from a plan that stores no
// variables or file paths per rank.
TEST(BuildPlan, SixteenThousandNodesOfEightRanks) {
  PlanInputs inputs = local_inputs();
  inputs.cluster = Cluster{"hostfile", "", {}, 0, {}};
  for (int i = 0; i < 16384; ++i) inputs.cluster.nodes.push_back({"n" + std::to_string(i), 8});
  const LaunchPlan plan = build_plan(plan_options(options_with("8")), inputs, {});
  EXPECT_EQ(plan.world_size, 131072);
  ASSERT_EQ(plan.ranks.size(), 131072u);
  const RankPlan& last = plan.ranks.back();
  EXPECT_EQ(last.rank, 131071);
  EXPECT_EQ(last.local_rank, 7);
  EXPECT_EQ(last.node_rank, 16383);
  EXPECT_EQ(last.host, "n16383");
  const auto env = env_map(plan, plan.ranks[70001]);
  EXPECT_EQ(env.at("RANK"), "70001");
  EXPECT_EQ(env.at("LOCAL_RANK"), "1");
  EXPECT_EQ(env.at("GROUP_RANK"), "8750");
  EXPECT_EQ(env.at("GROUP_WORLD_SIZE"), "16384");
  EXPECT_EQ(env.at("WORLD_SIZE"), "131072");
  EXPECT_EQ(env.at("DDPRUN_HOST"), "n8750");
  EXPECT_EQ(env.at("TORCHELASTIC_ERROR_FILE"), "/tmp/s/attempt_0/rank_70001.error.json");
}

// Keeps what is written to it and the largest single write.
class PieceRecorder : public std::streambuf {
 public:
  std::string text;
  std::size_t largest = 0;

 protected:
  int_type overflow(int_type c) override {
    if (c != traits_type::eof()) {
      const char one = static_cast<char>(c);
      xsputn(&one, 1);
    }
    return c;
  }
  std::streamsize xsputn(const char* piece, std::streamsize size) override {
    text.append(piece, static_cast<std::size_t>(size));
    largest = std::max(largest, static_cast<std::size_t>(size));
    return size;
  }
};

// A --dry-run of 16,384 nodes prints over 100 MB: the plan goes out in pieces as it is
// formatted, never whole (1,024 nodes here: 5 MB of text, 9 MB of JSON).
TEST(PlanFormat, LargePlansAreWrittenInPiecesNotHeldWhole) {
  PlanInputs inputs = local_inputs();
  inputs.cluster = Cluster{"hostfile", "", {}, 0, {}};
  for (int i = 0; i < 1024; ++i) inputs.cluster.nodes.push_back({"n" + std::to_string(i), 8});
  const LaunchPlan plan = build_plan(plan_options(options_with("8")), inputs, {});
  for (const auto write : {write_plan_text, write_plan_json}) {
    PieceRecorder recorder;
    std::ostream out(&recorder);
    write(plan, out);
    EXPECT_GT(recorder.text.size(), 4000000u);
    EXPECT_LE(recorder.largest, 256u * 1024u);
    // Text: 9 header lines, one per node, one per rank. JSON: 32 lines per rank.
    EXPECT_EQ(std::count(recorder.text.begin(), recorder.text.end(), '\n'),
              write == write_plan_text ? 9 + 1024 + 8192 : 24 + 1024 * 6 + 4 + 8192 * 32);
  }
}

TEST(QuoteCommand, QuotesOnlyWhatAShellWouldSplitOrExpand) {
  EXPECT_EQ(quote_command({"a", "b=c", "/x/y.py"}), "a b=c /x/y.py");
  EXPECT_EQ(quote_command({"it's", "$(rm -rf /)", ""}), R"('it'\''s' '$(rm -rf /)' '')");
}

}  // namespace
}  // namespace ddprun
