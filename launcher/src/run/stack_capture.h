#pragma once
// Taking the stacks of workers that are about to be killed, with what Debian ships:
// eu-stack (elfutils) for every thread's native frames, and, for a Python worker that armed
// ddprun's hook (python_stack_hook.h), faulthandler's dump of every Python thread on a
// real-time signal. Every target at once; the whole capture ends within a bounded time
// however the targets behave (stopped, ignoring signals, not traceable).

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "report/round_result.h"
#include "run/process.h"

namespace ddprun {

struct StackTarget {
  pid_t pid = -1;                // a worker: the leader of its own process group
  std::string python_dump_file;  // DDPRUN_PYTHON_STACK_FILE; empty: not armed
};

struct CaptureLimits {
  std::chrono::milliseconds python_dump{1000};  // for faulthandler's dumps, all together
  std::chrono::milliseconds native{5000};       // for eu-stack, all together
};

// The stacks of `targets`, in their order. `eu_stack` is the path of eu-stack (empty: not
// installed). Signals that arrive while eu-stack runs go to `on_signal`; when it returns
// true, the capture stops at once and keeps what it has. Never throws for a target's
// sake: what failed is each capture's `problem`.
// The collective trace at `path` (DDPRUN_TRACE_FILE), as the worker left it; nullopt when
// there is none or it is not one.
std::optional<trace::TraceFile> read_trace(const std::string& path);

std::vector<StackCapture> capture_stacks(SignalChannel& signals,
                                         const std::vector<StackTarget>& targets,
                                         const std::string& eu_stack, const CaptureLimits& limits,
                                         const std::function<bool(int)>& on_signal);

}  // namespace ddprun
