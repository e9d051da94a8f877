#pragma once
// TCP ports on this host: free ones, listening on one, and who holds a busy one.

#include <string>

#include "ddprun/common/unique_fd.h"

namespace ddprun {

// Whether a TCP listener could bind `port` on all interfaces right now.
bool port_is_free(int port);

// A port the kernel says is free now (bind to port 0). Throws std::system_error.
int pick_free_port();

// Keeps `port` for this job's rank 0 while the descriptor lives: one socket bound to it on
// every address (IPv6 and IPv4 at once where the host has IPv6), with SO_REUSEADDR and never
// listening. The kernel's own picks of a free port (a bind to port 0, a connect) pass it by,
// and so does another program's bind without SO_REUSEADDR; a store that sets SO_REUSEADDR
// (PyTorch's TCPStore, gRPC) binds and listens on it as on a free port, and once it listens
// nobody else may. An invalid fd when the port cannot be held (someone listens on it).
UniqueFd hold_port(int port);

// A free port, held as hold_port says. Throws std::system_error.
struct HeldPort {
  int port = 0;
  UniqueFd hold;
};
HeldPort hold_free_port();

// A listener on `port` of `address` (an IPv4 address of this host; empty: every IPv4
// interface), or an invalid fd when it cannot bind.
UniqueFd listen_on(int port, const std::string& address = "");

// Who listens on TCP `port` on this host, as "pid 123 (python3 train.py, run abc)", from
// /proc (the run id from the process's TORCHELASTIC_RUN_ID when it may be read); empty
// when it cannot be told.
std::string describe_port_user(int port);

}  // namespace ddprun
