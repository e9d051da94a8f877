#pragma once
#include <string>

namespace ddprun {

// "SIGTERM" for 15, "SIG42" for numbers without a name. Not async-signal-safe.
std::string signal_name(int signal_number);

}  // namespace ddprun
