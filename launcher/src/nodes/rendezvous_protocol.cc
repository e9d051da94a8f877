// The rendezvous's lines (rendezvous.h): each message as one JSON line, formatted and
// parsed strictly (bounded fields, nothing else accepted), and the socket helpers they
// travel with.
#include <fcntl.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <nlohmann/json.hpp>

#include "ddprun/common/printable.h"
#include "nodes/rendezvous.h"
#include "nodes/rendezvous_io.h"
#include "nodes/rendezvous_secret.h"

namespace ddprun {
namespace {

// Nonces and proofs are hex digests (rendezvous_secret.h); a little room for longer ones.
constexpr std::size_t kMaxNonceBytes = 128;

std::optional<nlohmann::json> json_object(std::string_view line) {
  if (line.size() > kMaxJoinBytes) return std::nullopt;
  auto doc = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) return std::nullopt;
  return doc;
}

std::optional<int> int_field(const nlohmann::json& doc, const char* key, int low, int high) {
  const auto it = doc.find(key);
  if (it == doc.end() || !it->is_number_integer()) return std::nullopt;
  const auto value = it->get<long long>();
  if (value < low || value > high) return std::nullopt;
  return static_cast<int>(value);
}

std::optional<std::string> string_field(const nlohmann::json& doc, const char* key,
                                        std::size_t max) {
  const auto it = doc.find(key);
  if (it == doc.end() || !it->is_string()) return std::nullopt;
  auto value = it->get<std::string>();
  if (value.size() > max) return std::nullopt;
  return value;
}

}  // namespace

void set_blocking(int fd, bool blocking) {
  const int flags = ::fcntl(fd, F_GETFL);
  ::fcntl(fd, F_SETFL, blocking ? flags & ~O_NONBLOCK : flags | O_NONBLOCK);
}

bool write_all_fd(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t put = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) return false;
    data.remove_prefix(static_cast<std::size_t>(put));
  }
  return true;
}

std::string printable_host(std::string_view text) {
  return printable(text, 255);
}

int ms_until(RendezvousClock::time_point when) {
  const auto left =
      std::chrono::ceil<std::chrono::milliseconds>(when - RendezvousClock::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, INT_MAX));
}

