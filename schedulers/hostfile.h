#pragma once
// Hostfiles given with --hostfile: plain (one host per line), Open MPI
// ("host slots=N max_slots=M"), DeepSpeed ("host slots=N"), "host:N", and lines whose
// host is a Slurm hostlist expression ("gpu[01-04] slots=8"). The format, including
// comments, CRLF endings and duplicate hosts, is in docs/schedulers.md ("Hostfiles").

#include <string>
#include <string_view>
#include <vector>

#include "cluster.h"
#include "hostlist.h"
#include "source.h"

namespace ddprun {

// Parses a hostfile's text. Hosts keep the position of their first line; a host named
// again has its slots added (like SGE's PE_HOSTFILE). `path` is only used in messages.
// Throws ConfigError "path:line:column: what was expected"; returns a complete list of
// at least one node or throws.
std::vector<NodeSlots> parse_hostfile(std::string_view text, std::string_view path,
                                      std::size_t max_hosts = kMaxHostlistSize);

// Reads and parses the hostfile at `path`. The cluster's scheduler is "hostfile", its
// job id is empty and this_node is unset (see find_this_node). Throws ConfigError when
// the file cannot be read or is malformed.
Cluster read_hostfile(const std::string& path, const ReadFile& read_file);

}  // namespace ddprun
