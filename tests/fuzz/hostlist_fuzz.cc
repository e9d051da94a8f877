// libFuzzer entry point for the hostlist, counts and hostfile parsers. The first byte
// picks the parser; the rest is its input. The parsers may only throw HostlistError or
// ConfigError; whatever they return must satisfy the grammar's promises
// (docs/hostlist.md), and a parsed hostlist must parse back to itself.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "ddprun/contract/errors.h"
#include "hostfile.h"
#include "hostlist.h"

namespace {

// Smaller than the real cap so that each input stays fast; the cap logic is the same.
constexpr std::size_t kFuzzMaxHosts = 4096;

void check(bool condition) {
  if (!condition) std::abort();
}

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '.' || c == '_';
}

void fuzz_hostlist(std::string_view input) {
  std::vector<std::string> hosts;
  try {
    hosts = ddprun::parse_hostlist(input, kFuzzMaxHosts);
  } catch (const ddprun::HostlistError& e) {
    check(e.column() >= 1 && e.column() <= input.size() + 1);
    return;
  }
  check(!hosts.empty() && hosts.size() <= kFuzzMaxHosts);
  std::string joined;
  for (const std::string& host : hosts) {
    check(!host.empty() && host.size() <= ddprun::kMaxHostNameLength);
    for (char c : host) check(is_name_char(c));
    if (!joined.empty()) joined += ',';
    joined += host;
  }
  check(ddprun::parse_hostlist(joined, kFuzzMaxHosts) == hosts);
}

void fuzz_counts(std::string_view input) {
  std::vector<int> counts;
  try {
    counts = ddprun::parse_counts(input, kFuzzMaxHosts);
  } catch (const ddprun::HostlistError& e) {
    check(e.column() >= 1 && e.column() <= input.size() + 1);
    return;
  }
  check(!counts.empty() && counts.size() <= kFuzzMaxHosts);
  for (int count : counts) check(count >= 0);
}

void fuzz_hostfile(std::string_view input) {
  std::vector<ddprun::NodeSlots> nodes;
  try {
    nodes = ddprun::parse_hostfile(input, "fuzz", kFuzzMaxHosts);
  } catch (const ddprun::ConfigError& e) {
    check(std::string_view(e.what()).substr(0, 4) == "fuzz");
    return;
  }
  check(!nodes.empty() && nodes.size() <= kFuzzMaxHosts);
  std::set<std::string> seen;
  for (const ddprun::NodeSlots& node : nodes) {
    check(node.slots >= 1);
    check(seen.insert(node.host).second);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 3) {
    case 0:
      fuzz_hostlist(input);
      break;
    case 1:
      fuzz_counts(input);
      break;
    default:
      fuzz_hostfile(input);
      break;
  }
  return 0;
}
