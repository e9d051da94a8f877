// An exception thrown where no catch reaches it (a library's own thread) ends the worker as
// main()'s catch would: one error line, the error file, exit 1; a terminate without one
// still aborts.
#include "ddprun/worker/errors.h"

#include <gtest/gtest.h>

#include <csignal>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>

namespace ddprun::worker {
namespace {

TEST(ErrorsTest, AnExceptionOnALibrarysOwnThreadIsOneErrorLineTheErrorFileAndExit1) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // One name for the test and the child that re-runs it (threadsafe death tests re-execute).
  const std::string error_file = ::testing::TempDir() + "/ddprun_uncaught_error_test.json";
  std::remove(error_file.c_str());
  EXPECT_EXIT(
      {
        end_uncaught_exceptions_as_errors("ddp-train", error_file);
        std::thread([] {
          throw std::runtime_error(
              "[enforce fail at gloo/transport/tcp/address.cc:108] getpeername: Transport "
              "endpoint is not connected\nsecond line");
        }).join();
      },
      ::testing::ExitedWithCode(1),
      "ddp-train: error: \\[enforce fail at gloo/transport/tcp/address.cc:108\\] getpeername");
  std::ifstream file(error_file);
  std::stringstream text;
  text << file.rdbuf();
  EXPECT_NE(text.str().find("getpeername: Transport endpoint is not connected"), std::string::npos)
      << text.str();
  std::remove(error_file.c_str());
}

TEST(ErrorsTest, ATerminateWithoutAnExceptionStillAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        end_uncaught_exceptions_as_errors("ddp-train", "");
        std::terminate();
      },
      ::testing::KilledBySignal(SIGABRT), "");
}

}  // namespace
}  // namespace ddprun::worker
