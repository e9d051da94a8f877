#include "ddprun/common/files.h"

#include <fcntl.h>
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

}  // namespace

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
  const UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
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
  const UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return {};
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

}  // namespace ddprun
