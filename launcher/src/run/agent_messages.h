#pragma once
// What a head ddprun and its agents say to each other on an agent's stdin (docs/multinode.md):
// a hello with the environment, then signals and control requests (control.h), one JSON
// line each. Pure, but for read_agent_hello.

#include <optional>
#include <string>
#include <string_view>

#include "ddprun/contract/environment.h"
#include "ddprun/contract/membership.h"
#include "report/control.h"

namespace ddprun {

// A shell variable's name: letters, digits and '_', not starting with a digit.
bool valid_variable_name(std::string_view name);

// What the head tells an agent on its standard input before anything else (one JSON
// line): the environment to add. Signals follow as {"signal": N} lines.
std::string agent_hello(const Environment& forwarded);
// With `cause`: why the head stops the job (another node's failure or stop), so that the
// agent's node reports it and exits with its code.
std::string agent_signal_message(int signal_number, const NodeEvent* cause = nullptr);

// --restart-scope rank over several nodes: the job's whole membership, as the head merged
// it from every node's part (one line; its workers' file is then this). It names the ranks
// that do not run their first process, and how many ranks there are: the others come back
// `running` with pid -1, which the node that runs them fills in (ProcessRunner).
std::string agent_membership_message(const Membership& membership);

// Agent -> head, on the channel of its answers and node events (an agent between them
// passes it on as it is): the ranks of node `node` and the replacements started there this
// round, at every change.
struct MembershipReport {
  int node = 0;
  Membership part;
};
std::string membership_report_line(const MembershipReport& report);
// The report in `line`; nullopt for anything else.
std::optional<MembershipReport> parse_membership_report_line(std::string_view line);

// One message from the head: an environment (hello), a signal to forward, a control
// request to answer (control.h: agent_control_message), or the job's membership.
struct AgentMessage {
  Environment env;
  int signal_number = 0;
  std::optional<NodeEvent> cause;  // with a stop signal: why
  std::optional<ControlVerb> control;
  int control_id = 0;
  std::optional<Membership> membership;
};
// Parses one line from the head. Throws UsageError for anything else.
AgentMessage parse_agent_message(std::string_view line);

// An agent's first message from the head on `fd`: the environment its workers need, laid
// over `env`. Read byte by byte so nothing after the first line is taken from later
// reads. Throws UsageError when the head closed the connection or sent no hello.
void read_agent_hello(int fd, Environment& env);

}  // namespace ddprun
