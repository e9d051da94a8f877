#pragma once
// What the rendezvous's units (rendezvous_protocol.cc, rendezvous_host.cc,
// rendezvous_joins.cc, rendezvous_peer.cc) share, inside nodes/ only: the socket helpers
// its lines travel with.

#include <string>
#include <string_view>

#include "nodes/rendezvous.h"

namespace ddprun {

void set_blocking(int fd, bool blocking);
// Sends all of `data` (no SIGPIPE); false when the connection takes no more.
bool write_all_fd(int fd, std::string_view data);
// A string from the network as it may be printed (printable.h).
std::string printable_host(std::string_view text);
// Milliseconds from now to `when` for poll(), 0 when it has passed.
int ms_until(RendezvousClock::time_point when);

}  // namespace ddprun
