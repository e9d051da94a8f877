#pragma once
// Python frames without a change to the script: ddprun puts a folder holding its own
// sitecustomize.py first on a worker's PYTHONPATH. At the interpreter's start it opens
// $DDPRUN_PYTHON_STACK_FILE, writes one line ("ddprun-python-stacks pid=P signal=S") and
// registers faulthandler on that real-time signal, so that the signal writes every
// thread's Python stack there (from a C signal handler: it works while the interpreter is
// stuck in C code); then it runs the sitecustomize it hides, if any. The variable is
// removed from os.environ, so the worker's own child interpreters do not take the file.
// python -I, -E or -S skip it: such a worker gets native frames only.

#include <string>

namespace ddprun {

// The sitecustomize.py.
std::string python_stack_hook_source();

// Writes it into the folder `dir` (created, 0700); returns `dir`. Throws
// std::system_error.
const std::string& write_python_stack_hook(const std::string& dir);

}  // namespace ddprun
