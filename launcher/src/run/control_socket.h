#pragma once
// The control socket of a running job (control.h has what goes over it): the job's ddprun
// listens on a Unix socket in this user's private folder (0700, owned by the user, never
// a link) and answers only peers of its own user id (SO_PEERCRED); `ddprun --status`
// and the other requests connect to it.

#include <sys/types.h>

#include <optional>
#include <ostream>
#include <string>

#include "ddprun/common/unique_fd.h"
#include "ddprun/contract/environment.h"
#include "report/control.h"

namespace ddprun {

// One accepted request from a peer of this user.
struct ControlRequest {
  UniqueFd connection;
  ControlVerb verb = ControlVerb::kStatus;
};

class ControlServer {
 public:
  // Listens on `folder`/`name` (control_socket_name); with `latest`, the folder's "latest"
  // link names it. A live socket of the same name (another job of the same run id on this
  // host) is left alone: this one then serves nothing (fd() < 0) and `problem()` says why.
  // Throws Error when the folder is not private.
  ControlServer(const std::string& folder, const std::string& name, bool latest);
  // Removes the socket, and the link when it still names it (remove_files).
  ~ControlServer();
  // Removes the socket, the "latest" link when it still names it, and the folder when
  // nothing else is left in it; what is gone already is no error. Also for ddprun's
  // guardian, when ddprun is killed (process.h).
  void remove_files() const noexcept;
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  int fd() const noexcept { return listening_.get(); }
  const std::string& path() const noexcept { return path_; }
  const std::string& problem() const noexcept { return problem_; }
  // Takes one waiting connection. A peer of another user is told it is refused and closed;
  // its request is never acted on. The request line is read within a second (a peer that sends
  // nothing is dropped). nullopt when there is none to serve.
  std::optional<ControlRequest> accept();

 private:
  std::string folder_;
  std::string name_;
  std::string path_;
  std::string problem_;
  bool latest_ = false;
  UniqueFd listening_;
};

// Writes all of `text` to a control connection (a peer that takes nothing for a second is
// dropped). Returns false when it could not.
bool send_text(int connection, std::string_view text);

// `ddprun --status|--stacks|--stop|--attach [RUN_ID]`: asks the job's ddprun on this host
// (the latest run when `run_id` is empty) and copies the answer to `out`; errors go to
// `err`. With kAttach, follows the job's console until the job ends and returns its exit
// code. Otherwise 0, or 1 when no job answered.
int run_control_client(ControlVerb verb, const std::string& run_id, const Environment& env,
                       std::ostream& out, std::ostream& err);

}  // namespace ddprun
