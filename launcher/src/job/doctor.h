#pragma once
// ddprun --doctor: what ddprun sees on this node, as a table to paste into a bug report.
// Gathering touches the system (interfaces, limits, the worker's libraries); formatting
// is pure.

#include <string>
#include <utility>
#include <vector>

#include "cli/options.h"
#include "cluster.h"

namespace ddprun {

using DoctorRows = std::vector<std::pair<std::string, std::string>>;

// The program --doctor inspects: the one given (resolved in PATH; ProgramError when it
// cannot be), else ddp-train next to ddprun when it is there, else empty.
std::string doctor_program(const Options& options, const Environment& env);

// Collects the rows. `worker` is the program to inspect (its LibTorch and BLAS), or empty.
// Never throws for what it cannot find: that becomes the row's text.
DoctorRows gather_doctor_rows(const Options& options, const Environment& env,
                              const std::string& worker);

// "  key          value" lines; a value with several lines is indented under its key.
std::string format_doctor(const DoctorRows& rows);

// From `LD_TRACE_LOADED_OBJECTS=1` output ("\tlibx.so.1 => /path/libx.so.1 (0x...)"):
// the resolved path of the first library whose name starts with `prefix`, or empty.
std::string loaded_library(const std::string& trace, const std::string& prefix);

}  // namespace ddprun
