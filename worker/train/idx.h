#pragma once
// Reader for IDX files (the MNIST format), gzipped or plain. No LibTorch.

#include <cstdint>
#include <string>
#include <vector>

namespace ddprun::worker {

// An unsigned-byte IDX array: dims (e.g. {60000, 28, 28}) and the data, row-major.
struct IdxArray {
  std::vector<std::int64_t> dims;
  std::vector<std::uint8_t> data;
};

// Reads `path`, gzipped or not (zlib reads both). Accepts only unsigned-byte arrays with
// `expected_rank` dimensions (0: any). Throws DataError naming the file when it is missing,
// has a bad magic number, the wrong rank, or is truncated or too long.
IdxArray read_idx(const std::string& path, int expected_rank = 0);

}  // namespace ddprun::worker
