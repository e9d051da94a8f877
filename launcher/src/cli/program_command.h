#pragma once
// The worker's command line, formed from PROGRAM as torchrun forms it: a Python script
// (a name ending in .py, or a file that is not executable) runs as `PYTHON -u SCRIPT`,
// --module as `PYTHON -u -m MODULE`, --run-path as `PYTHON PATH` (torchrun runs it in
// its own interpreter, without -u), --no-python and everything else as given. PYTHON is
// $PYTHON_EXEC, else python3 from PATH.

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "cli/options.h"
#include "ddprun/contract/environment.h"

namespace ddprun {

// Whether a path names an existing file, and if so whether it is executable; nullopt when
// there is no such file. Passed in so that the rule stays pure.
using ExecutableProbe = std::function<std::optional<bool>(const std::string& path)>;

std::vector<std::string> worker_command(const Options& options, const Environment& env,
                                        const ExecutableProbe& probe);

// The probe on the real file system.
std::optional<bool> probe_file(const std::string& path);

}  // namespace ddprun
