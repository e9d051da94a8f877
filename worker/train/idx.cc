#include "idx.h"

#include <zlib.h>

#include <limits>
#include <memory>

#include "ddprun/worker/errors.h"

namespace ddprun::worker {
namespace {

constexpr unsigned kUnsignedByte = 0x08;
constexpr std::int64_t kMaxBytes = std::int64_t{1} << 34;  // 16 GiB: larger is a bad header

struct GzCloser {
  void operator()(gzFile_s* f) const { gzclose(f); }
};
using GzFile = std::unique_ptr<gzFile_s, GzCloser>;

[[noreturn]] void bad(const std::string& path, const std::string& why) {
  throw DataError(path + ": " + why, "expected an IDX file (plain or gzipped), as in MNIST");
}

// Reads exactly `size` bytes; false at a clean or premature end of data.
bool read_exact(gzFile file, void* out, std::size_t size, const std::string& path) {
  auto* p = static_cast<unsigned char*>(out);
  while (size > 0) {
    const unsigned chunk = static_cast<unsigned>(std::min<std::size_t>(size, 1u << 30));
    const int n = gzread(file, p, chunk);
    if (n < 0) {
      int errnum = 0;
      const char* msg = gzerror(file, &errnum);
      bad(path, std::string("corrupt data: ") + (msg != nullptr ? msg : "read error"));
    }
    if (n == 0) return false;
    p += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

}  // namespace

IdxArray read_idx(const std::string& path, int expected_rank) {
  GzFile file(gzopen(path.c_str(), "rb"));
  if (!file) throw DataError(path + ": cannot open", "check the data path in the config");

  unsigned char magic[4];
  if (!read_exact(file.get(), magic, sizeof magic, path)) bad(path, "shorter than its header");
  if (magic[0] != 0 || magic[1] != 0) bad(path, "bad magic number");
  if (magic[2] != kUnsignedByte) bad(path, "element type is not unsigned byte");
  const int rank = magic[3];
  if (rank == 0 || (expected_rank != 0 && rank != expected_rank)) {
    bad(path,
        "has " + std::to_string(rank) + " dimensions, expected " + std::to_string(expected_rank));
  }

  IdxArray out;
  std::int64_t total = 1;
  for (int i = 0; i < rank; ++i) {
    unsigned char b[4];
    if (!read_exact(file.get(), b, sizeof b, path)) bad(path, "shorter than its header");
    const std::int64_t dim = (std::int64_t{b[0]} << 24) | (std::int64_t{b[1]} << 16) |
                             (std::int64_t{b[2]} << 8) | std::int64_t{b[3]};
    out.dims.push_back(dim);
    total *= dim;
    if (total > kMaxBytes) bad(path, "dimensions are implausibly large");
  }
  out.data.resize(static_cast<std::size_t>(total));
  if (!read_exact(file.get(), out.data.data(), out.data.size(), path)) {
    bad(path, "truncated: expected " + std::to_string(total) + " bytes of data");
  }
  unsigned char extra = 0;
  if (read_exact(file.get(), &extra, 1, path)) {
    bad(path, "longer than its header says (" + std::to_string(total) + " bytes of data)");
  }
  return out;
}

}  // namespace ddprun::worker
