#pragma once
// TCP ports on this host: free ones, listening on one, and who holds a busy one.

#include <string>

#include "ddprun/common/unique_fd.h"

namespace ddprun {

// Whether a TCP listener could bind `port` on all interfaces right now.
bool port_is_free(int port);

// A port the kernel says is free now (bind to port 0). Throws std::system_error.
int pick_free_port();

// A listener on `port` of `address` (an IPv4 address of this host; empty: every IPv4
// interface), or an invalid fd when it cannot bind.
UniqueFd listen_on(int port, const std::string& address = "");

// Who listens on TCP `port` on this host, as "pid 123 (python3 train.py, run abc)", from
// /proc (the run id from the process's TORCHELASTIC_RUN_ID when it may be read); empty
// when it cannot be told.
std::string describe_port_user(int port);

}  // namespace ddprun
