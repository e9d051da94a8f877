#pragma once
// Pure parsers for the values of torchrun's options that are more than a number or a
// name (docs/torchrun.md). Each throws UsageError with one line that names the option.

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace ddprun {

// torchrun's Std: which of a worker's streams an option covers, 0 none, 1 stdout,
// 2 stderr, 3 both; either one value for every local rank ("3") or per local rank
// ("0:1,1:2", ranks not named get 0).
struct StreamChoice {
  int all = 0;
  std::map<int, int> by_local_rank;
  int for_local_rank(int local_rank) const;
  bool any() const { return all != 0 || !by_local_rank.empty(); }
};

// HOST[:PORT] of --rdzv-endpoint; IPv6 in brackets ("[::1]:29400").
struct Endpoint {
  std::string host;
  std::optional<int> port;  // 0: any free port (torchrun's "localhost:0")
};

// The --rdzv-conf keys ddprun gives a meaning to; the others are checked for form only.
struct RendezvousConf {
  std::optional<double> join_timeout_s;  // "join_timeout", or "timeout" (an older name)
};

// A finite decimal number of seconds, the whole string; nullopt otherwise.
std::optional<double> parse_seconds(const std::string& text);

// "N" or "N:N". MIN:MAX with MIN < MAX (elastic) is refused: ddprun runs a fixed set of
// nodes.
int parse_nnodes(const std::string& text);
Endpoint parse_endpoint(const std::string& option, const std::string& text);
RendezvousConf parse_rendezvous_conf(const std::string& text);
StreamChoice parse_stream_choice(const std::string& option, const std::string& text);
std::set<int> parse_local_ranks_filter(const std::string& text);
// "SIGTERM,SIGUSR1" (the SIG prefix may be left out); only signals a launcher may catch.
std::vector<int> parse_signal_list(const std::string& text);
// The rendezvous backends: "static" and "c10d" are what ddprun does anyway (rank 0's
// TCPStore); etcd and unknown ones are refused.
void check_rendezvous_backend(const std::string& backend);

// The command-line forms of parsed values, for the agents a head starts.
std::string format_stream_choice(const StreamChoice& choice);
std::string format_rank_set(const std::set<int>& ranks);          // "0,3"
std::string format_signal_list(const std::vector<int>& signals);  // "SIGTERM,SIGXCPU"

}  // namespace ddprun
