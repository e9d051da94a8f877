#include "ddprun/common/signal_name.h"

#include <string.h>

namespace ddprun {

std::string signal_name(int signal_number) {
  // sigabbrev_np (glibc 2.32) gives "TERM" without the prefix and nullptr when unknown.
  const char* abbrev = sigabbrev_np(signal_number);
  return abbrev != nullptr ? std::string("SIG") + abbrev : "SIG" + std::to_string(signal_number);
}

}  // namespace ddprun
