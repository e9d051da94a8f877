#include "ddprun/worker/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <system_error>

namespace ddprun::worker {
namespace {

[[noreturn]] void throw_errno(const std::string& call, const std::string& path) {
  throw std::system_error(errno, std::generic_category(), call + " " + path);
}

// Owns a file descriptor; closes it once.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  // Closes now so that a failing close (e.g. deferred write error) is reported.
  void close(const std::string& path) {
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) throw_errno("close", path);
  }

 private:
  int fd_;
};

void fsync_path(const std::string& path, int flags) {
  Fd fd(::open(path.c_str(), flags | O_CLOEXEC));
  if (fd.get() < 0) throw_errno("open", path);
  if (::fsync(fd.get()) != 0) throw_errno("fsync", path);
}

}  // namespace

void write_file_atomically(const std::string& dir, const std::string& name, std::string_view bytes,
                           unsigned mode) {
  const std::string target = dir + "/" + name;
  // The temporary name is unique per writer so concurrent writers never share a file.
  std::random_device rd;
  const std::string tmp =
      dir + "/." + name + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(rd());
  {
    Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode));
    if (fd.get() < 0) throw_errno("open", tmp);
    try {
      // The umask must not widen or narrow what the caller asked for.
      if (::fchmod(fd.get(), mode) != 0) throw_errno("fchmod", tmp);
      const char* p = bytes.data();
      std::size_t left = bytes.size();
      while (left > 0) {
        const ssize_t n = ::write(fd.get(), p, left);
        if (n < 0) {
          if (errno == EINTR) continue;
          throw_errno("write", tmp);
        }
        p += n;
        left -= static_cast<std::size_t>(n);
      }
      if (::fsync(fd.get()) != 0) throw_errno("fsync", tmp);
      fd.close(tmp);
      if (::rename(tmp.c_str(), target.c_str()) != 0) throw_errno("rename", target);
    } catch (...) {
      ::unlink(tmp.c_str());
      throw;
    }
  }
  fsync_path(dir, O_RDONLY | O_DIRECTORY);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::system_error(errno, std::generic_category(), "open " + path);
  std::ostringstream out;
  out << in.rdbuf();
  if (in.bad()) throw std::system_error(EIO, std::generic_category(), "read " + path);
  return out.str();
}

void make_directories(const std::string& dir, unsigned mode) {
  std::filesystem::path partial;
  for (const auto& part : std::filesystem::path(dir)) {
    partial /= part;
    if (::mkdir(partial.c_str(), static_cast<mode_t>(mode)) != 0 && errno != EEXIST) {
      throw_errno("mkdir", partial.string());
    }
  }
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) throw_errno("stat", dir);
  if (!S_ISDIR(st.st_mode)) {
    throw std::system_error(ENOTDIR, std::generic_category(), "mkdir " + dir);
  }
}

}  // namespace ddprun::worker