std::string format_join(const JoinRequest& join) {
  nlohmann::json doc = {
      {"ddprun_join", 1},      {"run", join.run_id},  {"node", join.node_rank},
      {"round", join.round},   {"nproc", join.nproc}, {"host", join.host},
      {"nnodes", join.nnodes}, {"nonce", join.nonce}, {"scope", join.restart_scope}};
  if (!join.proof.empty()) doc["proof"] = join.proof;
  if (join.max_restarts >= 0) doc["restarts"] = join.max_restarts;
  return doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

std::string join_proof(std::string_view secret, std::string_view host_nonce,
                       const JoinRequest& join) {
  const std::string node = std::to_string(join.node_rank);
  const std::string round = std::to_string(join.round);
  const std::string nproc = std::to_string(join.nproc);
  const std::string nnodes = std::to_string(join.nnodes);
  const std::string restarts = std::to_string(join.max_restarts);
  return proof_of_secret(secret, {"join", host_nonce, join.nonce, join.run_id, node, round, nproc,
                                  join.host, nnodes, join.restart_scope, restarts});
}

std::string format_greeting(std::string_view nonce) {
  return nlohmann::json{{"ddprun_rdzv", 1}, {"nonce", nonce}}.dump() + "\n";
}

std::optional<std::string> parse_greeting(std::string_view line) {
  const auto doc = json_object(line);
  if (!doc || int_field(*doc, "ddprun_rdzv", 1, 1) != 1) return std::nullopt;
  auto nonce = string_field(*doc, "nonce", kMaxNonceBytes);
  if (!nonce || nonce->empty()) return std::nullopt;
  return nonce;
}

std::string host_proof(std::string_view secret, std::string_view peer_nonce,
                       std::string_view host_nonce) {
  return proof_of_secret(secret, {"host", peer_nonce, host_nonce});
}

std::string format_host_proof(std::string_view proof) {
  return nlohmann::json{{"ddprun_host", 1}, {"proof", proof}}.dump() + "\n";
}

std::optional<std::string> parse_host_proof(std::string_view line) {
  const auto doc = json_object(line);
  if (!doc || int_field(*doc, "ddprun_host", 1, 1) != 1) return std::nullopt;
  return string_field(*doc, "proof", kMaxNonceBytes);
}

std::optional<JoinRequest> parse_join(std::string_view line, std::string& why) {
  const auto doc = json_object(line);
  if (!doc || int_field(*doc, "ddprun_join", 1, 1) != 1) {
    why = "not a ddprun join";
    return std::nullopt;
  }
  JoinRequest join;
  const auto run = string_field(*doc, "run", 256);
  const auto node = int_field(*doc, "node", -1, 1 << 20);
  const auto round = int_field(*doc, "round", 0, 1 << 20);
  const auto nproc = int_field(*doc, "nproc", 1, 1 << 16);
  const auto host = string_field(*doc, "host", 255);
  const auto nnodes = int_field(*doc, "nnodes", 1, 1 << 20);
  const auto nonce = string_field(*doc, "nonce", kMaxNonceBytes);
  const auto proof = doc->contains("proof") ? string_field(*doc, "proof", kMaxNonceBytes)
                                            : std::optional<std::string>(std::string());
  // A join without one (an older ddprun, by its format) is of job scope.
  const auto scope =
      doc->contains("scope") ? string_field(*doc, "scope", 8) : std::optional<std::string>("job");
  // A join without it: not said, not checked.
  const auto restarts =
      doc->contains("restarts") ? int_field(*doc, "restarts", 0, 1000000) : std::optional<int>(-1);
  if (!run || !node || !round || !nproc || !host || !nonce || nonce->empty() || !proof || !nnodes ||
      !scope || (*scope != "job" && *scope != "rank") || !restarts) {
    why = "a join with a missing or malformed field";
    return std::nullopt;
  }
  join.run_id = *run;
  join.node_rank = *node;
  join.round = *round;
  join.nproc = *nproc;
  join.host = *host;
  join.nnodes = *nnodes;
  join.nonce = *nonce;
  join.proof = *proof;
  join.restart_scope = *scope;
  join.max_restarts = *restarts;
  return join;
}

std::string format_round_start(const RoundStart& start) {
  nlohmann::json doc{
      {"round", start.round}, {"master_port", start.master_port}, {"node", start.node_rank}};
  if (start.replaces) doc["replaces"] = true;  // said only when true: the line stays as it was
  return doc.dump() + "\n";
}

std::optional<RoundStart> parse_round_start(std::string_view line) {
  const auto doc = json_object(line);
  if (!doc) return std::nullopt;
  const auto round = int_field(*doc, "round", 0, 1 << 20);
  const auto port = int_field(*doc, "master_port", 1, 65535);
  const auto node = int_field(*doc, "node", 1, 1 << 20);
  if (!round || !port || !node) return std::nullopt;
  const auto replaces = doc->find("replaces");
  if (replaces != doc->end() && !replaces->is_boolean()) return std::nullopt;
  return RoundStart{*round, *port, *node, replaces != doc->end() && replaces->get<bool>()};
}

std::string format_spare_wait(int position) {
  return nlohmann::json{{"spare", position}}.dump() + "\n";
}

std::optional<int> parse_spare_wait(std::string_view line) {
  const auto doc = json_object(line);
  if (!doc || doc->size() != 1) return std::nullopt;
  return int_field(*doc, "spare", 1, 1 << 20);
}

std::string format_exit_report(int code) {
  return nlohmann::json{{"exit", code}}.dump() + "\n";
}

std::optional<int> parse_exit_report(std::string_view line) {
  const auto doc = json_object(line);
  if (!doc) return std::nullopt;
  return int_field(*doc, "exit", 0, 255);
}

std::string format_job_end(const JobEnd& end) {
  return nlohmann::json{{"end", end.code}, {"why", end.why}}.dump(
             -1, ' ', false, nlohmann::json::error_handler_t::replace) +
         "\n";
}

std::optional<JobEnd> parse_job_end(std::string_view line) {
  const auto doc = json_object(line);
  if (!doc) return std::nullopt;
  const auto code = int_field(*doc, "end", 0, 255);
  const auto why = string_field(*doc, "why", 1024);
  if (!code || !why) return std::nullopt;
  return JobEnd{*code, printable_host(*why)};
}

}  // namespace ddprun
