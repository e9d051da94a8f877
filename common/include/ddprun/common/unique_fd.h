#pragma once
// Owning file descriptors and writing to them.

#include <string>
#include <string_view>

namespace ddprun {

// Owns one file descriptor; closes it on destruction.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) noexcept : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  int get() const noexcept { return fd_; }
  bool valid() const noexcept { return fd_ >= 0; }
  int release() noexcept;
  // Closes now, ignoring errors (the descriptor is gone even on EINTR: never retried).
  void reset() noexcept;
  // Closes now and throws std::system_error("close " + what) when close reports an
  // error (e.g. a deferred write error on a network file system).
  void close_or_throw(const std::string& what);

 private:
  int fd_ = -1;
};

// Writes all of `data` to `fd`, retrying on EINTR and short writes; on EAGAIN (a
// non-blocking descriptor) waits until it drains. Returns false when a write failed (errno
// says why; EPIPE: the reader is gone).
bool write_all(int fd, std::string_view data) noexcept;

}  // namespace ddprun
