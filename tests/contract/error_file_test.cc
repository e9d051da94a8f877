#include "ddprun/contract/error_file.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace ddprun {
namespace {

TEST(ErrorFile, WhatTheWorkerWritesTheLauncherReadsBack) {
  const ErrorReport written{"CollectiveError: rank 3 did not answer", "#0 train()\n#1 main()"};
  const auto read = parse_error_file(format_error_file(written, 1763800000));
  ASSERT_TRUE(read.has_value());
  EXPECT_EQ(read->message, written.message);
  EXPECT_EQ(read->callstack, written.callstack);
}

TEST(ErrorFile, IsTorchelasticsFormat) {
  const auto j = nlohmann::json::parse(format_error_file({"boom", "trace"}, 1763800000));
  EXPECT_EQ(j["message"]["message"], "boom");
  EXPECT_EQ(j["message"]["extraInfo"]["py_callstack"], "trace");
  EXPECT_EQ(j["message"]["extraInfo"]["timestamp"], "1763800000");
}

TEST(ErrorFile, InvalidUtf8StillGivesValidJson) {
  const auto read = parse_error_file(format_error_file({"bad \xff byte", ""}, 1));
  ASSERT_TRUE(read.has_value());
  EXPECT_NE(read->message.find("bad "), std::string::npos);
}

TEST(ErrorFile, TheShortFormAndJunkAreReadAsTorchelasticReadsThem) {
  EXPECT_EQ(parse_error_file(R"({"message": "plain"})")->message, "plain");
  EXPECT_FALSE(parse_error_file("").has_value());
  EXPECT_FALSE(parse_error_file("not json").has_value());
  EXPECT_FALSE(parse_error_file(R"({"message": {"message": ""}})").has_value());
  EXPECT_FALSE(parse_error_file(R"({"message": 3})").has_value());
  EXPECT_FALSE(parse_error_file(R"(["message"])").has_value());
}

}  // namespace
}  // namespace ddprun
