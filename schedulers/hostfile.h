#pragma once
// Hostfiles given with --hostfile, read as Open MPI 4.1's mpirun reads them ("host
// slots=N max_slots=M", comments, rankfile lines, repeated hosts), plus "host:N" and
// lines whose host is a Slurm hostlist expression ("gpu[01-04] slots=8"). The format and
// every difference from mpirun are in docs/schedulers.md ("Hostfiles").

#include <string>
#include <string_view>
#include <vector>

#include "cluster.h"
#include "hostlist.h"
#include "source.h"

namespace ddprun {

// Parses a hostfile's text. Hosts keep the position of their first line; a host named
// again counts one more slot, as in mpirun. `path` is only used in messages.
// Throws ConfigError "path:line:column: what was expected"; returns a complete list of
// at least one node or throws.
std::vector<NodeSlots> parse_hostfile(std::string_view text, std::string_view path,
                                      std::size_t max_hosts = kMaxHostlistSize);

// Reads and parses the hostfile at `path`. The cluster's scheduler is "hostfile", its
// job id is empty and this_node is unset (see this_node_or_throw in node_match.h). Throws
// ConfigError when the file cannot be read or is malformed.
Cluster read_hostfile(const std::string& path, const ReadFile& read_file);

// Reads a file with one host per line (blank lines and '#' comments skipped, surrounding
// spaces and CR removed) where a host repeated means one more slot: hosts in first-seen
// order with their line counts. `via` names the variable that named the file. Throws
// SchedulerEnvError naming "path:line:column (VAR)" for a line with several words, and
// when the file names no host.
std::vector<NodeSlots> read_slot_file(const ReadFile& read_file, const std::string& path,
                                      std::string_view via);

}  // namespace ddprun
