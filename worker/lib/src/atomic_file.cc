#include "ddprun/worker/atomic_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <random>
#include <system_error>

#include "ddprun/common/files.h"
#include "ddprun/common/unique_fd.h"

namespace ddprun::worker {
namespace {

[[noreturn]] void throw_errno(const std::string& call, const std::string& path) {
  const int error = errno;
  if (error == ELOOP) {
    throw std::system_error(error, std::generic_category(),
                            call + " " + path + ": is a symbolic link, which is never followed");
  }
  throw std::system_error(error, std::generic_category(), call + " " + path);
}

// The temporary name is unique per writer so concurrent writers never share a file.
std::string temporary_name(const std::string& name) {
  std::random_device rd;
  return "." + name + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(rd());
}

// Temporary file, fsync, hook, rename, fsync of the folder; all relative to `dir_fd`.
void write_at(int dir_fd, const std::string& dir, const std::string& name, std::string_view bytes,
              unsigned mode, const std::function<void(const std::string&)>& before_rename) {
  const std::string tmp_name = temporary_name(name);
  const std::string tmp = dir + "/" + tmp_name;
  UniqueFd fd(::openat(dir_fd, tmp_name.c_str(),
                       O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode));
  if (fd.get() < 0) throw_errno("open", tmp);
  try {
    // The umask must not widen or narrow what the caller asked for.
    if (::fchmod(fd.get(), mode) != 0) throw_errno("fchmod", tmp);
    if (!write_all(fd.get(), bytes)) throw_errno("write", tmp);
    if (::fsync(fd.get()) != 0) throw_errno("fsync", tmp);
    fd.close_or_throw(tmp);
    if (before_rename) before_rename(tmp_name);
    if (::renameat(dir_fd, tmp_name.c_str(), dir_fd, name.c_str()) != 0) {
      throw_errno("rename", dir + "/" + name);
    }
  } catch (...) {
    ::unlinkat(dir_fd, tmp_name.c_str(), 0);
    throw;
  }
  if (::fsync(dir_fd) != 0) throw_errno("fsync", dir);
}

}  // namespace

void write_file_atomically(const std::string& dir, const std::string& name, std::string_view bytes,
                           unsigned mode) {
  const UniqueFd dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir_fd.get() < 0) throw_errno("open", dir);
  write_at(dir_fd.get(), dir, name, bytes, mode, {});
}

SecureDir SecureDir::open(const std::string& path, bool create) {
  // Checked before creating, so that a link is refused rather than created through.
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
    errno = ELOOP;
    throw_errno("open", path);
  }
  if (create) make_directories(path, 0700);
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (fd.get() < 0) throw_errno("open", path);
  return SecureDir(fd.release(), path);
}

SecureDir::SecureDir(SecureDir&& other) noexcept : fd_(other.fd_), path_(std::move(other.path_)) {
  other.fd_ = -1;
}

SecureDir::~SecureDir() {
  if (fd_ >= 0) ::close(fd_);
}

void SecureDir::write_atomically(
    const std::string& name, std::string_view bytes, unsigned mode,
    const std::function<void(const std::string&)>& before_rename) const {
  write_at(fd_, path_, name, bytes, mode, before_rename);
}

std::optional<std::string> SecureDir::read(const std::string& name) const {
  const std::string path = path_ + "/" + name;
  const UniqueFd fd(::openat(fd_, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (fd.get() < 0) {
    if (errno == ENOENT) return std::nullopt;
    throw_errno("open", path);
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) throw_errno("fstat", path);
  if (!S_ISREG(st.st_mode)) {
    throw std::system_error(EINVAL, std::generic_category(), path + ": not a regular file");
  }
  std::string bytes;
  bytes.reserve(static_cast<std::size_t>(st.st_size));
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd.get(), buffer, sizeof buffer);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_errno("read", path);
    }
    if (n == 0) break;
    bytes.append(buffer, static_cast<std::size_t>(n));
  }
  return bytes;
}

std::vector<std::string> SecureDir::list() const {
  // fdopendir takes ownership of its descriptor: give it a duplicate.
  const int dup_fd = ::fcntl(fd_, F_DUPFD_CLOEXEC, 0);
  if (dup_fd < 0) throw_errno("dup", path_);
  DIR* d = ::fdopendir(dup_fd);
  if (d == nullptr) {
    ::close(dup_fd);
    throw_errno("opendir", path_);
  }
  ::rewinddir(d);
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(d);
  return names;
}

void SecureDir::remove(const std::string& name) const {
  if (::unlinkat(fd_, name.c_str(), 0) != 0 && errno != ENOENT) {
    throw_errno("unlink", path_ + "/" + name);
  }
}

}  // namespace ddprun::worker
