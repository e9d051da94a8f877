#include "idx.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "ddprun/worker/errors.h"

#include "temp_dir.h"

namespace ddprun::worker {
namespace {

std::string idx_bytes(std::vector<std::uint32_t> dims, const std::string& data, int type = 8) {
  std::string out{'\0', '\0', static_cast<char>(type), static_cast<char>(dims.size())};
  for (auto d : dims) {
    for (int shift = 24; shift >= 0; shift -= 8)
      out.push_back(static_cast<char>((d >> shift) & 0xff));
  }
  return out + data;
}

class IdxTest : public ::testing::Test {
 protected:
  std::string write_plain(const std::string& name, const std::string& bytes) {
    const auto path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }
  std::string write_gz(const std::string& name, const std::string& bytes) {
    const auto path = (dir_ / name).string();
    gzFile f = gzopen(path.c_str(), "wb");
    gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
    gzclose(f);
    return path;
  }
  std::string error_of(const std::string& path, int rank = 0) {
    try {
      read_idx(path, rank);
    } catch (const DataError& e) {
      return e.what();
    }
    return "(no error)";
  }

  ddprun::support::TempDir folder_;
  std::filesystem::path dir_ = folder_.path();
};

TEST_F(IdxTest, ReadsPlainAndGzippedAlike) {
  const std::string data = "\x01\x02\x03\x04\x05\x06";
  for (const auto& path : {write_plain("a-idx3-ubyte", idx_bytes({1, 2, 3}, data)),
                           write_gz("a-idx3-ubyte.gz", idx_bytes({1, 2, 3}, data))}) {
    const IdxArray a = read_idx(path, 3);
    EXPECT_EQ(a.dims, (std::vector<std::int64_t>{1, 2, 3})) << path;
    EXPECT_EQ(std::string(a.data.begin(), a.data.end()), data) << path;
  }
}

TEST_F(IdxTest, RejectsMalformedFilesNamingThem) {
  const auto truncated = write_gz("t.gz", idx_bytes({2, 2}, "\x01\x02\x03"));
  EXPECT_EQ(error_of(truncated), truncated + ": truncated: expected 4 bytes of data");

  const auto long_file = write_plain("l", idx_bytes({2}, "\x01\x02\x03"));
  EXPECT_EQ(error_of(long_file), long_file + ": longer than its header says (2 bytes of data)");

  const auto magic = write_plain("m", std::string("\x01\x00\x08\x01\x00\x00\x00\x01\x00", 9));
  EXPECT_EQ(error_of(magic), magic + ": bad magic number");

  const auto floats = write_plain("f", idx_bytes({1}, "abcd", 0x0d));
  EXPECT_EQ(error_of(floats), floats + ": element type is not unsigned byte");

  const auto rank = write_plain("r", idx_bytes({1}, "a"));
  EXPECT_EQ(error_of(rank, 3), rank + ": has 1 dimensions, expected 3");

  const auto header = write_plain("h", std::string("\x00\x00", 2));
  EXPECT_EQ(error_of(header), header + ": shorter than its header");

  const auto missing = (dir_ / "missing").string();
  EXPECT_EQ(error_of(missing), missing + ": cannot open");
}

TEST_F(IdxTest, CorruptGzipIsADataError) {
  std::string gz;
  {
    const auto path = write_gz("c.gz", idx_bytes({64}, std::string(64, 'x')));
    std::ifstream in(path, std::ios::binary);
    gz.assign(std::istreambuf_iterator<char>(in), {});
  }
  gz[gz.size() / 2] = static_cast<char>(gz[gz.size() / 2] ^ 0x55);
  gz[gz.size() / 2 + 1] = static_cast<char>(gz[gz.size() / 2 + 1] ^ 0x55);
  const auto path = write_plain("corrupt.gz", gz);
  EXPECT_THROW(read_idx(path), DataError);
}

}  // namespace
}  // namespace ddprun::worker
