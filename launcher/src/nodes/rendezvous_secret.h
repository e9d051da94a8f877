#pragma once
// The launchers' shared secret (docs/fault-tolerance.md, "The launchers' rendezvous") and
// the proofs made with it. The secret never crosses the network: each side proves it holds
// it with an HMAC-SHA256 (OpenSSL's libcrypto) over a fresh random nonce from each side, so
// what one connection carries is worth nothing on another. Thread-safe.

#include <initializer_list>
#include <string>
#include <string_view>

#include "ddprun/contract/environment.h"

namespace ddprun {

// Where the secret comes from when DDPRUN_RDZV_TOKEN (env::kDdprunRdzvToken) is unset:
// $HOME/.ddprun/rdzv-token, shared between nodes where home is.
inline constexpr const char* kTokenFileFolder = ".ddprun";
inline constexpr const char* kTokenFileName = "rdzv-token";

struct RendezvousSecret {
  std::string secret;  // empty: none could be had
  std::string source;  // "DDPRUN_RDZV_TOKEN" or the token file's path, for messages
  // Why there is none, as "ddprun: warning: the launchers' rendezvous has no shared
  // secret: ...\n" (empty when there is one).
  std::string warning;
};

// DDPRUN_RDZV_TOKEN from `env` when set and not empty; else the token file, which must be a
// regular file of this user's (never through a link) with no permission bits for group or
// others, in a private folder (check_private_directory). With `create` (node 0), a missing
// folder is made 0700 and a missing file is made 0600 with 32 random bytes as hex. Never
// throws: whatever stands in the way is the warning, and the secret is empty.
RendezvousSecret rendezvous_secret(const Environment& env, bool create);

// 32 random bytes (RAND_bytes) as 64 lower-case hex digits. Throws std::runtime_error when
// the generator fails.
std::string random_nonce();

// HMAC-SHA256 under `secret` of `parts`, each prefixed with its length (so no two lists of
// parts read the same), as 64 hex digits.
std::string proof_of_secret(std::string_view secret, std::initializer_list<std::string_view> parts);

// Whether two proofs are equal, in a time that does not depend on where they differ
// (CRYPTO_memcmp).
bool same_proof(std::string_view a, std::string_view b);

}  // namespace ddprun
