#pragma once
// Table-test helpers for the scheduler readers: in-memory files, and one loop for valid
// and one for invalid environments.

#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "cluster.h"
#include "ddprun/contract/errors.h"
#include "schedulers.h"
#include "source.h"

namespace ddprun::testing {

using Files = std::map<std::string, std::string>;
using Nodes = std::vector<std::pair<std::string, int>>;

// A ReadFile over `files`; a missing path throws like read_file_from_disk.
inline ReadFile files_from(Files files) {
  return [files = std::move(files)](const std::string& path) {
    auto it = files.find(path);
    if (it == files.end()) {
      throw std::system_error(std::make_error_code(std::errc::no_such_file_or_directory),
                              "open " + path);
    }
    return it->second;
  };
}

// `env` with `name` set to `value`.
inline Environment with_value(Environment env, const std::string& name, const std::string& value) {
  env[name] = value;
  return env;
}

inline Nodes pairs(const std::vector<NodeSlots>& nodes) {
  Nodes result;
  for (const NodeSlots& node : nodes) result.emplace_back(node.host, node.slots);
  return result;
}

struct ValidCase {
  std::string name;
  Environment env;
  Files files;
  std::string hostname;
  Nodes nodes;
  std::optional<int> this_node;
  std::string job_id;
};

struct InvalidCase {
  std::string name;
  Environment env;
  Files files;
  std::string hostname;
  std::string message;  // exact what()
};

using Reader = Cluster (*)(const ReaderInput&);

inline void expect_valid(Reader reader, const std::string& scheduler,
                         const std::vector<ValidCase>& cases) {
  for (const ValidCase& c : cases) {
    SCOPED_TRACE(c.name);
    const ReadFile read = files_from(c.files);
    const HostFacts host{c.hostname, 4, 0};
    try {
      const Cluster cluster = reader(ReaderInput{c.env, read, host, std::nullopt});
      EXPECT_EQ(cluster.scheduler, scheduler);
      EXPECT_EQ(pairs(cluster.nodes), c.nodes);
      EXPECT_EQ(cluster.this_node, c.this_node);
      EXPECT_EQ(cluster.job_id, c.job_id);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "unexpected error: " << e.what();
    }
  }
}

// The readers throw SchedulerEnvError for everything they read from the environment.
inline void expect_invalid(Reader reader, const std::vector<InvalidCase>& cases) {
  for (const InvalidCase& c : cases) {
    SCOPED_TRACE(c.name);
    const ReadFile read = files_from(c.files);
    const HostFacts host{c.hostname, 4, 0};
    try {
      reader(ReaderInput{c.env, read, host, std::nullopt});
      ADD_FAILURE() << "expected an error";
    } catch (const SchedulerEnvError& e) {
      EXPECT_EQ(std::string(e.what()), c.message);
    }
  }
}

}  // namespace ddprun::testing
