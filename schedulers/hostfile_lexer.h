#pragma once
// The hostfile's tokens (hostfile.cc's parser reads them): the token classes of Open MPI
// 4.1's hostfile lexer (orte/util/hostfile/hostfile_lex.l), reproduced by behaviour, so
// that the same text splits into the same tokens. Pure; inside schedulers/ only.

#include <cstddef>
#include <string_view>

namespace ddprun::hostfile {

enum class Tok {
  kNewline,
  kEnd,
  kEqual,
  kSlots,     // slots, count, cpu
  kMaxSlots,  // max_slots and its eleven spellings
  kUser,      // username, user-name, user_name
  kPort,
  kRank,
  kKeyword,   // slot, boards, sockets, cores and their spellings: mpirun rejects them here
  kRelative,  // +n0, +e, +e:2
  kInt,
  kString,  // [A-Za-z0-9_,:*@-]+
  kIpv4,
  kHostname,  // a name with dots, maybe user@ (or ^user@) before it
  kQuoted,
  kError,  // any other single character
};

struct Token {
  Tok kind = Tok::kEnd;
  std::size_t begin = 0;
  std::size_t end = 0;
  std::size_t line = 1;
  std::size_t column = 1;
};

class Lexer {
 public:
  explicit Lexer(std::string_view text) : text_(text) {}

  // The next token; kEnd at the end of the text (again and again).
  Token next();

  std::string_view text(const Token& token) const {
    return text_.substr(token.begin, token.end - token.begin);
  }
  std::size_t pos() const noexcept { return pos_; }
  void seek(std::size_t pos) { pos_ = pos; }

 private:
  void new_line(std::size_t next) {
    pos_ = next;
    ++line_;
    line_start_ = next;
  }

  void skip_to(std::size_t end) {
    for (; pos_ < end; ++pos_) {
      if (text_[pos_] == '\n') {
        ++line_;
        line_start_ = pos_ + 1;
      }
    }
  }

  std::string_view text_;
  std::size_t pos_ = 0;
  std::size_t line_ = 1;
  std::size_t line_start_ = 0;
};

// Whether a token of `kind` can name a host.
inline bool is_host_token(Tok kind) {
  return kind == Tok::kInt || kind == Tok::kString || kind == Tok::kIpv4 || kind == Tok::kHostname;
}

bool is_blank(char c);
// (h{0,4}:){2,}h{1,4} with h a hex digit: what Open MPI's lexer takes for an IPv6 address.
bool is_ipv6(std::string_view text);

}  // namespace ddprun::hostfile
