#pragma once
// What the head passes on to its agents (nodes/agents.h), taken from its options: the one
// place where the command line meets the agents.

#include "cli/options.h"
#include "nodes/agents.h"

namespace ddprun {

AgentOptions agent_options(const Options& options);

}  // namespace ddprun
