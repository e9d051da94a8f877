#pragma once
// Runs the built ddprun as a real child process for integration tests: start it with
// arguments and extra environment, read its output as it comes, signal it, and wait for
// it with a bound. Paths come from compile definitions DDPRUN_BIN and TEST_CHILD_BIN.

#include <sys/types.h>

#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "temp_dir.h"
#include "unavailable.h"

namespace ddprun::testing {

struct Finished {
  int exit_code = -1;  // 128 + signal when killed
  std::string out;
  std::string err;
};

class Launched {
 public:
  // Starts ddprun with `args`; `extra_env` entries ("KEY=VALUE") are added to the
  // environment, each replacing an inherited variable of its name. With `ready_pipe`, a pipe's
  // write end is passed down as $TEST_READY_FD.
  Launched(const std::vector<std::string>& args, const std::vector<std::string>& extra_env = {},
           bool ready_pipe = false);
  ~Launched();
  Launched(const Launched&) = delete;
  Launched& operator=(const Launched&) = delete;

  pid_t pid() const { return pid_; }
  // Reads "ready" lines ("RANK PID GRANDCHILD_PID") until `count` arrived; fails the test
  // on timeout. Returns every pid named (workers and grandchildren).
  std::vector<pid_t> wait_ready(int count, std::chrono::seconds timeout = std::chrono::seconds(20));
  // Reads stdout until `predicate(out_so_far)` holds; fails the test on timeout.
  void wait_stdout(const std::function<bool(const std::string&)>& predicate,
                   std::chrono::seconds timeout = std::chrono::seconds(20));
  // The pid of `rank`'s worker, from the ready lines.
  pid_t worker_pid(int rank) const;
  void signal(int sig);
  // Drains output and reaps ddprun; SIGKILLs it and fails the test after `timeout`.
  Finished finish(std::chrono::seconds timeout = std::chrono::seconds(60));

 private:
  bool pump(int timeout_ms);
  pid_t pid_ = -1;
  int out_fd_ = -1;
  int err_fd_ = -1;
  int ready_fd_ = -1;
  std::string out_;
  std::string err_;
  std::string ready_;
};

// Runs ddprun to completion.
Finished run_ddprun(const std::vector<std::string>& args,
                    const std::vector<std::string>& extra_env = {});

// Waits until every pid in `pids` has exited (pidfd), up to `timeout`. Returns the pids
// still alive.
std::vector<pid_t> wait_all_gone(const std::vector<pid_t>& pids, std::chrono::milliseconds timeout);

std::vector<std::string> split_lines(const std::string& text);

// `ddprun_args -- test_child child_args...`
std::vector<std::string> with_child(std::vector<std::string> ddprun_args,
                                    const std::vector<std::string>& child_args);

// Each rank's variables, from lines tagged "[host:R] KEY=VALUE" (ddprun's prefixes).
std::map<int, std::map<std::string, std::string>> env_by_rank(const std::string& out);
using support::TempDir;
using support::unavailable;

std::string child_bin();
std::string ddprun_bin();

}  // namespace ddprun::testing
