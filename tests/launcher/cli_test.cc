#include <gtest/gtest.h>

#include "ddprun/contract/errors.h"
#include "ddprun/contract/version.h"
#include "options.h"

namespace ddprun {
namespace {

CommandLine parse(std::vector<const char*> args) {
  args.insert(args.begin(), "ddprun");
  return parse_command_line(static_cast<int>(args.size()), args.data());
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
  EXPECT_EQ(result.options->run_id, "job1");
}

TEST(CommandLine, LogDirWithTeeAndFormat) {
  const auto result =
      parse({"--log-dir", "/tmp/l", "--tee", "2", "--dry-run", "--format", "json", "w"});
  ASSERT_TRUE(result.options) << result.message;
  EXPECT_EQ(result.options->log_dir, "/tmp/l");
  EXPECT_EQ(result.options->tee, 2);
  EXPECT_TRUE(result.options->dry_run);
  EXPECT_EQ(result.options->format, PlanFormat::kJson);
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

TEST(CommandLine, BadValuesAreOneLineErrors) {
  for (const auto& args :
       std::vector<std::vector<const char*>>{{"--nproc-per-node", "-3", "w"},
                                             {"--master-port", "0", "w"},
                                             {"--master-port", "65536", "w"},
                                             {"--shutdown-timeout", "nan", "w"},
                                             {"--tee", "4", "--log-dir", "d", "w"},
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

}  // namespace
}  // namespace ddprun
