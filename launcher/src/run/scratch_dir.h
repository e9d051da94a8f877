#pragma once
// A private folder for the workers' error files when the user gave no --log-dir.

#include <string>

namespace ddprun {

// Creates "$TMPDIR/ddprun-RUNID-XXXXXX" (mkdtemp, mode 0700) and removes it with its
// content on destruction. Throws std::system_error naming the pattern.
class ScratchDir {
 public:
  ScratchDir(const std::string& tmpdir, const std::string& run_id);
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace ddprun
