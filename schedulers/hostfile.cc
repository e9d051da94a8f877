#include "hostfile.h"

#include <algorithm>
#include <map>
#include <optional>
#include <utility>

#include "ddprun/common/parse_int.h"
#include "ddprun/contract/errors.h"
#include "hostfile_lexer.h"

namespace ddprun {

namespace {

std::string quoted(std::string_view text) {
  return "'" + std::string(text) + "'";
}

using hostfile::is_blank;
using hostfile::is_host_token;
using hostfile::is_ipv6;
using hostfile::Lexer;
using hostfile::Tok;
using hostfile::Token;

// One node as mpirun keeps it while reading: a host named again counts one more slot,
// and then its slots count as given.
struct Node {
  std::string host;
  int slots = 1;
  int max_slots = 0;
  bool slots_given = false;
};

// What a line sets, applied to each of its hosts in the order written.
struct Field {
  Tok kind;  // kSlots or kMaxSlots
  int value;
  std::size_t column;
};

class HostfileParser {
 public:
  HostfileParser(std::string_view text, std::string_view path, std::size_t max_hosts)
      : lexer_(text), path_(path), max_hosts_(max_hosts), text_(text) {}

  std::vector<NodeSlots> parse() {
    for (Token token = lexer_.next(); token.kind != Tok::kEnd; token = lexer_.next()) {
      line_ = token.line;
      if (token.kind == Tok::kNewline) continue;
      if (token.kind == Tok::kRank) {
        rank_line(token);
      } else if (token.kind == Tok::kRelative) {
        fail(token.column,
             "relative host " + quoted(lexer_.text(token)) +
                 " needs an earlier allocation (mpirun rejects it in a hostfile too)");
      } else {
        host_line(token);
      }
    }
    if (nodes_.empty()) {
      throw ConfigError(std::string(path_) +
                        ": no hosts: expected at least one line naming a host (all lines are "
                        "blank or comments)");
    }
    std::vector<NodeSlots> result;
    for (Node& node : nodes_) result.push_back({std::move(node.host), node.slots});
    return result;
  }

 private:
  [[noreturn]] void fail(std::size_t column, const std::string& message) const {
    throw ConfigError(file_message(path_, line_, column, message));
  }

  // "host [key=value | word]..." where the host may also be a Slurm hostlist or "host:N".
  void host_line(const Token& first) {
    const std::size_t word_end = end_of_word(first.begin);
    const std::string_view word = text_between(first.begin, word_end);
    std::vector<Field> fields;
    std::vector<std::string> hosts;
    if (is_host_token(first.kind) && first.end == word_end) {
      hosts = host_names(word, first.kind, first.column, fields);
    } else if (is_keyword(first.kind) && first.end == word_end) {
      fail(first.column, quoted(word) + " is a hostfile keyword, not a host name");
    } else {
      check_not_ignored_by_mpirun(first, word_end);
      hosts = hostlist_names(word, first.column, fields);
    }
    lexer_.seek(word_end);
    read_fields(fields);
    count_hosts(hosts.size());
    for (const std::string& host : hosts) add(host, fields);
  }

  void count_hosts(std::size_t more) {
    named_ += more;
    if (named_ > max_hosts_) {
      fail(1, "the hostfile names more than " + std::to_string(max_hosts_) + " hosts");
    }
  }

  // Open MPI's rankfile lines are also read from hostfiles: "rank 0=host slot=..." names
  // one slot on host; the rest of the line is not read.
  void rank_line(const Token& rank) {
    Token token = lexer_.next();
    while (token.kind != Tok::kEqual) {
      if (token.kind == Tok::kNewline || token.kind == Tok::kEnd) {
        fail(rank.column, "expected 'rank N=host' on one line");
      }
      token = lexer_.next();
    }
    const Token host = lexer_.next();
    if (!is_host_token(host.kind)) fail(host.column, "expected a host name after 'rank N='");
    std::vector<Field> none;
    const std::vector<std::string> names =
        host_names(lexer_.text(host), host.kind, host.column, none, false);
    Token rest = lexer_.next();
    while (rest.kind != Tok::kNewline && rest.kind != Tok::kEnd) rest = lexer_.next();
    count_hosts(1);
    Node& node = start(names[0], host.column);
    node.slots_given = true;
  }

  static bool is_keyword(Tok kind) {
    return kind == Tok::kSlots || kind == Tok::kMaxSlots || kind == Tok::kUser ||
           kind == Tok::kPort || kind == Tok::kRank || kind == Tok::kKeyword;
  }

