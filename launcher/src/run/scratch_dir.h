#pragma once
// ddprun's private folders: the one for the workers' error files when the user gave no
// --log-dir, the default log folder, and the check every folder ddprun writes in passes
// (docs/fault-tolerance.md#files-in-shared-folders).

#include <string>

namespace ddprun {

// Creates `folder` (0700) when missing and checks that it is a folder, not a link, owned by
// this user and closed to everyone else. Throws Error saying which does not hold, with a
// hint that is true for this user (remove it only where it may; else `elsewhere`, e.g.
// "set TMPDIR to a folder of your own").
void make_private_folder(const std::string& folder, const std::string& elsewhere);

// Where --redirects and --tee put the logs when the user named no --log-dir:
// "TMPDIR/ddprun-logs-RUNID", as torchrun's users expect, when it is new or already a
// private folder of this user (another ddprun of the run on this host made it); otherwise
// a fresh "TMPDIR/ddprun-logs-RUNID-XXXXXX" (mkdtemp), and `note` says why in one line.
// Throws std::system_error when neither can be made.
struct LogFolder {
  std::string path;
  std::string note;  // empty, or "ddprun: warning: ...\n"
};
LogFolder default_log_folder(const std::string& tmpdir, const std::string& run_id);

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
