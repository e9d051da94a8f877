#pragma once
// What main() reads about this host and this process, once, before planning: host name,
// CPUs, GPU device files, where programs are. Everything below main receives values.

#include <string>

#include "cluster.h"

namespace ddprun {

// Host name, usable CPUs, /dev/nvidiaN count.
HostFacts read_host_facts();

// Resolves `program` like execvp: a name with a '/' is used as is, otherwise PATH (from
// `env`) is searched. Throws ProgramError (exit 127 not found, 126 not executable).
std::string resolve_program(const std::string& program, const Environment& env);

// This ddprun's executable (/proc/self/exe). Throws std::system_error.
std::string this_executable();

// The working directory. Throws std::filesystem::filesystem_error.
std::string current_directory();

}  // namespace ddprun
