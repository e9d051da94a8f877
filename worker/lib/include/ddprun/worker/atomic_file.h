#pragma once
// Crash-safe file replacement. No LibTorch. (Reading files and creating folders:
// ddprun/common/files.h.)

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun::worker {

// Writes `bytes` to `dir/name` so that a reader sees the old file or the new one, never a
// partial one, even across a crash: a temporary file in `dir` (mode `mode`), fsync, rename
// over the target, fsync of `dir`. Throws std::system_error naming the call and the path.
void write_file_atomically(const std::string& dir, const std::string& name, std::string_view bytes,
                           unsigned mode = 0600);

// A directory held open by descriptor, never reached through a symbolic link at its last
// component, and whose files are never symbolic links either (O_NOFOLLOW): for checkpoints.
// Every operation is relative to the descriptor, so swapping the path for a link later
// changes nothing. Not thread-safe; owns the descriptor.
class SecureDir {
 public:
  // Opens `path`, first creating it (mode 0700, parents too) when `create`. Throws
  // std::system_error naming the path; errc ELOOP (message "... is a symbolic link") when
  // `path` is one.
  static SecureDir open(const std::string& path, bool create);

  SecureDir(SecureDir&& other) noexcept;
  SecureDir& operator=(SecureDir&&) = delete;
  SecureDir(const SecureDir&) = delete;
  ~SecureDir();

  const std::string& path() const { return path_; }

  // Like write_file_atomically: temporary ".NAME.tmp.PID.RANDOM" (mode `mode`), fsync,
  // then `before_rename(temporary name)` if given, rename over NAME, fsync of the folder.
  // The temporary file is removed when this throws.
  void write_atomically(const std::string& name, std::string_view bytes, unsigned mode,
                        const std::function<void(const std::string&)>& before_rename = {}) const;

  // The contents of NAME, or nullopt when it does not exist. Throws std::system_error
  // (ELOOP when NAME is a symbolic link).
  std::optional<std::string> read(const std::string& name) const;

  // Names of the entries (no "." and ".."), unsorted.
  std::vector<std::string> list() const;

  // Removes NAME if present (not a folder).
  void remove(const std::string& name) const;

 private:
  SecureDir(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_;
  std::string path_;
};

}  // namespace ddprun::worker
