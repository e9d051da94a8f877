#include "plan/host_facts.h"

#include <dirent.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "ddprun/contract/errors.h"

namespace ddprun {

HostFacts read_host_facts() {
  HostFacts facts;
  char name[HOST_NAME_MAX + 1] = {};
  if (::gethostname(name, sizeof name - 1) == 0) facts.hostname = name;
  if (facts.hostname.empty()) facts.hostname = "localhost";
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  if (::sched_getaffinity(0, sizeof cpus, &cpus) == 0) {
    facts.cpu_count = CPU_COUNT(&cpus);
  } else {
    facts.cpu_count = static_cast<int>(std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN)));
  }
  if (DIR* dev = ::opendir("/dev")) {
    while (const dirent* entry = ::readdir(dev)) {
      const std::string_view name_view(entry->d_name);
      if (name_view.size() > 6 && name_view.substr(0, 6) == "nvidia" &&
          name_view.find_first_not_of("0123456789", 6) == std::string_view::npos) {
        ++facts.gpu_device_files;
      }
    }
    ::closedir(dev);
  }
  return facts;
}

namespace {

// 0 when `path` is an executable regular file, else the errno-like reason.
int check_executable(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) return errno;
  if (S_ISDIR(info.st_mode)) return EISDIR;
  if (::access(path.c_str(), X_OK) != 0) return errno;
  return 0;
}

}  // namespace

std::string resolve_program(const std::string& program, const Environment& env) {
  if (program.empty()) throw ProgramError("the program name is empty", kExitProgramNotFound);
  if (program.find('/') != std::string::npos) {
    const int problem = check_executable(program);
    if (problem == 0) return program;
    if (problem == ENOENT || problem == ENOTDIR) {
      throw ProgramError(program + ": no such file", kExitProgramNotFound,
                         "check the path, relative to " + std::string("the current directory"));
    }
    throw ProgramError(program + ": not executable (" + std::strerror(problem) + ")",
                       kExitProgramNotExecutable,
                       "chmod +x it, or launch it through its interpreter");
  }
  const std::string path = lookup(env, "PATH").value_or("/usr/local/bin:/usr/bin:/bin");
  int first_problem = 0;
  std::size_t start = 0;
  for (;;) {
    const auto colon = path.find(':', start);
    std::string dir = path.substr(start, colon == std::string::npos ? colon : colon - start);
    if (dir.empty()) dir = ".";
    const std::string candidate = dir + "/" + program;
    const int problem = check_executable(candidate);
    if (problem == 0) return candidate;
    if (problem != ENOENT && problem != ENOTDIR && first_problem == 0) first_problem = problem;
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  if (first_problem != 0) {
    throw ProgramError(program + ": found in PATH but not executable", kExitProgramNotExecutable);
  }
  throw ProgramError(program + ": command not found in PATH", kExitProgramNotFound,
                     "give its path, e.g. ./" + program);
}

std::string this_executable() {
  std::error_code error;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) throw std::system_error(error, "readlink /proc/self/exe");
  return self.string();
}

std::string current_directory() {
  return std::filesystem::current_path().string();
}

}  // namespace ddprun
