#include "shell_quote.h"

#include <cctype>

namespace ddprun {
namespace {

bool needs_quotes(std::string_view word) {
  if (word.empty()) return true;
  for (char c : word) {
    if (std::isalnum(static_cast<unsigned char>(c)) == 0 &&
        std::string_view("-_./=:,+@%").find(c) == std::string_view::npos) {
      return true;
    }
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

std::string quote_command(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& word : argv) {
    if (!out.empty()) out += ' ';
    out += needs_quotes(word) ? shell_quote(word) : word;
  }
  return out;
}

}  // namespace ddprun
