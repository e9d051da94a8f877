#include "plan/shell_quote.h"

namespace ddprun {
namespace {

bool needs_quotes(std::string_view word) {
  if (word.empty()) return true;
  for (const char c : word) {
    // Letters and digits as std::isalnum reads them in the "C" locale, without its call.
    const bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (!alnum && std::string_view("-_./=:,+@%").find(c) == std::string_view::npos) return true;
  }
  return false;
}

}  // namespace

std::string shell_quote(std::string_view word) {
  std::string quoted = "'";
  for (char c : word) {
    if (c == '\'') {
      quoted += "'\\''";
    } else {
      quoted += c;
    }
  }
  quoted += '\'';
  return quoted;
}

void append_command_word(std::string& out, std::string_view word) {
  if (needs_quotes(word)) {
    out += shell_quote(word);
  } else {
    out += word;
  }
}

std::string quote_command(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& word : argv) {
    if (!out.empty()) out += ' ';
    append_command_word(out, word);
  }
  return out;
}

}  // namespace ddprun
