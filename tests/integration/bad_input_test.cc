// The hostile-input corpus: bad command lines, hostfiles, scheduler environments and
// training configs. Each must end in one clear "ddprun: error: ..." line naming what was
// wrong, a documented exit code, and no process left behind. The asan preset runs the
// launcher cases under ASan/UBSan.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>

#include "launcher_harness.h"

namespace ddprun::testing {
namespace {

struct BadInput {
  std::string name;
  std::vector<std::string> args;
  std::vector<std::string> env;  // KEY=VALUE added to ddprun's environment
  int exit_code;
  std::string message_part;
};

void PrintTo(const BadInput& input, std::ostream* out) {
  *out << input.name;
}

std::string this_host() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  return name;
}

// A folder of bad files, made once for the whole program and removed at its exit. Its
// own per process: ctest -j runs each case in a process of its own, and they must not
// rewrite each other's files while ddprun reads them.
struct BadFilesDir {
  BadFilesDir()
      : path((std::filesystem::temp_directory_path() /
              ("ddprun-bad-input-" + this_host() + "-" + std::to_string(::getpid())))
                 .string()) {
    std::filesystem::create_directories(path);
  }
  ~BadFilesDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
  std::string path;
};
const BadFilesDir kBadFiles;
const std::string& kDir = kBadFiles.path;

std::string file(const std::string& name, const std::string& content) {
  const std::string path = kDir + "/" + name;
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

std::string garbage(std::size_t size) {
  std::mt19937 random(42);
  std::string bytes(size, '\0');
  for (auto& byte : bytes) byte = static_cast<char>(random() & 0xff);
  return bytes;
}

const std::string kNotExecutable = [] {
  const std::string path = file("not-executable.txt", "not a program\n");
  std::filesystem::permissions(
      path, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  return path;
}();

const int kBusyPort = [] {
  // A listener held for the whole test program: that port is in use.
  const int sock = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  ::bind(sock, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  ::listen(sock, 1);
  socklen_t len = sizeof addr;
  ::getsockname(sock, reinterpret_cast<sockaddr*>(&addr), &len);
  return static_cast<int>(ntohs(addr.sin_port));
}();

// Pids of live processes whose environment holds `marker`.
std::vector<pid_t> processes_marked(const std::string& marker) {
  std::vector<pid_t> found;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(entry.path() / "environ", std::ios::binary);
    const std::string environ((std::istreambuf_iterator<char>(in)), {});
    if (environ.find(marker) != std::string::npos) found.push_back(std::stoi(name));
  }
  return found;
}

class BadInputTest : public ::testing::TestWithParam<BadInput> {};

TEST_P(BadInputTest, GivesOneErrorLineItsExitCodeAndLeavesNothing) {
  const auto& param = GetParam();
  const std::string marker =
      "DDPRUN_BAD_INPUT_CASE=" + param.name + "-" + std::to_string(::getpid());
  auto env = param.env;
  env.push_back(marker);
  const auto done = run_ddprun(param.args, env);
  EXPECT_EQ(done.exit_code, param.exit_code) << done.err;
  std::vector<std::string> errors;
  for (const auto& line : split_lines(done.err)) {
    if (line.rfind("ddprun: error: ", 0) == 0) errors.push_back(line);
  }
  ASSERT_EQ(errors.size(), 1u) << done.err;
  EXPECT_NE(done.err.find(param.message_part), std::string::npos) << done.err;
  EXPECT_EQ(processes_marked(marker), std::vector<pid_t>{});
}

// The command line.
const std::vector<BadInput> kCommandLines = {
    {"ZeroWorkers", {"--nproc-per-node", "0", "true"}, {}, 125, "--nproc-per-node"},
    {"WordWorkers", {"--nproc-per-node", "many", "true"}, {}, 125, "got 'many'"},
    {"HugeWorkers", {"--nproc-per-node", "99999999", "true"}, {}, 125, "got '99999999'"},
    {"PortTooLarge", {"--master-port", "70000", "true"}, {}, 125, "--master-port"},
    {"PortZero", {"--master-port", "0", "true"}, {}, 125, "--master-port"},
    {"PortBusy",
     {"--master-port", std::to_string(kBusyPort), "true"},
     {},
     125,
     "already in use on this host by pid " + std::to_string(::getpid()) + " ("},
    {"UnknownOption", {"--frobnicate", "true"}, {}, 125, "unknown option '--frobnicate'"},
    {"NoProgram", {"--nproc-per-node", "2"}, {}, 125, "no program"},
    {"MissingProgram", {"/nonexistent/worker"}, {}, 127, "no such file"},
    {"ProgramNotInPath", {"ddprun-no-such-program"}, {}, 127, "not found in PATH"},
    {"NotExecutable", {"--no-python", kNotExecutable}, {}, 126, "not executable"},
    {"Directory", {"/tmp"}, {}, 126, "not executable"},
    {"TeeOutOfRange", {"--tee", "4", "true"}, {}, 125, "--tee 4: expected 0 (none)"},
    {"RedirectsPerRankMalformed", {"-r", "0:1,1", "true"}, {}, 125, "'1' is not LOCAL_RANK:N"},
    {"ElasticNnodes", {"--nnodes", "1:4", "true"}, {}, 125, "elastic node ranges are not"},
    {"ElasticNnodesFromPet",
     {"true"},
     {"PET_NNODES=2:4", "PET_NODE_RANK=0", "MASTER_ADDR=x"},
     125,
     "PET_NNODES=\"2:4\": elastic node ranges are not supported"},
    {"EtcdBackend", {"--rdzv-backend", "etcd-v2", "true"}, {}, 125, "etcd rendezvous is not"},
    {"UnknownBackend", {"--rdzv_backend=redis", "true"}, {}, 125, "unknown backend"},
    {"EndpointWithoutHost", {"--rdzv-endpoint", ":29400", "true"}, {}, 125, "no host"},
    {"EndpointBadPort", {"--rdzv-endpoint=h:http", "true"}, {}, 125, "the port must be"},
    {"EndpointUnbracketedIpv6", {"--rdzv-endpoint", "fe80::1:5", "true"}, {}, 125, "brackets"},
    {"EndpointAgainstMasterAddr",
     {"--rdzv-endpoint", "a:1", "--master-addr", "b", "true"},
     {},
     125,
     "name different hosts"},
    {"RdzvConfNotKeyValue", {"--rdzv-conf", "join_timeout", "true"}, {}, 125, "not KEY=VALUE"},
    {"RdzvConfBadTimeout", {"--rdzv-conf", "timeout=soon", "true"}, {}, 125, "positive number"},
    {"StandaloneManyNodes", {"--standalone", "--nnodes", "2", "true"}, {}, 125, "one node"},
    {"ModuleAndNoPython", {"-m", "--no-python", "x"}, {}, 125, "cannot go together"},
    {"LocalRanksFilterEmpty", {"--local-ranks-filter", "", "true"}, {}, 125, "no local rank"},
    {"LocalRanksFilterNoValue", {"--local-ranks-filter=", "--", "true"}, {}, 125, "missing"},
    {"LocalRanksFilterWord", {"--local_ranks_filter", "all", "true"}, {}, 125, "e.g. 0,1,2"},
    {"SignalsToHandleKill", {"--signals-to-handle", "SIGKILL", "true"}, {}, 125, "'SIGKILL'"},
    {"StartMethodThread", {"--start-method", "thread", "true"}, {}, 125, "--start-method"},
    {"ExitTimeoutWord", {"--exit-timeout", "soon", "true"}, {}, 125, "--exit-timeout"},
    {"EventLogHandler", {"--event-log-handler", "console", "true"}, {}, 125, "only 'null'"},
    {"LogsSpecs", {"--logs-specs", "mine", "true"}, {}, 125, "log plugins are not supported"},
    {"NumaBindingUnknownMode", {"--numa-binding", "nodes", "true"}, {}, 125, "not a binding mode"},
    {"NumaBindingTooManyRanks",
     {"--numa-binding", "exclusive", "--nproc-per-node", "4097", "true"},
     {},
     125,
     "ranks share NUMA node"},
    {"NumaBindingAndCpuBind",
     {"--numa-binding", "node", "--cpu-bind", "cores", "true"},
     {},
     125,
     "cannot go together"},
    {"NumaBindingNoSuchGpu",
     {"--numa-binding", "node", "--nproc-per-node", "gpu", "true"},
     {"CUDA_VISIBLE_DEVICES=GPU-nonexistent"},
     125,
     "no GPU of this node has that UUID"},
    {"VirtualLocalRankMoreWorkersThanGpus",
     {"--virtual-local-rank", "--nproc-per-node", "65536", "true"},
     {"CUDA_VISIBLE_DEVICES=0"},
     125,
     "--virtual-local-rank: "},
    {"GpusPerProcUneven",
     {"--gpus-per-proc", "1024", "true"},
     {"CUDA_VISIBLE_DEVICES=0,1,2,3"},
     125,
     "--gpus-per-proc 1024: "},
    {"GpusPerProcZero", {"--gpus-per-proc", "0", "true"}, {}, 125, "--gpus-per-proc"},
    {"XpuWorkers", {"--nproc-per-node", "xpu", "true"}, {}, 125, "CUDA GPUs only"},
    {"DeadlineWord", {"--deadline", "tomorrow", "true"}, {}, 125, "expected unix seconds"},
    {"TimeLimitBadClock", {"--time-limit", "1:75", "true"}, {}, 125, "[[D-]HH:]MM:SS"},
    {"DeadlineAndTimeLimit",
     {"--deadline", "1795000000", "--time-limit", "60", "true"},
     {},
     125,
     "give one"},
    {"DrainSignalKill", {"--drain-signal", "KILL", "true"}, {}, 125, "'KILL'"},
    {"RestartOnWord", {"--restart-on", "crashes", "true"}, {}, 125, "neither 'signals'"},
    {"BadFormat", {"--format", "xml", "--dry-run", "true"}, {}, 125, "--format"},
    {"NegativeTimeout", {"--shutdown-timeout", "-1", "true"}, {}, 125, "--shutdown-timeout"},
    {"NanTimeout", {"--shutdown-timeout", "nan", "true"}, {}, 125, "got 'nan'"},
    {"BadRunId", {"--run-id", "a b", "true"}, {}, 125, "--run-id"},
    {"EmptyRunId", {"--run-id", "", "true"}, {}, 125, "--run-id"},
    {"NegativeRestarts", {"--max-restarts", "-2", "true"}, {}, 125, "--max-restarts"},
    {"NnodesWithoutNodeRank",
     {"--nnodes", "3", "true"},
     {},
     125,
     "--nnodes 3 without a scheduler or a hostfile needs this node's --node-rank"},
    {"NodeRankOutOfRange", {"--node-rank", "5", "true"}, {}, 125, "out of range"},
    {"NodeRankOutOfRangeByHand",
     {"--nnodes", "2", "--node-rank", "5", "--master-addr", "10.9.9.9", "true"},
     {},
     125,
     "--node-rank 5 is out of range: --nnodes 2 has node ranks 0-1"},
    {"WarmSpareWithoutRankScope",
     {"--warm-spare", "--max-restarts", "1", "true"},
     {},
     125,
     "--warm-spare needs --restart-scope rank"},
    {"AgentReplacesByHand",
     {"--agent-replaces", "--restart-scope", "rank", "--max-restarts", "1", "true"},
     {},
     125,
     "--agent-replaces is for agents under --restart-scope rank"},
    {"RankScopeUnderOneSrunForEveryNode",
     {"--restart-scope", "rank", "--max-restarts", "1", "--launcher", "srun", "--master-addr",
      "10.9.9.9", "--hostfile", file("rankscope", this_host() + "\npeer\n"), "true"},
     {},
     125,
     "--restart-scope rank over several nodes needs a ddprun on each node"},
    {"UnknownScheduler", {"--scheduler", "pbspro", "true"}, {}, 125, "got 'pbspro'"},
    {"UnknownLauncher", {"--launcher", "rsh", "true"}, {}, 125, "--launcher"},
    {"EnvBadName", {"--env", "1X=2", "true"}, {}, 125, "'1X' is not a variable name"},
    {"EnvShellInName", {"--env", "A;rm=2", "true"}, {}, 125, "is not a variable name"},
    {"EnvUnset", {"--env", "DDPRUN_NOT_SET_ANYWHERE", "true"}, {}, 125, "is not set here"},
    {"AgentByHand", {"--agent", "true"}, {}, 125, "--agent and --agent-nodes go together"},
    {"LogDirUnwritable",
     {"--log-dir", "/proc/ddprun-forbidden", "true"},
     {},
     125,
     "/proc/ddprun-forbidden"},
};

// Hostfiles.
const std::vector<BadInput> kHostfiles = {
    {"HostfileMissing", {"--hostfile", kDir + "/missing", "true"}, {}, 125, "cannot read"},
    {"HostfileEmpty", {"--hostfile", file("empty", ""), "true"}, {}, 125, "no hosts"},
    {"HostfileWordSlots",
     {"--hostfile", file("slots", "n1 slots=abc\n"), "true"},
     {},
     125,
     "got 'abc'"},
    {"HostfileZeroSlots", {"--hostfile", file("zero", "n1 slots=0\n"), "true"}, {}, 125, "got '0'"},
    {"HostfileBinary", {"--hostfile", file("binary", garbage(300)), "true"}, {}, 125, "binary:"},
    {"HostfileOpenBracket",
     {"--hostfile", file("bracket", "n[1-\n"), "true"},
     {},
     125,
     "unclosed '['"},
    {"HostfileWithoutThisHost",
     {"--hostfile", file("absent", "nodeA\nnodeB\n"), "true"},
     {},
     125,
     "is not one of the 2 nodes"},
    {"HostfileHugeLine",
     {"--hostfile", file("huge", std::string(1 << 20, 'a')), "true"},
     {},
     125,
     "longer than 255"},
    {"NoPortForHandStartedNodes",
     {"--launcher", "local", "--master-addr", "10.0.0.1", "--hostfile",
      file("two", this_host() + "\npeer\n"), "true"},
     {},
     125,
     "give --master-port"},
};

// Scheduler environments.
const std::vector<BadInput> kSchedulerEnvs = {
    {"ForcedSlurmWithoutSlurm", {"--scheduler", "slurm", "true"}, {}, 125, "SLURM_JOB_NODELIST"},
    {"ForcedMpiWithoutHostfile", {"--scheduler", "mpi", "true"}, {}, 125, "--hostfile"},
    {"SlurmOpenBracket",
     {"true"},
     {"SLURM_JOB_ID=1", "SLURM_JOB_NODELIST=n[1-"},
     125,
     "unclosed '['"},
    {"SlurmNodeCountMismatch",
     {"true"},
     {"SLURM_JOB_ID=1", "SLURM_JOB_NODELIST=n[1-3]", "SLURM_JOB_NUM_NODES=2"},
     125,
     "SLURM_JOB_NUM_NODES"},
    {"SlurmWordTasks",
     {"true"},
     {"SLURM_JOB_ID=1", "SLURM_JOB_NODELIST=" + this_host(), "SLURM_TASKS_PER_NODE=abc"},
     125,
     "SLURM_TASKS_PER_NODE"},
    {"SlurmNodeIdOutOfRange",
     {"true"},
     {"SLURM_JOB_ID=1", "SLURM_JOB_NODELIST=" + this_host(), "SLURM_NODEID=7"},
     125,
     "SLURM_NODEID"},
    {"PbsNodefileMissing",
     {"true"},
     {"PBS_JOBID=1", "PBS_NODEFILE=" + kDir + "/missing"},
     125,
     "PBS_NODEFILE"},
    {"SgeBrokenPeHostfile",
     {"true"},
     {"JOB_ID=1", "PE_HOSTFILE=" + file("pe", this_host() + " 2 all.q@x UNDEFINED\nbroken line\n")},
     125,
     "PE_HOSTFILE"},
    {"LsfHostWithoutCount", {"true"}, {"LSB_JOBID=1", "LSB_MCPU_HOSTS=n1"}, 125, "LSB_MCPU_HOSTS"},
    {"MpiWithoutHostfile", {"true"}, {"OMPI_COMM_WORLD_SIZE=2"}, 125, "OMPI_COMM_WORLD_SIZE"},
    {"KubeflowWordNodes",
     {"true"},
     {"PET_NNODES=abc", "PET_NODE_RANK=0", "MASTER_ADDR=x"},
     125,
     "PET_NNODES"},
    {"MasterPortWord", {"true"}, {"MASTER_PORT=http"}, 125, "MASTER_PORT"},
    {"NoVisibleGpu",
     {"--nproc-per-node", "gpu", "true"},
     {"CUDA_VISIBLE_DEVICES="},
     125,
     "no GPU is visible"},
};

std::vector<BadInput> launcher_cases() {
  std::vector<BadInput> all = kCommandLines;
  all.insert(all.end(), kHostfiles.begin(), kHostfiles.end());
  all.insert(all.end(), kSchedulerEnvs.begin(), kSchedulerEnvs.end());
  return all;
}

INSTANTIATE_TEST_SUITE_P(Launcher, BadInputTest, ::testing::ValuesIn(launcher_cases()),
                         [](const auto& test_info) { return test_info.param.name; });

#ifdef DDP_TRAIN_BIN
// Training configs, read by the worker: the failure report's one error line and the
// worker's error file name the file and the JSON pointer.
BadInput config_case(const std::string& name, const std::string& json, const std::string& part) {
  return {name,
          {"--nproc-per-node", "1", DDP_TRAIN_BIN, "--config", file(name + ".json", json)},
          {},
          1,
          part};
}

// A valid config changed by `edit`.
std::string config_with(const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json config = {{"model", {{"name", "toy"}}},
                           {"data", {{"name", "synthetic"}}},
                           {"optimizer", {{"name", "sgd"}, {"lr", 0.1}}},
                           {"train", {{"epochs", 1}, {"batch_size_per_rank", 8}, {"seed", 1}}}};
  edit(config);
  return config.dump();
}

INSTANTIATE_TEST_SUITE_P(
    Config, BadInputTest,
    ::testing::Values(
        config_case("ConfigEmpty", "", "ConfigEmpty.json"),
        config_case("ConfigNotJson", "{model: toy", "ConfigNotJson.json"),
        config_case("ConfigBinary", garbage(500), "ConfigBinary.json"),
        config_case("ConfigTopLevelArray", "[1, 2]", "ConfigTopLevelArray.json"),
        config_case("ConfigUnknownKey", config_with([](auto& c) { c["trian"] = {}; }), "/trian"),
        config_case("ConfigMissingModel", config_with([](auto& c) { c.erase("model"); }), "/model"),
        config_case("ConfigNegativeLr", config_with([](auto& c) { c["optimizer"]["lr"] = -1; }),
                    "/optimizer/lr"),
        config_case("ConfigLrIsText", config_with([](auto& c) { c["optimizer"]["lr"] = "fast"; }),
                    "/optimizer/lr"),
        config_case("ConfigUnknownModel", config_with([](auto& c) { c["model"]["name"] = "gpt"; }),
                    "/model/name"),
        config_case("ConfigHugeBatch",
                    config_with([](auto& c) { c["train"]["batch_size_per_rank"] = 1e300; }),
                    "/train/batch_size_per_rank"),
        config_case("ConfigZeroEpochs", config_with([](auto& c) { c["train"]["epochs"] = 0; }),
                    "/train"),
        BadInput{"ConfigMissingFile",
                 {"--nproc-per-node", "1", DDP_TRAIN_BIN, "--config", kDir + "/none.json"},
                 {},
                 1,
                 "none.json"}),
    [](const auto& test_info) { return test_info.param.name; });
#endif

}  // namespace
}  // namespace ddprun::testing
