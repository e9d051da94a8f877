#pragma once
// The tests' one way to start a program, ddprun above all, as a child: the environment it
// inherits with some variables replaced, and a fork and exec with its stdout and stderr on
// descriptors the test chose.

#include <sys/types.h>
#include <unistd.h>

#include <string>
#include <vector>

extern char** environ;

namespace ddprun::support {

// This process's environment with `extra` ("KEY=VALUE") added, each replacing an inherited
// variable of its name (PATH, say).
inline std::vector<std::string> environment_with(const std::vector<std::string>& extra) {
  std::vector<std::string> env;
  for (char** var = environ; *var != nullptr; ++var) env.emplace_back(*var);
  for (const auto& var : extra) {
    const std::string prefix = var.substr(0, var.find('=') + 1);
    std::erase_if(env, [&](const std::string& s) { return s.starts_with(prefix); });
    env.push_back(var);
  }
  return env;
}

// Starts `argv` (argv[0] a path) with `env`, stdout on `stdout_fd` and stderr on
// `stderr_fd` (dup2'd in the child, so they may be close-on-exec); returns its pid. A
// descriptor the child should keep must be made inheritable by the caller. Only dup2, execve
// and _exit run between fork and exec, as a multi-threaded test program needs.
inline pid_t spawn_child(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                         int stdout_fd, int stderr_fd) {
  std::vector<std::string> argv_strings = argv, env_strings = env;
  std::vector<char*> args, envp;
  for (auto& s : argv_strings) args.push_back(s.data());
  args.push_back(nullptr);
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(stdout_fd, 1);
    ::dup2(stderr_fd, 2);
    ::execve(args[0], args.data(), envp.data());
    ::_exit(127);
  }
  return pid;
}

// Starts `argv` as user and group 65534 (nobody) through setpriv, with no supplementary
// groups, in / (which nobody may enter), with `env`; otherwise as spawn_child. For tests
// that play another user: the caller checks first that it is root and that
// /usr/bin/setpriv is there (unavailable.h).
inline pid_t spawn_as_nobody(const std::vector<std::string>& argv,
                             const std::vector<std::string>& env, int stdout_fd, int stderr_fd) {
  std::vector<std::string> full = {
      "/usr/bin/env",  "-C", "/", "/usr/bin/setpriv", "--reuid=65534", "--regid=65534",
      "--clear-groups"};
  full.insert(full.end(), argv.begin(), argv.end());
  return spawn_child(full, env, stdout_fd, stderr_fd);
}

}  // namespace ddprun::support
