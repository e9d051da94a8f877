#include "source.h"

#include <cerrno>
#include <cstdio>
#include <memory>
#include <system_error>

#include "ddprun/contract/errors.h"

namespace ddprun {

std::string read_file_from_disk(const std::string& path) {
  struct Closer {
    void operator()(std::FILE* file) const { std::fclose(file); }
  };
  std::unique_ptr<std::FILE, Closer> file(std::fopen(path.c_str(), "rb"));
  if (!file) throw std::system_error(errno, std::generic_category(), "open " + path);
  std::string content;
  char buffer[65536];
  while (true) {
    const std::size_t got = std::fread(buffer, 1, sizeof buffer, file.get());
    content.append(buffer, got);
    if (got < sizeof buffer) break;
  }
  if (std::ferror(file.get())) {
    throw std::system_error(errno, std::generic_category(), "read " + path);
  }
  return content;
}

namespace {

constexpr std::size_t kMaxShownValue = 120;

std::string shown(std::string_view name, std::string_view value) {
  bool printable = value.size() <= kMaxShownValue;
  for (char c : value) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte >= 0x7f || c == '"') printable = false;
  }
  if (printable) return std::string(name) + "=\"" + std::string(value) + "\"";
  return std::string(name) + " (" + std::to_string(value.size()) + " bytes)";
}

}  // namespace

std::string env_message(std::string_view name, std::string_view value, std::string_view message) {
  return shown(name, value) + ": " + std::string(message);
}

std::string env_message_at(std::string_view name, std::string_view value, std::size_t column,
                           std::string_view message) {
  return shown(name, value) + ", column " + std::to_string(column) + ": " + std::string(message);
}

std::string env_missing_message(std::string_view name, std::string_view message) {
  return std::string(name) + " is not set: " + std::string(message);
}

std::string file_message(std::string_view path, std::size_t line, std::size_t column,
                         std::string_view message, std::string_view via) {
  std::string text = std::string(path) + ":" + std::to_string(line) + ":" + std::to_string(column);
  if (!via.empty()) text += " (" + std::string(via) + ")";
  return text + ": " + std::string(message);
}

std::string read_named_file(const ReadFile& read_file, const std::string& path,
                            std::string_view via) {
  try {
    return read_file(path);
  } catch (const std::exception& e) {
    if (via.empty()) throw ConfigError("cannot read " + path + ": " + e.what());
    throw SchedulerEnvError(
        env_message(via, path, std::string("cannot read the file: ") + e.what()));
  }
}

std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    lines.push_back(line);
    start = end + 1;
  }
  return lines;
}

std::vector<Word> split_words(std::string_view line) {
  std::vector<Word> words;
  std::size_t pos = 0;
  while (pos < line.size()) {
    while (pos < line.size() && (line[pos] == ' ' || line[pos] == '\t')) ++pos;
    const std::size_t start = pos;
    while (pos < line.size() && line[pos] != ' ' && line[pos] != '\t') ++pos;
    if (pos > start) words.push_back({line.substr(start, pos - start), start + 1});
  }
  return words;
}

bool SlotTally::add(std::string_view host, int slots) {
  const auto [it, inserted] = index_of_.try_emplace(std::string(host), nodes_.size());
  if (inserted) {
    nodes_.push_back({std::string(host), slots});
    return true;
  }
  NodeSlots& node = nodes_[it->second];
  if (node.slots > kMaxSlots - slots) return false;
  node.slots += slots;
  return true;
}

}  // namespace ddprun
