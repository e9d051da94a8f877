#pragma once
// A test that cannot run here (a tool, a privilege missing) must never pass: under CI=true
// it fails, elsewhere it is a reported skip.

#include <gtest/gtest.h>

#include <cstdlib>
#include <iostream>
#include <string>

namespace ddprun::support {

inline bool running_in_ci() {
  const char* value = std::getenv("CI");
  return value != nullptr && std::string(value) == "true";
}

// When `lacking`, records the failure (CI) or prints why, and returns true: the caller
// then calls GTEST_SKIP(), which reports a skip, or a failure when one was recorded.
// `what` says what is missing, e.g. "eu-stack is not installed".
inline bool unavailable(bool lacking, const std::string& what) {
  if (!lacking) return false;
  if (running_in_ci()) {
    ADD_FAILURE() << what << ", and CI=true";
  } else {
    std::cout << what << ": skipped\n";
  }
  return true;
}

}  // namespace ddprun::support
