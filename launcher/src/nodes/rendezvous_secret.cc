#include "nodes/rendezvous_secret.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <system_error>

#include "ddprun/common/files.h"
#include "ddprun/common/printable.h"
#include "ddprun/contract/env_names.h"

namespace ddprun {
namespace {

RendezvousSecret without(const std::string& why) {
  return {"", "",
          "ddprun: warning: the launchers' rendezvous has no shared secret: " + why +
              "; any process that reaches the rendezvous port and knows the run id can join "
              "(set DDPRUN_RDZV_TOKEN to the same value on every node, or see "
              "docs/fault-tolerance.md#the-launchers-rendezvous)\n"};
}

// The token file's secret; throws std::system_error or returns a warning.
RendezvousSecret read_token_file(const std::string& home, bool create) {
  const std::string folder = home + "/" + kTokenFileFolder;
  const std::string path = folder + "/" + kTokenFileName;
  const RendezvousSecret missing =
      without(path + " does not exist (node 0's ddprun creates it: is the home folder shared " +
              "between the nodes?)");
  struct stat info {};
  if (!create && ::lstat(folder.c_str(), &info) != 0 && errno == ENOENT) return missing;
  const FolderCheck check =
      create ? make_private_directory(folder) : check_private_directory(folder);
  if (!check.ok()) {
    return without(check.problem + (check.only_mode ? " (chmod 700 " + folder + " mends it)" : ""));
  }
  if (::lstat(path.c_str(), &info) != 0) {
    if (errno != ENOENT) throw std::system_error(errno, std::generic_category(), "lstat " + path);
    if (!create) return missing;
    // Written whole under a name of its own, then linked in place: a node 0 of another job
    // that makes it at the same time never reads a half-written token (link keeps the
    // first one).
    const std::string token = random_nonce() + "\n";
    const std::string draft = path + "." + random_nonce().substr(0, 16);
    write_new_file(draft, token);
    const int linked = ::link(draft.c_str(), path.c_str());
    const int link_error = errno;
    ::unlink(draft.c_str());
    if (linked != 0 && link_error != EEXIST) {
      throw std::system_error(link_error, std::generic_category(), "link " + path);
    }
    if (::lstat(path.c_str(), &info) != 0) {
      throw std::system_error(errno, std::generic_category(), "lstat " + path);
    }
  }
  if (!S_ISREG(info.st_mode)) return without(path + " is not a regular file");
  if (info.st_uid != ::geteuid()) {
    return without(path + " belongs to user id " + std::to_string(info.st_uid) + ", not to you");
  }
  if ((info.st_mode & 077) != 0) {
    return without(path + " may be read by others (chmod 600 " + path + ")");
  }
  std::string secret = read_file_head(path, 4096);
  while (!secret.empty() && std::strchr(" \t\r\n", secret.back()) != nullptr) secret.pop_back();
  if (secret.empty()) return without(path + " is empty");
  return {secret, path, ""};
}

}  // namespace

RendezvousSecret rendezvous_secret(const Environment& env, bool create) {
  if (auto token = lookup(env, env::kDdprunRdzvToken); token && !token->empty()) {
    return {*token, env::kDdprunRdzvToken, ""};
  }
  const auto home = lookup(env, "HOME");
  if (!home || home->empty() || home->front() != '/') {
    return without(std::string("DDPRUN_RDZV_TOKEN is unset and there is no home folder (HOME) ") +
                   "for a token file");
  }
  try {
    return read_token_file(*home, create);
  } catch (const std::exception& e) {  // a failed system call, no random bytes
    return without(e.what());
  }
}

std::string random_nonce() {
  unsigned char bytes[32];
  if (RAND_bytes(bytes, sizeof bytes) != 1)
    throw std::runtime_error("no random bytes (RAND_bytes)");
  return to_hex(bytes, sizeof bytes);
}

std::string proof_of_secret(std::string_view secret,
                            std::initializer_list<std::string_view> parts) {
  std::string message;
  for (const std::string_view part : parts) {
    message += std::to_string(part.size());
    message += ':';
    message += part;
  }
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  if (HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
           reinterpret_cast<const unsigned char*>(message.data()), message.size(), mac,
           &size) == nullptr) {
    throw std::runtime_error("HMAC-SHA256 failed");
  }
  return to_hex(mac, size);
}

bool same_proof(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace ddprun
