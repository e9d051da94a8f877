#include "run/scratch_dir.h"

#include <unistd.h>

#include <filesystem>
#include <system_error>

#include "ddprun/common/files.h"
#include "ddprun/contract/errors.h"

namespace ddprun {

void make_private_folder(const std::string& folder, const std::string& elsewhere) {
  FolderCheck check;
  try {
    check = make_private_directory(folder);
  } catch (const std::system_error& e) {
    throw Error("cannot create " + folder + ": " + e.code().message(), elsewhere);
  }
  if (check.ok()) return;
  if (check.only_mode) throw Error(check.problem, "chmod 700 " + folder + ", or " + elsewhere);
  if (check.removable) throw Error(check.problem, "remove it, or " + elsewhere);
  throw Error(check.problem,
              "you cannot remove it: ask " +
                  (check.owner == 0 ? std::string("root")
                                    : "user id " + std::to_string(check.owner) + " or root") +
                  " to, or " + elsewhere);
}

LogFolder default_log_folder(const std::string& tmpdir, const std::string& run_id) {
  const std::string usual = tmpdir + "/ddprun-logs-" + run_id;
  const FolderCheck check = make_private_directory(usual);
  if (check.ok()) return {usual, {}};
  const std::string fresh = make_temp_directory(usual + "-");
  return {fresh, "ddprun: warning: " + check.problem + "; the logs go to " + fresh + "\n"};
}

ScratchDir::ScratchDir(const std::string& tmpdir, const std::string& run_id)
    : path_(make_temp_directory(tmpdir + "/ddprun-" + run_id + "-")) {}

ScratchDir::~ScratchDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

}  // namespace ddprun
