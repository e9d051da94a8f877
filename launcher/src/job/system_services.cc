// The real system services resolve_plan_inputs uses (job_inputs.h): ports, run ids, name
// resolution, PATH, network interfaces and routes.
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <sched.h>
#include <sys/random.h>
#include <sys/socket.h>

#include <cerrno>
#include <system_error>

#include "ddprun/common/net.h"
#include "ddprun/common/unique_fd.h"
#include "ddprun/contract/errors.h"
#include "job/job_inputs.h"
#include "nodes/ports.h"
#include "plan/host_facts.h"
#include "plan/topology.h"

namespace ddprun {
namespace {

// 12 hex digits, from getrandom(2): std::random_device would tie the wheel's statically
// linked C++ runtime to glibc 2.36's arc4random.
std::string random_run_id() {
  unsigned char bytes[6] = {};
  std::size_t got = 0;
  while (got < sizeof bytes) {
    const ssize_t n = ::getrandom(bytes + got, sizeof bytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw std::system_error(errno, std::generic_category(), "getrandom");
    got += static_cast<std::size_t>(n);
  }
  std::string id;
  for (const unsigned char byte : bytes) {
    id += "0123456789abcdef"[byte >> 4];
    id += "0123456789abcdef"[byte & 15];
  }
  return id;
}

std::vector<NetworkInterface> network_interfaces() {
  std::vector<NetworkInterface> result;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return result;
  for (const ifaddrs* entry = list; entry != nullptr; entry = entry->ifa_next) {
    if ((entry->ifa_flags & IFF_UP) == 0) continue;
    std::string text = address_text(entry->ifa_addr);
    if (text.empty()) continue;
    result.push_back({entry->ifa_name, std::move(text), (entry->ifa_flags & IFF_LOOPBACK) != 0});
  }
  ::freeifaddrs(list);
  return result;
}

// The kernel's own route lookup: connect() on a UDP socket sends nothing but binds the
// socket to the source address of the route to `address`.
std::string source_address(const std::string& address) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  hints.ai_flags = AI_NUMERICHOST;
  addrinfo* found = nullptr;
  if (::getaddrinfo(address.c_str(), "9", &hints, &found) != 0) return {};
  std::string source;
  for (const addrinfo* entry = found; entry != nullptr && source.empty(); entry = entry->ai_next) {
    const UniqueFd sock(::socket(entry->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (!sock.valid() || ::connect(sock.get(), entry->ai_addr, entry->ai_addrlen) != 0) continue;
    sockaddr_storage local{};
    socklen_t length = sizeof local;
    if (::getsockname(sock.get(), reinterpret_cast<sockaddr*>(&local), &length) == 0) {
      source = address_text(reinterpret_cast<const sockaddr*>(&local));
    }
  }
  ::freeaddrinfo(found);
  return source;
}

// The CPUs this process may run on (its affinity mask, inherited from Slurm's --cpu-bind,
// taskset or a batch system's binding); empty when unknown.
CpuList inherited_cpus() {
  CpuList cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(static_cast<std::size_t>(cpu), &set)) cpus.push_back(cpu);
  }
  return cpus;
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
          },
          network_interfaces,
          source_address,
          [] { return read_topology(); },
          inherited_cpus};
}

}  // namespace ddprun
