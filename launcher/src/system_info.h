#pragma once
// What main() reads from the running system, once, before planning: the environment,
// facts about this host, the program's resolved path, free ports. Everything below main
// receives these as values.

#include <sys/socket.h>

#include <string>
#include <vector>

#include "cluster.h"
#include "process.h"

namespace ddprun {

// A copy of `environ`.
Environment read_environment();

// Host name, usable CPUs, /dev/nvidiaN count.
HostFacts read_host_facts();

// Resolves `program` like execvp: a name with a '/' is used as is, otherwise PATH (from
// `env`) is searched. Throws ProgramError (exit 127 not found, 126 not executable).
std::string resolve_program(const std::string& program, const Environment& env);

// A random run id: 12 hex digits.
std::string random_run_id();

// Whether a TCP listener could bind `port` on all interfaces right now.
bool port_is_free(int port);

// An IPv4 or IPv6 socket address as text ("10.1.2.3", "::1"); empty for other families.
std::string address_text(const sockaddr* address);

// The addresses `host` resolves to (getaddrinfo), as text; empty when it does not resolve.
std::vector<std::string> resolve_addresses(const std::string& host);

// Whether a TCP connection to `host`:`port` succeeds within `timeout_ms` (any of the
// addresses `host` resolves to).
bool can_connect(const std::string& host, int port, int timeout_ms);

// A listener on `port` on all IPv4 interfaces, or an invalid fd when it cannot bind.
UniqueFd listen_on(int port);

// Who listens on TCP `port` on this host, as "pid 123 (python3 train.py, run abc)", from
// /proc (the run id from the process's TORCHELASTIC_RUN_ID when it may be read); empty
// when it cannot be told.
std::string describe_port_user(int port);

// A port the kernel says is free now (bind to port 0). Throws std::system_error.
int pick_free_port();

}  // namespace ddprun
