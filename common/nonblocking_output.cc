#include "ddprun/common/nonblocking_output.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>

namespace ddprun {

NonBlockingOutput::NonBlockingOutput(int fd) noexcept : fd_(fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return;
  if (S_ISSOCK(st.st_mode)) {
    method_ = Method::kSend;
    return;
  }
  const bool is_terminal = S_ISCHR(st.st_mode) && ::isatty(fd) == 1;
  if (!S_ISFIFO(st.st_mode) && !is_terminal) return;
  // A new open file description: O_NONBLOCK on it changes nothing for the shell or the
  // other programs that share ours. Regular files are never reopened this way: a new
  // description would start at offset 0 and overwrite what the shell's offset is past.
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  const int reopened = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (reopened >= 0) {
    struct stat again {};
    if (::fstat(reopened, &again) == 0 && again.st_dev == st.st_dev && again.st_ino == st.st_ino) {
      reopened_ = UniqueFd(reopened);
      method_ = Method::kReopened;
      return;
    }
    ::close(reopened);
  }
  method_ = Method::kFlagPerWrite;
}

ssize_t NonBlockingOutput::write_some(std::string_view data) noexcept {
  if (data.empty()) return 0;
  for (;;) {
    ssize_t written = -1;
    switch (method_) {
      case Method::kDirect:
        written = ::write(fd_, data.data(), data.size());
        break;
      case Method::kSend:
        written = ::send(fd_, data.data(), data.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
        break;
      case Method::kReopened:
        written = ::write(reopened_.get(), data.data(), data.size());
        break;
      case Method::kFlagPerWrite: {
        // The shared description is non-blocking only for this one call; a program that
        // writes to the same pipe or terminal in this instant may see EAGAIN.
        const int flags = ::fcntl(fd_, F_GETFL);
        if (flags < 0) return -1;
        const bool set_here = (flags & O_NONBLOCK) == 0;
        if (set_here) ::fcntl(fd_, F_SETFL, flags | O_NONBLOCK);
        written = ::write(fd_, data.data(), data.size());
        const int saved = errno;
        if (set_here) ::fcntl(fd_, F_SETFL, flags);
        errno = saved;
        break;
      }
    }
    if (written >= 0) return written;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    return -1;
  }
}

bool NonBlockingOutput::same_target(int a, int b) noexcept {
  struct stat first {};
  struct stat second {};
  if (::fstat(a, &first) != 0 || ::fstat(b, &second) != 0) return false;
  return first.st_dev == second.st_dev && first.st_ino == second.st_ino;
}

}  // namespace ddprun
