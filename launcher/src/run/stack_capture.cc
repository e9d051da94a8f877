#include "run/stack_capture.h"

#include <poll.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstring>
#include <optional>

#include "ddprun/common/files.h"
#include "ddprun/common/unique_fd.h"
#include "run/child_set.h"

extern char** environ;

namespace ddprun {
namespace {

constexpr const char* kArmedMarker = "ddprun-python-stacks ";

struct ArmedDump {
  std::size_t target = 0;
  std::string file;
  off_t size_before = 0;
};

off_t file_size(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 ? info.st_size : 0;
}

// The state letter of /proc/PID/stat ('T': stopped), or 0 when it cannot be read.
char process_state(pid_t pid) {
  const std::string stat = read_any_file_head("/proc/" + std::to_string(pid) + "/stat", 512);
  const auto paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() ? stat[paren + 2] : 0;
}

// Sends faulthandler's signal to each armed Python process in `targets`; returns those
// that will dump, and notes in `captures` why the others will not.
std::vector<ArmedDump> ask_python_dumps(const std::vector<StackTarget>& targets,
                                        std::vector<StackCapture>& captures) {
  std::vector<ArmedDump> armed;
  for (std::size_t i = 0; i < targets.size(); ++i) {
    const StackTarget& target = targets[i];
    if (target.python_dump_file.empty()) continue;
    const std::string head = read_file_head(target.python_dump_file, 256);
    if (head.rfind(kArmedMarker, 0) != 0) continue;  // not a Python worker, or run with -I/-S
    int pid = 0;
    int sig = 0;
    if (std::sscanf(head.c_str() + std::char_traits<char>::length(kArmedMarker), "pid=%d signal=%d",
                    &pid, &sig) != 2 ||
        pid <= 0 || sig <= 0) {
      continue;
    }
    // The interpreter must still be this worker's: its process group is the worker's.
    if (::getpgid(pid) != target.pid) {
      captures[i].problem =
          "the Python process that armed the dump (pid " + std::to_string(pid) + ") has ended";
      continue;
    }
    if (process_state(pid) == 'T') {
      captures[i].problem =
          "pid " + std::to_string(pid) + " is stopped (SIGSTOP or a debugger): no Python frames";
      continue;
    }
    armed.push_back({i, target.python_dump_file, file_size(target.python_dump_file)});
    ::kill(pid, sig);
  }
  return armed;
}

// Waits until every dump has grown and then stayed unchanged for a moment (faulthandler
// writes the whole dump at once from its signal handler), or until `limit`.
void wait_for_dumps(const std::vector<ArmedDump>& dumps, std::chrono::milliseconds limit) {
  if (dumps.empty()) return;
  const UniqueFd notify(::inotify_init1(IN_CLOEXEC | IN_NONBLOCK));
  if (notify.valid()) {
    for (const ArmedDump& dump : dumps) {
      ::inotify_add_watch(notify.get(), dump.file.c_str(), IN_MODIFY);
    }
  }
  constexpr std::chrono::milliseconds kQuiet{50};
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return;
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - now);
    pollfd fd{notify.get(), POLLIN, 0};
    const int ready =
        ::poll(&fd, notify.valid() ? 1 : 0, static_cast<int>(std::min(left, kQuiet).count()));
    if (ready > 0) {
      char events[4096];
      while (::read(notify.get(), events, sizeof events) > 0) {
      }
      continue;  // a write came: wait for the quiet after it
    }
    bool all_grown = true;
    for (const ArmedDump& dump : dumps)
      all_grown = all_grown && file_size(dump.file) > dump.size_before;
    if (all_grown) return;
  }
}

// The dump written since the file held `size_before` bytes: faulthandler appends each dump
// to the file the rank keeps open, so an earlier capture's (`ddprun --stacks`) is still there
// before it. A file that was empty holds ddprun's marker line first.
std::string read_dump(const std::string& file, off_t size_before) {
  constexpr std::size_t kMaxDump = 256 * 1024;
  const auto from = static_cast<std::size_t>(size_before);
  std::string text = read_file_head(file, from + kMaxDump);
  if (from > 0) return text.size() > from ? text.substr(from) : std::string();
  const auto end = text.find('\n');
  return end == std::string::npos ? std::string() : text.substr(end + 1);
}

std::string first_line(const std::string& text) {
  return text.substr(0, text.find('\n'));
}

}  // namespace

std::optional<trace::TraceFile> read_trace(const std::string& path) {
  if (path.empty()) return std::nullopt;
  const std::string bytes = read_file_head(path, sizeof(trace::TraceFile));
  if (bytes.size() != sizeof(trace::TraceFile)) return std::nullopt;
  trace::TraceFile file;
  std::memcpy(&file, bytes.data(), sizeof file);
  if (file.magic != trace::kMagic) return std::nullopt;
  return file;
}

std::vector<StackCapture> capture_stacks(SignalChannel& signals,
                                         const std::vector<StackTarget>& targets,
                                         const std::string& eu_stack, const CaptureLimits& limits,
                                         const std::function<bool(int)>& on_signal) {
  std::vector<StackCapture> captures(targets.size());
  // Python first: eu-stack stops the process while it reads it, and a dump under way
  // would show up as faulthandler's frames.
  const std::vector<ArmedDump> dumps = ask_python_dumps(targets, captures);
  wait_for_dumps(dumps, limits.python_dump);
  for (const ArmedDump& dump : dumps) {
    captures[dump.target].python = read_dump(dump.file, dump.size_before);
    if (captures[dump.target].python.empty()) {
      captures[dump.target].problem =
          "faulthandler wrote nothing within " + std::to_string(limits.python_dump.count()) + " ms";
    }
  }
  const auto add_problem = [](StackCapture& capture, const std::string& problem) {
    capture.problem += (capture.problem.empty() ? "" : "; ") + problem;
  };
  if (eu_stack.empty()) {
    for (StackCapture& capture : captures) {
      add_problem(capture, "no native stack: eu-stack is not installed (Debian: elfutils)");
    }
    return captures;
  }
  std::vector<std::string> env;
  for (char** var = environ; *var != nullptr; ++var) env.emplace_back(*var);
  std::vector<SpawnSpec> specs;
  for (const StackTarget& target : targets) {
    specs.push_back({eu_stack, {"eu-stack", "-m", "-p", std::to_string(target.pid)}, env});
  }
  const auto runs = run_all_captured(signals, std::move(specs), {},
                                     static_cast<int>(limits.native.count()), on_signal);
  for (std::size_t i = 0; i < runs.size(); ++i) {
    captures[i].native = runs[i].out;
    if (runs[i].timed_out) {
      add_problem(captures[i],
                  "eu-stack took longer than " + std::to_string(limits.native.count()) + " ms");
    } else if (runs[i].out.empty()) {
      add_problem(captures[i], "no native stack: " + first_line(runs[i].err));
    }
  }
  return captures;
}

}  // namespace ddprun