  // A host word ends at a blank, a line end or a comment.
  std::size_t end_of_word(std::size_t pos) const {
    const std::string_view text = lexer_text();
    while (pos < text.size() && !is_blank(text[pos]) && text[pos] != '\n' && text[pos] != '\r' &&
           text[pos] != '#' &&
           !(text[pos] == '/' && pos + 1 < text.size() &&
             (text[pos + 1] == '/' || text[pos + 1] == '*'))) {
      ++pos;
    }
    return pos;
  }

  // "n1.example.org:4" or "10.0.0.1,n2": mpirun reads the first name and ignores the rest
  // of the word, so reading ":4" or ",n2" would silently disagree with it.
  void check_not_ignored_by_mpirun(const Token& first, std::size_t word_end) const {
    if (first.kind != Tok::kHostname && first.kind != Tok::kIpv4) return;
    Lexer rest = lexer_;
    rest.seek(first.end);
    while (rest.pos() < word_end) {
      const Token token = rest.next();
      if (token.kind != Tok::kString && token.kind != Tok::kInt) return;  // mpirun rejects
    }
    const std::string_view name = lexer_.text(first);
    fail(first.column, "mpirun reads " + quoted(name) + " here and ignores " +
                           quoted(text_between(first.end, word_end)) +
                           "; write the slots as 'slots=N' and one host per line");
  }

  // A single-token host word: a number, a name, an address, user@host, a comma list or
  // host:N.
  std::vector<std::string> host_names(std::string_view word, Tok kind, std::size_t column,
                                      std::vector<Field>& fields, bool extensions = true) const {
    if (word.find('@') != std::string_view::npos) {
      fail(column,
           "user@host is not supported: ddprun runs every host as the same user; set "
           "'User' per host in an ssh config (--ssh-config)");
    }
    if (kind == Tok::kInt) return {std::to_string(parse_number(word, column))};
    if (is_ipv6(word)) return {std::string(word)};
    if (!extensions && word.find_first_of(",:*") != std::string_view::npos) {
      fail(column, quoted(word) + " is not a host name");
    }
    return hostlist_names(word, column, fields);
  }

  // ddprun's forms that mpirun cannot read: a Slurm hostlist, and "host:N" as in MPICH.
  std::vector<std::string> hostlist_names(std::string_view word, std::size_t column,
                                          std::vector<Field>& fields) const {
    std::string_view list = word;
    if (const std::size_t colon = word.find(':'); colon != std::string_view::npos) {
      list = word.substr(0, colon);
      const std::string_view count = word.substr(colon + 1);
      const std::size_t count_column = column + colon + 1;
      if (count.empty() || count.find_first_not_of("0123456789") != std::string_view::npos) {
        fail(count_column, "expected a slot count after ':', got " + quoted(count));
      }
      fields.push_back({Tok::kSlots, parse_number(count, count_column), count_column});
    }
    try {
      return parse_hostlist(list, max_hosts_);
    } catch (const HostlistError& e) {
      fail(column + e.column() - 1, e.reason());
    }
  }

  int parse_number(std::string_view digits, std::size_t column) const {
    const std::optional<int> value = parse_int(digits);
    if (!value) fail(column, "number " + quoted(digits) + " is larger than 2147483647");
    return *value;
  }

  // KEY=N fields and ignored words after the host, up to the end of the line.
  void read_fields(std::vector<Field>& fields) {
    for (Token token = lexer_.next(); token.kind != Tok::kNewline && token.kind != Tok::kEnd;
         token = lexer_.next()) {
      const std::string_view text = lexer_.text(token);
      if (token.kind == Tok::kSlots || token.kind == Tok::kMaxSlots) {
        const Token equal = lexer_.next();
        const Token value = equal.kind == Tok::kEqual ? lexer_.next() : equal;
        if (equal.kind != Tok::kEqual || value.kind != Tok::kInt) {
          fail(value.column,
               "expected '" + std::string(text) + "=N' with N a number, got " + describe(value));
        }
        fields.push_back(
            {token.kind, parse_number(lexer_.text(value), value.column), value.column});
      } else if (token.kind == Tok::kUser || token.kind == Tok::kPort) {
        fail(token.column, quoted(text) +
                               " is not supported: ddprun reaches every host with "
                               "the same ssh settings; set them per host in an ssh "
                               "config (--ssh-config)");
      } else if (token.kind != Tok::kString && token.kind != Tok::kInt) {
        fail(token.column,
             "unexpected " + describe(token) + ": expected slots=N or max_slots=N after the host");
      }
      // Other words are ignored, as mpirun ignores them.
    }
  }

