#pragma once
// --dry-run output: the launch plan as text for people or as one JSON object for tools
// (field names are a stable interface: docs/environment.md).

#include <iosfwd>
#include <string>

#include "plan/plan.h"

namespace ddprun {

// Writes the plan to `out` a piece at a time as it is formatted, so that a plan of 100,000
// ranks (over 100 MB of text) is never held whole in memory. Errors of `out` are left in
// its state, as operator<< leaves them.
void write_plan_text(const LaunchPlan& plan, std::ostream& out);
void write_plan_json(const LaunchPlan& plan, std::ostream& out);

// The same output as one string, for small plans.
std::string format_plan_text(const LaunchPlan& plan);
std::string format_plan_json(const LaunchPlan& plan);

}  // namespace ddprun
