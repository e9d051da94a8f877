#pragma once
// --dry-run output: the launch plan as text for people or as one JSON object for tools
// (field names are a stable interface: docs/environment.md).

#include <string>

#include "plan.h"

namespace ddprun {

std::string format_plan_text(const LaunchPlan& plan);
std::string format_plan_json(const LaunchPlan& plan);

}  // namespace ddprun
