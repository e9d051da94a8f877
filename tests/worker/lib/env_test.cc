#include "ddprun/worker/env.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>

#include "ddprun/contract/errors.h"
#include "ddprun/worker/errors.h"
#include "ddprun/worker/init_method.h"

extern char** environ;

namespace ddprun::worker {
namespace {

Environment full_env() {
  return {{"RANK", "3"},
          {"LOCAL_RANK", "1"},
          {"WORLD_SIZE", "4"},
          {"LOCAL_WORLD_SIZE", "2"},
          {"GROUP_RANK", "1"},
          {"MASTER_ADDR", "node0"},
          {"MASTER_PORT", "29500"},
          {"TORCHELASTIC_RUN_ID", "abc"},
          {"TORCHELASTIC_RESTART_COUNT", "2"},
          {"TORCHELASTIC_ERROR_FILE", "/tmp/e.json"},
          {"OMP_NUM_THREADS", "1"},
          {"PATH", "/usr/bin"}};
}

std::string error_of(const Environment& env) {
  try {
    read_worker_env(env);
  } catch (const EnvError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(EnvTest, ReadsTheWholeContract) {
  const WorkerEnv w = read_worker_env(full_env());
  EXPECT_FALSE(w.standalone);
  EXPECT_EQ(w.rank, 3);
  EXPECT_EQ(w.local_rank, 1);
  EXPECT_EQ(w.world_size, 4);
  EXPECT_EQ(w.local_world_size, 2);
  EXPECT_EQ(w.group_rank, 1);
  EXPECT_EQ(w.master_addr, "node0");
  EXPECT_EQ(w.master_port, 29500);
  EXPECT_EQ(w.run_id, "abc");
  EXPECT_EQ(w.restart_count, 2);
  EXPECT_EQ(w.error_file, "/tmp/e.json");
  EXPECT_EQ(w.omp_num_threads, 1);
}

TEST(EnvTest, NoRankVariablesMeansAStandaloneWorldOfOne) {
  const WorkerEnv w = read_worker_env({{"PATH", "/usr/bin"}, {"TORCHELASTIC_ERROR_FILE", "e"}});
  EXPECT_TRUE(w.standalone);
  EXPECT_EQ(w.rank, 0);
  EXPECT_EQ(w.world_size, 1);
  EXPECT_EQ(w.master_addr, "127.0.0.1");
  EXPECT_EQ(w.master_port, 0);
  EXPECT_EQ(w.error_file, "e");
}

TEST(EnvTest, ErrorsNameTheVariable) {
  auto env = full_env();
  env.erase("WORLD_SIZE");
  EXPECT_EQ(error_of(env), "WORLD_SIZE is not set but other launcher variables are");

  env = full_env();
  env["RANK"] = "4";
  EXPECT_EQ(error_of(env), "RANK=4 is out of range 0..3");

  env = full_env();
  env["MASTER_PORT"] = "29x";
  EXPECT_EQ(error_of(env), "MASTER_PORT='29x' is not an integer");

  env = full_env();
  env["MASTER_PORT"] = "70000";
  EXPECT_EQ(error_of(env), "MASTER_PORT=70000 is out of range 1..65535");

  env = full_env();
  env.erase("MASTER_ADDR");
  EXPECT_EQ(error_of(env), "MASTER_ADDR is not set but RANK is");

  EXPECT_EQ(error_of({{"LOCAL_RANK", "0"}}),
            "WORLD_SIZE is not set but other launcher variables are");
}

TEST(EnvTest, OptionalVariablesDefaultLikeTorchrun) {
  const WorkerEnv w = read_worker_env(
      {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "5"}});
  EXPECT_EQ(w.local_rank, 1);
  EXPECT_EQ(w.local_world_size, 2);
  EXPECT_EQ(w.restart_count, 0);
  EXPECT_EQ(w.run_id, "standalone");
  EXPECT_FALSE(w.omp_num_threads.has_value());
  EXPECT_FALSE(w.replacement);
}

TEST(EnvTest, AProcessInALostNodesPlaceIsAReplacementFromItsStart) {
  Environment env = full_env();
  env["DDPRUN_REPLACEMENT"] = "1";
  env["DDPRUN_MEMBERSHIP_FILE"] = "/run/m.json";
  const WorkerEnv w = read_worker_env(env);
  EXPECT_TRUE(w.replacement);
  EXPECT_EQ(w.membership_file, "/run/m.json");
  env["DDPRUN_REPLACEMENT"] = "0";
  EXPECT_FALSE(read_worker_env(env).replacement);
}

TEST(EnvTest, DevicesAreCommaSeparatedOrdinals) {
  auto env = full_env();
  EXPECT_TRUE(read_worker_env(env).devices.empty());
  env["DDPRUN_DEVICES"] = "2,3";
  EXPECT_EQ(read_worker_env(env).devices, (std::vector<int>{2, 3}));
  env["DDPRUN_DEVICES"] = "0";
  EXPECT_EQ(read_worker_env(env).devices, (std::vector<int>{0}));
  env["DDPRUN_DEVICES"] = "1,,2";
  EXPECT_EQ(error_of(env), "DDPRUN_DEVICES='' is not an integer");
  env["DDPRUN_DEVICES"] = "-1";
  EXPECT_EQ(error_of(env), "DDPRUN_DEVICES=-1 is out of range 0..1023");
}

// A worker using K devices: ddprun's K (--gpus-per-proc), else LOCAL_RANK's block of K.
TEST(EnvTest, RankDevicesAreDdprunsOrTheLocalRanksBlock) {
  auto env = full_env();
  env["LOCAL_RANK"] = "1";
  EXPECT_EQ(rank_devices(read_worker_env(env), 1), (std::vector<int>{1}));
  EXPECT_EQ(rank_devices(read_worker_env(env), 2), (std::vector<int>{2, 3}));
  env["DDPRUN_DEVICES"] = "4,5";
  EXPECT_EQ(rank_devices(read_worker_env(env), 2), (std::vector<int>{4, 5}));
  EXPECT_EQ(rank_devices(read_worker_env(env), 1), (std::vector<int>{4}));
  try {
    rank_devices(read_worker_env(env), 3);
    ADD_FAILURE() << "3 devices from a list of 2";
  } catch (const ddprun::UsageError& e) {
    EXPECT_STREQ(e.what(), "this worker needs 3 devices, and DDPRUN_DEVICES gives it 2");
    EXPECT_EQ(e.hint(), "start it with ddprun --gpus-per-proc 3");
  }
}

// A warm spare reads its rank's environment on its stdin: NUL-ended entries, then the end of
// its input; that becomes the process's environment. The end alone: not needed.
TEST(SpareTest, ASpareBecomesTheRankItIsGivenOrEndsWhenGivenNothing) {
  EXPECT_TRUE(is_spare({{"DDPRUN_SPARE", "1"}}));
  EXPECT_FALSE(is_spare({{"DDPRUN_SPARE", "0"}}));
  EXPECT_FALSE(is_spare({}));
  const auto given = [](const std::string& bytes) {
    int fds[2];
    EXPECT_EQ(::pipe(fds), 0);
    EXPECT_EQ(::write(fds[1], bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
    ::close(fds[1]);
    const auto env = become_rank(fds[0]);
    ::close(fds[0]);
    return env;
  };
  // become_rank replaces this process's environment: the other tests get theirs back.
  const Environment before = snapshot_environment(environ);
  struct Restore {
    const Environment& env;
    ~Restore() {
      ::clearenv();
      for (const auto& [key, value] : env) ::setenv(key.c_str(), value.c_str(), 1);
    }
  } restore{before};
  EXPECT_FALSE(given("").has_value());
  static const char kRank1[] =
      "RANK=1\0WORLD_SIZE=2\0MASTER_ADDR=n0\0MASTER_PORT=29500\0DDPRUN_TEST_SPARE=a=b\nc";
  const auto env = given(std::string(kRank1, sizeof kRank1));  // its own NUL ends the last
  ASSERT_TRUE(env.has_value());
  EXPECT_EQ(env->size(), 5u);
  EXPECT_EQ(env->at("DDPRUN_TEST_SPARE"), "a=b\nc");
  EXPECT_STREQ(std::getenv("DDPRUN_TEST_SPARE"), "a=b\nc");
  EXPECT_EQ(std::getenv("DDPRUN_SPARE"), nullptr);  // the whole environment is the rank's
  EXPECT_EQ(read_worker_env(*env).rank, 1);
  EXPECT_THROW(given(std::string("RANK=1", 6)), EnvError);   // no NUL at the end
  EXPECT_THROW(given(std::string("=1\0", 3)), EnvError);     // no name
  EXPECT_THROW(given(std::string("RANK1\0", 6)), EnvError);  // no '='
}

TEST(EnvTest, SnapshotSplitsAtTheFirstEquals) {
  char a[] = "A=b=c";
  char b[] = "EMPTY=";
  char* envp[] = {a, b, nullptr};
  const Environment env = ddprun::snapshot_environment(envp);
  EXPECT_EQ(env.at("A"), "b=c");
  EXPECT_EQ(env.at("EMPTY"), "");
}

TEST(InitMethodTest, EnvTcpAndFileUrlsOrOneClearError) {
  EXPECT_EQ(parse_init_method("").kind, InitMethod::Kind::kEnv);
  EXPECT_EQ(parse_init_method("env://").kind, InitMethod::Kind::kEnv);
  const InitMethod tcp = parse_init_method("tcp://head:29500");
  EXPECT_EQ(tcp.kind, InitMethod::Kind::kTcp);
  EXPECT_EQ(tcp.host, "head");
  EXPECT_EQ(tcp.port, 29500);
  const InitMethod v6 = parse_init_method("tcp://[fe80::1]:5");
  EXPECT_EQ(v6.host, "fe80::1");
  EXPECT_EQ(v6.port, 5);
  const InitMethod file = parse_init_method("file:///shared/run7/store");
  EXPECT_EQ(file.kind, InitMethod::Kind::kFile);
  EXPECT_EQ(file.path, "/shared/run7/store");
  for (const char* bad :
       {"file://relative", "file://", "file:///dir/", "tcp://head", "tcp://:1", "tcp://h:0",
        "tcp://h:65536", "tcp://fe80::1:5", "tcp://[::1]", "http://h:1", "env:/"}) {
    EXPECT_THROW(parse_init_method(bad), ddprun::ConfigError) << bad;
  }
}

}  // namespace
}  // namespace ddprun::worker
