// The launchers' secret (rendezvous_secret.h): DDPRUN_RDZV_TOKEN first; else the token file
// node 0 makes, private, which the other nodes read and never through a link; whatever
// stands in the way is one warning, and no secret. Also where node 0 listens.
#include "nodes/rendezvous_secret.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "job/rendezvous_job.h"
#include "temp_dir.h"

namespace ddprun {
namespace {

using support::TempDir;

constexpr const char* kNoSecret =
    "ddprun: warning: the launchers' rendezvous has no shared secret: ";

unsigned mode_of(const std::string& path) {
  struct stat info {};
  EXPECT_EQ(::lstat(path.c_str(), &info), 0) << path;
  return info.st_mode & 07777;
}

TEST(RendezvousSecret, Node0MakesAPrivateTokenFileThatTheOtherNodesRead) {
  const TempDir home;
  const Environment env{{"HOME", home.path()}};
  const std::string folder = home.path() + "/.ddprun";
  const std::string file = folder + "/rdzv-token";
  // A node that comes first finds none, and says so once.
  const RendezvousSecret early = rendezvous_secret(env, false);
  EXPECT_EQ(early.secret, "");
  EXPECT_EQ(early.warning.rfind(kNoSecret, 0), 0u) << early.warning;
  EXPECT_NE(early.warning.find(file + " does not exist (node 0's ddprun creates it"),
            std::string::npos)
      << early.warning;
  EXPECT_FALSE(std::filesystem::exists(folder));  // only node 0 makes it
  const RendezvousSecret made = rendezvous_secret(env, true);
  EXPECT_EQ(made.warning, "");
  EXPECT_EQ(made.source, file);
  ASSERT_EQ(made.secret.size(), 64u);
  EXPECT_EQ(made.secret.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_EQ(mode_of(folder), 0700u);
  EXPECT_EQ(mode_of(file), 0600u);
  const auto entries = std::distance(std::filesystem::directory_iterator(folder),
                                     std::filesystem::directory_iterator());
  EXPECT_EQ(entries, 1);  // no draft left beside it
  EXPECT_EQ(rendezvous_secret(env, false).secret, made.secret);
  EXPECT_EQ(rendezvous_secret(env, true).secret, made.secret);  // kept, not made again
  // The variable wins, on every node.
  Environment with_token = env;
  with_token["DDPRUN_RDZV_TOKEN"] = "tok";
  const RendezvousSecret token = rendezvous_secret(with_token, true);
  EXPECT_EQ(token.secret, "tok");
  EXPECT_EQ(token.source, "DDPRUN_RDZV_TOKEN");
  EXPECT_EQ(token.warning, "");
}

TEST(RendezvousSecret, ALinkAFileOthersMayReadAnOpenFolderOrNoHomeIsNoSecretAndAWarning) {
  const TempDir home;
  const Environment env{{"HOME", home.path()}};
  const std::string folder = home.path() + "/.ddprun";
  const std::string file = folder + "/rdzv-token";
  ASSERT_EQ(rendezvous_secret(env, true).warning, "");
  const auto refused = [&](const std::string& why) {
    for (const bool create : {false, true}) {
      const RendezvousSecret got = rendezvous_secret(env, create);
      EXPECT_EQ(got.secret, "") << why;
      EXPECT_EQ(got.warning.rfind(kNoSecret, 0), 0u) << got.warning;
      EXPECT_NE(got.warning.find(why), std::string::npos) << got.warning;
    }
  };
  ASSERT_EQ(::chmod(file.c_str(), 0640), 0);
  refused("may be read by others");
  ASSERT_EQ(::chmod(file.c_str(), 0600), 0);
  ASSERT_EQ(::rename(file.c_str(), (folder + "/elsewhere").c_str()), 0);
  ASSERT_EQ(::symlink((folder + "/elsewhere").c_str(), file.c_str()), 0);
  refused("is not a regular file");
  ASSERT_EQ(::unlink(file.c_str()), 0);
  { std::ofstream(file) << " \n"; }
  ASSERT_EQ(::chmod(file.c_str(), 0600), 0);
  refused("is empty");
  ASSERT_EQ(::chmod(folder.c_str(), 0755), 0);
  refused("chmod 700 " + folder);
  const RendezvousSecret homeless = rendezvous_secret({}, true);
  EXPECT_EQ(homeless.secret, "");
  EXPECT_NE(homeless.warning.find("there is no home folder"), std::string::npos)
      << homeless.warning;
}

// Node 0 listens where the other nodes reach it, when that is an address of its own.
TEST(RendezvousAddress, TheMasterAddressWhenItIsOneOfThisHostsElseEveryInterface) {
  const std::vector<NetworkInterface> interfaces = {{"lo", "127.0.0.1", true},
                                                    {"eth0", "10.0.0.5", false},
                                                    {"ib0", "192.168.7.5", false},
                                                    {"eth0", "fe80::1", false}};
  EXPECT_EQ(rendezvous_address({"192.168.7.5"}, interfaces), "192.168.7.5");
  EXPECT_EQ(rendezvous_address({"fe80::1", "10.0.0.5"}, interfaces), "10.0.0.5");
  EXPECT_EQ(rendezvous_address({"10.0.0.9"}, interfaces), "");  // NAT, a balancer: not ours
  EXPECT_EQ(rendezvous_address({"fe80::1"}, interfaces), "");   // the listener is IPv4
  EXPECT_EQ(rendezvous_address({}, interfaces), "");
}

}  // namespace
}  // namespace ddprun
