#include "ddprun/common/files.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <system_error>

#include "ddprun/common/unique_fd.h"

namespace ddprun {
namespace {

[[noreturn]] void throw_errno(const std::string& call, const std::string& path) {
  throw std::system_error(errno, std::generic_category(), call + " " + path);
}

std::string mode_text(mode_t mode) {
  return std::to_string((mode >> 6) & 7) + std::to_string((mode >> 3) & 7) +
         std::to_string(mode & 7);
}

// Whether this user may remove what `info` describes at `path` (FolderCheck::removable).
bool may_remove(const std::string& path, const struct stat& info) {
  const uid_t me = ::geteuid();
  if (me == 0) return true;
  const std::string parent = std::filesystem::path(path).parent_path().string();
  struct stat above {};
  if (::stat(parent.empty() ? "." : parent.c_str(), &above) != 0 ||
      ::access(parent.empty() ? "." : parent.c_str(), W_OK | X_OK) != 0) {
    return false;
  }
  if ((above.st_mode & S_ISVTX) != 0 && above.st_uid != me && info.st_uid != me) return false;
  return !S_ISDIR(info.st_mode) || ::access(path.c_str(), W_OK | X_OK) == 0;
}

// Reads at most `max_bytes` of a regular file opened without following a link or waiting
// on a FIFO; with `own`, only a file of this user.
std::string read_head(const std::string& path, std::size_t max_bytes, bool own) {
  const UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
  struct stat info {};
  if (!fd.valid() || ::fstat(fd.get(), &info) != 0 || !S_ISREG(info.st_mode) ||
      (own && info.st_uid != ::geteuid())) {
    return {};
  }
  std::string text(max_bytes, '\0');
  std::size_t have = 0;
  while (have < max_bytes) {
    const ssize_t got = ::read(fd.get(), text.data() + have, max_bytes - have);
    if (got > 0) {
      have += static_cast<std::size_t>(got);
    } else if (got == 0 || errno != EINTR) {
      break;
    }
  }
  text.resize(have);
  return text;
}

}  // namespace

FolderCheck check_private_directory(const std::string& dir) {
  FolderCheck check;
  struct stat info {};
  if (::lstat(dir.c_str(), &info) != 0) {
    check.problem = "cannot read " + dir + ": " + std::generic_category().message(errno);
    return check;
  }
  check.owner = info.st_uid;
  check.removable = may_remove(dir, info);
  if (S_ISLNK(info.st_mode)) {
    check.problem = dir + " is a link, not a folder";
  } else if (!S_ISDIR(info.st_mode)) {
    check.problem = dir + " is not a folder";
  } else if (info.st_uid != ::geteuid()) {
    check.problem = dir + " belongs to user id " + std::to_string(info.st_uid) + ", not to you";
  } else if ((info.st_mode & 077) != 0) {
    check.problem = dir + " is open to other users (mode " + mode_text(info.st_mode) + ")";
    check.only_mode = true;
  }
  return check;
}

FolderCheck make_private_directory(const std::string& dir) {
  const std::string parent = std::filesystem::path(dir).parent_path().string();
  if (!parent.empty()) make_directories(parent);
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) throw_errno("mkdir", dir);
  return check_private_directory(dir);
}

std::string make_temp_directory(const std::string& prefix) {
  std::string pattern = prefix + "XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) throw_errno("mkdtemp", pattern);
  return pattern;
}

UniqueFd open_own_file_for_append(const std::string& path) {
  UniqueFd fd(::open(path.c_str(),
                     O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0600));
  if (!fd.valid()) throw_errno("open", path);
  struct stat info {};
  if (::fstat(fd.get(), &info) != 0) throw_errno("fstat", path);
  if (!S_ISREG(info.st_mode) || info.st_uid != ::geteuid()) {
    throw std::system_error(EPERM, std::generic_category(),
                            "open " + path + " (not a regular file of yours)");
  }
  const int flags = ::fcntl(fd.get(), F_GETFL);
  if (flags < 0 || ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK) != 0) {
    throw_errno("fcntl", path);
  }
  return fd;
}

void make_directories(const std::string& dir, unsigned mode) {
  std::filesystem::path partial;
  for (const auto& part : std::filesystem::path(dir)) {
    partial /= part;
    if (::mkdir(partial.c_str(), static_cast<mode_t>(mode)) == 0) {
      if (::chmod(partial.c_str(), static_cast<mode_t>(mode)) != 0) {
        throw_errno("chmod", partial.string());
      }
    } else if (errno != EEXIST) {
      throw_errno("mkdir", partial.string());
    }
  }
  struct stat info {};
  if (::stat(dir.c_str(), &info) != 0) throw_errno("stat", dir);
  if (!S_ISDIR(info.st_mode)) {
    throw std::system_error(ENOTDIR, std::generic_category(), "mkdir " + dir);
  }
}

void write_new_file(const std::string& path, const std::string& text) {
  const UniqueFd fd(
      ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd.valid()) throw_errno("open", path);
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t put = ::write(fd.get(), text.data() + done, text.size() - done);
    if (put > 0) {
      done += static_cast<std::size_t>(put);
    } else if (put < 0 && errno != EINTR) {
      throw_errno("write", path);
    }
  }
}

void replace_file(const std::string& path, const std::string& text) {
  const std::filesystem::path target(path);
  const std::string folder = target.has_parent_path() ? target.parent_path().string() : ".";
  std::string temporary = folder + "/." + target.filename().string() + ".XXXXXX";
  UniqueFd fd(::mkostemp(temporary.data(), O_CLOEXEC));
  if (!fd.valid()) throw_errno("open", temporary);
  try {
    if (!write_all(fd.get(), text)) throw_errno("write", temporary);
    if (::fsync(fd.get()) != 0) throw_errno("fsync", temporary);
    fd.close_or_throw(temporary);
    if (::rename(temporary.c_str(), path.c_str()) != 0) throw_errno("rename", path);
  } catch (...) {
    ::unlink(temporary.c_str());
    throw;
  }
  // The rename itself reaches the disk with the folder's own flush; a folder that cannot
  // be opened or flushed (some network file systems) still has the whole new file.
  const UniqueFd dir(::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir.valid()) ::fsync(dir.get());
}

std::string read_file(const std::string& path) {
  const UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) throw_errno("open", path);
  std::string text;
  char buffer[64 * 1024];
  for (;;) {
    const ssize_t got = ::read(fd.get(), buffer, sizeof buffer);
    if (got > 0) {
      text.append(buffer, static_cast<std::size_t>(got));
    } else if (got == 0) {
      return text;
    } else if (errno != EINTR) {
      throw_errno("read", path);
    }
  }
}

std::string read_file_head(const std::string& path, std::size_t max_bytes) {
  return read_head(path, max_bytes, /*own=*/true);
}

std::string read_any_file_head(const std::string& path, std::size_t max_bytes) {
  return read_head(path, max_bytes, /*own=*/false);
}

}  // namespace ddprun
