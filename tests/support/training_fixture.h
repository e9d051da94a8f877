#pragma once
// The training tests' shared fixture: a folder of the test's own (kept when the test fails,
// for its logs, checkpoints and parameters), and the files they read back: JSON, text, and
// the largest difference between two `--final-params` files.

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace ddprun::support {

class TrainingFolder : public ::testing::Test {
 protected:
  void SetUp() override {
    // One folder: a parameterized test's name ("Name/Param") would nest two, and removing
    // the inner one left the outer behind in /tmp after every run.
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::replace(name.begin(), name.end(), '/', '-');
    dir_ = std::filesystem::temp_directory_path() /
           ("ddprun-train-" + std::to_string(::getpid()) + "-" + name);
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    if (!HasFailure()) std::filesystem::remove_all(dir_);
  }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  static nlohmann::json read_json(const std::string& file) {
    std::ifstream in(file);
    return nlohmann::json::parse(in);
  }

  static std::string read_text(const std::string& file) {
    std::ifstream in(file);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

  // Largest absolute difference between two final-parameter files; -1 if they differ in
  // names or shapes.
  static double max_abs_diff(const nlohmann::json& a, const nlohmann::json& b) {
    double worst = 0;
    for (const auto& [name, pa] : a["params"].items()) {
      if (!b["params"].contains(name)) return -1;
      const auto& pb = b["params"][name];
      if (pa["shape"] != pb["shape"]) return -1;
      const auto va = pa["values"].get<std::vector<double>>();
      const auto vb = pb["values"].get<std::vector<double>>();
      for (std::size_t i = 0; i < va.size(); ++i) worst = std::max(worst, std::abs(va[i] - vb[i]));
    }
    return worst;
  }

  std::filesystem::path dir_;
};

}  // namespace ddprun::support
