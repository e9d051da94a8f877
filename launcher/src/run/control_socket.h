#pragma once
// The control socket of a running job (control.h has what goes over it): the job's ddprun
// listens on a Unix socket in this user's private folder (0700, owned by the user, never
// a link) and answers only peers of its own user id (SO_PEERCRED); `ddprun --status`
// and the other requests connect to it.

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

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
  // A connection has `request_within` to send its request line.
  ControlServer(const std::string& folder, const std::string& name, bool latest,
                std::chrono::milliseconds request_within = std::chrono::seconds(1));
  // Removes the socket, and the link when it still names it (remove_files).
  ~ControlServer();
  // Removes the socket, the "latest" link when it still names it, and the folder when
  // nothing else is left in it; what is gone already is no error. Also for ddprun's
  // guardian, when ddprun is killed (process.h).
  void remove_files() const noexcept;
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  // Readable when a connection waits or one of those taken has sent something: an epoll
  // descriptor over the listening socket and the connections whose line is not whole yet.
  int fd() const noexcept { return ready_.get(); }
  const std::string& path() const noexcept { return path_; }
  const std::string& problem() const noexcept { return problem_; }
  // Takes the waiting connections and reads what they sent, without blocking: a peer that
  // sends its line slowly, or nothing, never holds the caller's loop. Returns the first whole
  // request of this user's peers (call again while fd() is readable for the next). A peer
  // of another user is told it is refused and closed; its request is never acted on. A
  // connection whose line is not whole within `request_within` is closed at the next call,
  // and at most kMaxPending wait at once (the oldest is let go for a new one). nullopt when
  // there is none to serve.
  std::optional<ControlRequest> accept();
  static constexpr std::size_t kMaxPending = 16;

 private:
  std::string folder_;
  std::string name_;
  std::string path_;
  std::string problem_;
  bool latest_ = false;
  UniqueFd listening_;
  // A connection taken whose request line is not whole yet.
  struct Pending {
    UniqueFd connection;
    std::optional<uid_t> uid;  // the peer's (SO_PEERCRED); none: unknown, refused
    std::string line;
    std::chrono::steady_clock::time_point deadline;
  };
  std::chrono::milliseconds request_within_;
  UniqueFd ready_;  // epoll over listening_ and pending_
  std::vector<Pending> pending_;
  bool watch(int fd);  // adds `fd` to ready_, readable
  void take_new_connections();
  // Reads what `pending` sent; true once its line is whole (or it closed or filled it).
  static bool read_some(Pending& pending);
  std::optional<ControlRequest> finish(Pending pending);
  // The first connection whose line is now whole (or that closed), off the list and epoll.
  std::optional<Pending> take_whole();
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
