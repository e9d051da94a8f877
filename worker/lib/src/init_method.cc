#include "ddprun/worker/init_method.h"

#include "ddprun/common/parse_int.h"
#include "ddprun/contract/errors.h"

namespace ddprun::worker {
namespace {

[[noreturn]] void refuse(const std::string& text, const std::string& why) {
  throw ddprun::ConfigError("init_method '" + text + "': " + why,
                            "use env://, tcp://HOST:PORT or file:///ABSOLUTE/PATH");
}

}  // namespace

InitMethod parse_init_method(const std::string& text) {
  InitMethod method;
  if (text.empty() || text == "env://") return method;
  if (text.rfind("file://", 0) == 0) {
    method.kind = InitMethod::Kind::kFile;
    method.path = text.substr(7);
    if (method.path.empty() || method.path.front() != '/') {
      refuse(text, "the file path must be absolute (file:///shared/run/store)");
    }
    if (method.path.back() == '/') refuse(text, "names a folder, not a file");
    return method;
  }
  if (text.rfind("tcp://", 0) == 0) {
    method.kind = InitMethod::Kind::kTcp;
    const std::string rest = text.substr(6);
    std::string port;
    if (!rest.empty() && rest.front() == '[') {
      const auto close = rest.find("]:");
      if (close == std::string::npos) refuse(text, "expected tcp://[IPV6]:PORT");
      method.host = rest.substr(1, close - 1);
      port = rest.substr(close + 2);
    } else {
      const auto colon = rest.rfind(':');
      if (colon == std::string::npos || rest.find(':') != colon) {
        refuse(text, "expected tcp://HOST:PORT (IPv6 in brackets)");
      }
      method.host = rest.substr(0, colon);
      port = rest.substr(colon + 1);
    }
    const auto number = parse_int(port);
    if (method.host.empty()) refuse(text, "no host");
    if (!number || *number < 1 || *number > 65535) refuse(text, "the port must be 1 to 65535");
    method.port = *number;
    return method;
  }
  refuse(text, "unknown scheme");
}

}  // namespace ddprun::worker
