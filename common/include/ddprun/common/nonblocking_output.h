#pragma once
// Writing to a descriptor this process shares with others (its stdout or stderr: the
// user's terminal, a pipe, a socket, a file) without ever waiting for the reader, and
// without leaving the shared open file description non-blocking: the shell and other
// programs writing to the same terminal or pipe keep their blocking writes, also when
// this process is killed.

#include <sys/types.h>

#include <string_view>

#include "ddprun/common/unique_fd.h"

namespace ddprun {

class NonBlockingOutput {
 public:
  enum class Method {
    // Regular files, block devices, /dev/null and other devices that are no terminal:
    // their writes never wait for a reader, so they are written as they are.
    kDirect,
    // Sockets: send() with MSG_DONTWAIT, which needs no file flag.
    kSend,
    // Pipes and terminals: a second open file description of the same pipe or terminal,
    // opened through /proc/self/fd with O_NONBLOCK (and O_NOCTTY); its flag is its own.
    kReopened,
    // Pipes and terminals that cannot be reopened (no /proc, no permission): O_NONBLOCK
    // is set on the shared description for the length of each write only.
    kFlagPerWrite,
  };

  // Chooses how to write to `fd`, which is not owned and must stay open as long as this
  // object. Never throws: a descriptor that cannot be inspected is written directly.
  explicit NonBlockingOutput(int fd) noexcept;
  NonBlockingOutput(NonBlockingOutput&&) noexcept = default;
  NonBlockingOutput& operator=(NonBlockingOutput&&) noexcept = default;

  // Writes a prefix of `data` without waiting, retrying on EINTR. Returns how many bytes
  // were written (0 when there is no room now), or -1 with errno set (EPIPE: the reader is
  // gone; SIGPIPE must be ignored or blocked by the caller). Not signal-safe.
  ssize_t write_some(std::string_view data) noexcept;
  // The descriptor to poll for POLLOUT.
  int poll_fd() const noexcept { return reopened_.valid() ? reopened_.get() : fd_; }
  Method method() const noexcept { return method_; }

  // Whether `a` and `b` lead to the same file, pipe, socket or terminal (so that writes to
  // one and to the other land in one stream).
  static bool same_target(int a, int b) noexcept;

 private:
  int fd_ = -1;
  UniqueFd reopened_;
  Method method_ = Method::kDirect;
};

}  // namespace ddprun
