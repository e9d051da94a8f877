#pragma once
// Shell quoting, in one place: for remote command lines (ssh) and for showing a command.

#include <string>
#include <string_view>
#include <vector>

namespace ddprun {

// Quotes `word` for a POSIX shell so that it reaches the program as one argument with
// nothing expanded: 'it'\''s' style. The empty word becomes ''.
std::string shell_quote(std::string_view word);

// A command line for display: arguments joined by spaces, each quoted only where a shell
// would otherwise split or expand it.
std::string quote_command(const std::vector<std::string>& argv);

// One word as quote_command shows it, appended to `out`.
void append_command_word(std::string& out, std::string_view word);

}  // namespace ddprun
