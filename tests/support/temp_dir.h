#pragma once
// The tests' one temporary folder: fresh under $TMPDIR (or /tmp), removed with everything
// in it when the test is done.

#include <stdlib.h>

#include <filesystem>
#include <stdexcept>
#include <string>

namespace ddprun::support {

class TempDir {
 public:
  TempDir() {
    std::string pattern = std::filesystem::temp_directory_path().string() + "/ddprun-test-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp " + pattern);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace ddprun::support