  Node& start(const std::string& host, std::size_t column) {
    if (const auto it = index_of_.find(host); it != index_of_.end()) {
      Node& node = nodes_[it->second];
      if (node.slots >= SlotTally::kMaxSlots)
        fail(column, "too many slots for host " + quoted(host));
      ++node.slots;
      node.slots_given = true;
      return node;
    }
    index_of_.emplace(host, nodes_.size());
    nodes_.push_back(Node{host});
    return nodes_.back();
  }

  // mpirun's rules, in the order the fields are written.
  void add(const std::string& host, const std::vector<Field>& fields) {
    Node& node = start(host, 1);
    bool got_max = false;
    for (const Field& field : fields) {
      if (field.kind == Tok::kSlots) {
        if (node.slots_given) {
          fail(field.column, "slots given twice for host " + quoted(host) +
                                 " (a host named again counts one more slot and takes no slots=)");
        }
        if (field.value < 1 || field.value > SlotTally::kMaxSlots) {
          fail(field.column, "expected a slot count from 1 to " +
                                 std::to_string(SlotTally::kMaxSlots) + ", got " +
                                 quoted(std::to_string(field.value)));
        }
        node.slots = field.value;
        node.slots_given = true;
        if (node.max_slots != 0 && node.max_slots < node.slots) node.max_slots = node.slots;
      } else if (field.value < node.slots) {
        fail(field.column, "max_slots=" + std::to_string(field.value) + " is less than slots=" +
                               std::to_string(node.slots) + " for host " + quoted(host));
      } else if (node.max_slots != field.value) {
        node.max_slots = field.value;
        got_max = true;
      }
    }
    if (got_max && !node.slots_given) {
      if (node.max_slots > SlotTally::kMaxSlots) fail(1, "too many slots for host " + quoted(host));
      node.slots = node.max_slots;
      node.slots_given = true;
    }
  }

  std::string describe(const Token& token) const {
    if (token.kind == Tok::kNewline || token.kind == Tok::kEnd) return "end of line";
    if (token.kind == Tok::kError) return describe_char(text_, token.begin);
    return quoted(lexer_.text(token));
  }

  std::string_view lexer_text() const { return text_; }
  std::string_view text_between(std::size_t begin, std::size_t end) const {
    return text_.substr(begin, end - begin);
  }

  Lexer lexer_;
  std::string_view path_;
  std::size_t max_hosts_;
  std::string_view text_;
  std::size_t line_ = 1;
  std::size_t named_ = 0;
  std::vector<Node> nodes_;
  std::map<std::string, std::size_t, std::less<>> index_of_;
};

}  // namespace

std::vector<NodeSlots> parse_hostfile(std::string_view text, std::string_view path,
                                      std::size_t max_hosts) {
  return HostfileParser(text, path, max_hosts).parse();
}

Cluster read_hostfile(const std::string& path, const ReadFile& read_file) {
  const std::string text = read_named_file(read_file, path, {});
  Cluster cluster;
  cluster.scheduler = "hostfile";
  cluster.nodes = parse_hostfile(text, path);
  cluster.sources["hostfile"] = path;
  return cluster;
}

std::vector<NodeSlots> read_slot_file(const ReadFile& read_file, const std::string& path,
                                      std::string_view via) {
  const std::string text = read_named_file(read_file, path, via);
  SlotTally tally;
  const std::vector<std::string_view> lines = split_lines(text);
  for (std::size_t n = 0; n < lines.size(); ++n) {
    std::string_view line = lines[n];
    if (const std::size_t hash = line.find('#'); hash != std::string_view::npos) {
      line = line.substr(0, hash);
    }
    const std::size_t begin = line.find_first_not_of(" \t");
    if (begin == std::string_view::npos) continue;
    const std::size_t end = line.find_last_not_of(" \t") + 1;
    const std::string_view host = line.substr(begin, end - begin);
    if (const std::size_t space = host.find_first_of(" \t"); space != std::string_view::npos) {
      const std::size_t column = begin + host.find_first_not_of(" \t", space) + 1;
      throw SchedulerEnvError(file_message(
          path, n + 1, column, "expected one host name per line, got a second word", via));
    }
    if (!tally.add(host, 1)) {
      throw SchedulerEnvError(
          file_message(path, n + 1, begin + 1, "too many slots for this host", via));
    }
  }
  if (tally.empty()) {
    throw SchedulerEnvError(env_message(via, path, "the file names no host"));
  }
  return tally.take();
}

}  // namespace ddprun
