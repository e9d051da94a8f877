#pragma once
// What the sequence explorations (supervision_sequences_test.cc, gather_sequences_test.cc)
// keep of a run: how many sequences ran, and one example of each kind of broken invariant.

#include <cstddef>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

namespace ddprun::testing {

struct Exploration {
  long sequences = 0;
  std::set<std::string> kinds;
  std::vector<std::string> violations;

  // Counts one sequence; a broken invariant (`broken`, empty: none) is kept with `sequence`
  // when its kind (its text up to the first of `kind_ends`: the numbers vary) is new.
  template <typename Describe>
  void add(const std::string& broken, const Describe& sequence,
           const char* kind_ends = "0123456789") {
    ++sequences;
    if (!broken.empty() && kinds.insert(broken.substr(0, broken.find_first_of(kind_ends))).second) {
      violations.push_back(broken + " <- " + sequence());
    }
  }
};

// Events per sequence: the environment variable `name` when set, else `sanitized` under the
// sanitizers (their job is the memory of every path, unoptimized and slow), else `optimized`.
inline std::size_t exploration_depth(const char* name, [[maybe_unused]] std::size_t optimized,
                                     [[maybe_unused]] std::size_t sanitized) {
  if (const char* text = std::getenv(name)) return static_cast<std::size_t>(std::atoi(text));
#ifdef __SANITIZE_ADDRESS__
  return sanitized;
#else
  return optimized;
#endif
}

}  // namespace ddprun::testing
