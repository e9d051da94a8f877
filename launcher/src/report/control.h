#pragma once
// A handle on a running job (docs/launching.md): the requests `ddprun --status`, `--stacks`,
// `--stop` and `--attach` send to the job's ddprun over its control socket
// (control_socket.h), where that socket lives, and the answers. The head asks its agents
// with one message on their stdin and each node answers with one line on its stderr.
// Pure: no I/O here.

#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ddprun/contract/environment.h"
#include "report/round_result.h"

namespace ddprun {

enum class ControlVerb { kStatus, kStacks, kStop, kAttach };

std::string_view control_verb_name(ControlVerb verb);  // "status", "stacks", ...
// The request line a client sends ("status\n"): nullopt for anything else.
std::optional<ControlVerb> parse_control_verb(std::string_view line);

// This user's folder of control sockets: $XDG_RUNTIME_DIR/ddprun when that is set (a
// per-user 0700 folder already), else /tmp/ddprun-UID (never under TMPDIR, which a
// scheduler may make per job).
std::string control_folder(const Environment& env, uid_t uid);
// Where a client looks for a job, in order: control_folder, then the folders a shell with
// another XDG_RUNTIME_DIR (or none) would use.
std::vector<std::string> control_folders_to_search(const Environment& env, uid_t uid);
// The socket's name in that folder for `run_id` on node `node_rank` (0: "RUNID.sock";
// others "RUNID.nodeN.sock"): characters other than letters, digits, '.', '_' and '-'
// become '_' and the id keeps at most 64 of them (a socket's path is short).
std::string control_socket_name(std::string_view run_id, int node_rank);
// The link in the folder that names the socket of the latest run started on this host.
inline constexpr std::string_view kLatestLink = "latest";

// One rank as a status or stacks answer shows it.
struct RankStatus {
  int rank = 0;
  int node_rank = 0;
  std::string host;
  pid_t pid = -1;
  std::string state;                   // "running", "stopped", "exited 0", "killed by SIGKILL"
  std::optional<long long> step;       // its DDPRUN_PROGRESS_FILE
  std::string last_line;               // its last line of output (stdout or stderr)
  std::optional<StackCapture> stacks;  // with kStacks, of running ranks
  std::optional<TraceSnapshot> trace;  // with kStacks, when it keeps one
};

// The state of a rank that ended with `wait_status`, or of a running one whose
// /proc/PID/stat state letter is `proc_state` ('T' or 't': "stopped").
std::string rank_state(bool exited, int wait_status, char proc_state);

struct JobStatus {
  std::string run_id;
  pid_t pid = -1;    // the answering ddprun
  int restarts = 0;  // spent: restarts, and under --restart-scope rank replacements
  int max_restarts = 0;
  double up_seconds = 0;           // since ddprun started
  std::string console_file;        // where the console goes after SIGHUP; empty: the terminal
  std::vector<RankStatus> ranks;   // sorted by rank
  std::vector<std::string> notes;  // nodes that did not answer, and why
};

// The status table: a header line, one row per rank (rank, host, pid, state, step, last
// output line cut to 60 characters), then the notes.
std::string format_status(const JobStatus& status);
// Where every running rank is now: the grouped digest (stacks.h), the collectives, then
// each rank's whole stacks under a "--- rank N (host, pid P) ---" line.
std::string format_stacks_answer(const JobStatus& status);

// Head -> agent, on its stdin: {"control":"status","id":N}.
std::string agent_control_message(ControlVerb verb, int id);

// Agent -> head, one line on the agent's stderr: the marker, then JSON with the request's
// id and the node's ranks (their stacks and traces with kStacks).
inline constexpr std::string_view kAgentAnswerMarker =
    "\x1e"
    "ddprun-control ";
std::string agent_answer_line(int id, const std::vector<RankStatus>& ranks);
struct AgentAnswer {
  int id = 0;
  std::vector<RankStatus> ranks;
};
// nullopt when `line` is not an answer (no marker, or JSON that does not fit).
std::optional<AgentAnswer> parse_agent_answer(std::string_view line);

// A node's event (round_result.h) as one JSON object: {"event":"failed","node":N,...}.
std::string node_event_json(const NodeEvent& event);
// Its "event": "failed", "stopped", "notice" or "setup_failed".
const char* node_event_name(NodeEvent::Kind kind);
// nullopt for anything else. `what` comes back printable (printable.h), cut at 512 bytes:
// it is printed.
std::optional<NodeEvent> parse_node_event_json(std::string_view json);
// Agent -> head, the moment it happens: the marker, then node_event_json, on the channel
// that carries the agent's answers.
std::string node_event_line(const NodeEvent& event);
// The event in `line` (an agent answer line that holds an event); nullopt for anything else.
std::optional<NodeEvent> parse_node_event_line(std::string_view line);

}  // namespace ddprun
