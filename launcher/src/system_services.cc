// The real system services resolve_plan_inputs uses (job_inputs.h): ports, run ids, name
// resolution, PATH.
#include <random>

#include "ddprun/common/net.h"
#include "ddprun/contract/errors.h"
#include "host_facts.h"
#include "job_inputs.h"
#include "ports.h"

namespace ddprun {
namespace {

// 12 hex digits.
std::string random_run_id() {
  std::random_device device;
  std::uniform_int_distribution<unsigned> digit(0, 15);
  std::string id;
  for (int i = 0; i < 12; ++i) id += "0123456789abcdef"[digit(device)];
  return id;
}

}  // namespace

SystemServices system_services(const Environment& env) {
  return {pick_free_port,
          port_is_free,
          random_run_id,
          resolve_addresses,
          describe_port_user,
          [env](const std::string& name) {
            try {
              resolve_program(name, env);
              return true;
            } catch (const ProgramError&) {
              return false;
            }
          }};
}

}  // namespace ddprun
