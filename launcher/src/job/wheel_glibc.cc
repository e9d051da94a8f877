// Linked into the wheel's ddprun only (DDPRUN_SELF_CONTAINED). GCC 12's static libstdc++
// refers to glibc 2.36's arc4random from std::random_device, which ddprun never uses (run
// ids come from getrandom); defining it here keeps the wheel installable on glibc 2.34
// (RHEL 9, Ubuntu 22.04). It is correct if called: bytes from getrandom(2).
#include <sys/random.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>

extern "C" std::uint32_t arc4random() {
  std::uint32_t value = 0;
  auto* bytes = reinterpret_cast<unsigned char*>(&value);
  std::size_t got = 0;
  while (got < sizeof value) {
    const ssize_t n = ::getrandom(bytes + got, sizeof value - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) std::abort();  // as glibc's: there is no failure to report
    got += static_cast<std::size_t>(n);
  }
  return value;
}
