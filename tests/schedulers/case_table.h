#pragma once
// Reads the recorded tables under tests/schedulers/ (hostlist_cases.tsv,
// hostfile_cases.tsv): one row per line, fields separated by tabs, '#' lines and blank
// lines skipped, C escapes (\t \n \r \f \v \\ \xNN) in the first field.

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace ddprun::testing {

struct CaseRow {
  std::size_t line = 0;  // in the table file, for messages
  std::vector<std::string> fields;
};

inline std::string table_path(const std::string& name) {
  return std::string(DDPRUN_SCHEDULER_TESTS_DIR) + "/" + name;
}

inline std::vector<CaseRow> read_case_table(const std::string& name) {
  std::ifstream in(table_path(name));
  EXPECT_TRUE(in) << "cannot open " << table_path(name);
  std::vector<CaseRow> rows;
  std::string line;
  for (std::size_t number = 1; std::getline(in, line); ++number) {
    if (line.empty() || line[0] == '#') continue;
    CaseRow row{number, {}};
    std::stringstream fields(line);
    std::string field;
    while (std::getline(fields, field, '\t')) row.fields.push_back(field);
    rows.push_back(row);
  }
  return rows;
}

inline std::string unescape(const std::string& text) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\\' || i + 1 == text.size()) {
      out += text[i];
      continue;
    }
    switch (text[++i]) {
      case 't':
        out += '\t';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 'f':
        out += '\f';
        break;
      case 'v':
        out += '\v';
        break;
      case 'x':
        out += static_cast<char>(std::stoi(text.substr(i + 1, 2), nullptr, 16));
        i += 2;
        break;
      default:
        out += text[i];
        break;
    }
  }
  return out;
}

// Hosts and slots as a table writes them: "a=2 b=1".
inline std::string slots_text(const std::vector<std::pair<std::string, int>>& nodes) {
  std::string text;
  for (const auto& [host, slots] : nodes) {
    text += (text.empty() ? "" : " ") + host + "=" + std::to_string(slots);
  }
  return text;
}

inline std::vector<std::string> split_spaces(const std::string& text) {
  std::vector<std::string> words;
  std::stringstream in(text);
  std::string word;
  while (in >> word) words.push_back(word == "<empty>" ? "" : word);
  return words;
}

// Whether `hosts` is the expansion a table field describes: names separated by spaces,
// or "count=N first=A last=B". Returns "" when it is, else what differs.
inline std::string compare_expansion(const std::string& expected,
                                     const std::vector<std::string>& hosts) {
  std::stringstream got;
  got << hosts.size() << " hosts";
  if (!hosts.empty()) got << ", first '" << hosts.front() << "', last '" << hosts.back() << "'";
  if (expected.rfind("count=", 0) == 0) {
    std::stringstream want(expected);
    std::string count, first, last;
    want >> count >> first >> last;
    const bool same = !hosts.empty() && count == "count=" + std::to_string(hosts.size()) &&
                      first == "first=" + hosts.front() && last == "last=" + hosts.back();
    return same ? "" : "expected " + expected + ", got " + got.str();
  }
  if (split_spaces(expected) == hosts) return "";
  std::string list;
  for (const std::string& host : hosts) list += (list.empty() ? "" : " ") + host;
  return "expected '" + expected + "', got '" + list + "'";
}

}  // namespace ddprun::testing
