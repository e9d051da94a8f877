#pragma once
// How ranks find each other (PyTorch's init_method): "env://" (MASTER_ADDR, MASTER_PORT:
// rank 0's TCPStore, the default), "tcp://HOST:PORT" (the same store at a given address),
// or "file:///shared/path" (a FileStore on a file system every rank sees, for sites that
// block ports between nodes). No LibTorch.

#include <string>

namespace ddprun::worker {

struct InitMethod {
  enum class Kind { kEnv, kTcp, kFile };
  Kind kind = Kind::kEnv;
  std::string host;  // kTcp; IPv6 without brackets
  int port = 0;      // kTcp
  std::string path;  // kFile: absolute
};

// Throws ddprun::ConfigError with one line naming the value.
InitMethod parse_init_method(const std::string& text);

}  // namespace ddprun::worker
