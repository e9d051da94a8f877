#include "collective_trace.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <ctime>
#include <new>

namespace ddprun::worker {
namespace {

std::int64_t now_ns() {
  timespec t{};
  ::clock_gettime(CLOCK_REALTIME, &t);
  return static_cast<std::int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

}  // namespace

TraceWriter::TraceWriter(const std::string& path, int rank) {
  if (path.empty()) return;
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return;
  if (::ftruncate(fd, sizeof(trace::TraceFile)) == 0) {
    void* mapped =
        ::mmap(nullptr, sizeof(trace::TraceFile), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (mapped != MAP_FAILED) {
      file_ = new (mapped) trace::TraceFile();
      file_->rank = rank;
    }
  }
  ::close(fd);
}

TraceWriter::~TraceWriter() {
  if (file_ != nullptr) ::munmap(file_, sizeof(trace::TraceFile));
}

trace::Entry* TraceWriter::begin(int plane, trace::Op op, std::uint64_t bytes) {
  if (file_ == nullptr || plane < 0 || plane >= trace::kPlanes) return nullptr;
  trace::PlaneTrace& p = file_->planes[plane];
  const std::uint64_t seq = p.started + 1;
  trace::Entry& entry = p.entries[(seq - 1) % trace::kEntries];
  entry.end_ns = 0;
  entry.start_ns = now_ns();
  entry.bytes = bytes;
  entry.op = static_cast<std::uint8_t>(op);
  __atomic_store_n(&entry.seq, seq, __ATOMIC_RELEASE);
  __atomic_store_n(&p.started, seq, __ATOMIC_RELEASE);  // the rank is in #seq from here
  return &entry;
}

void TraceWriter::end(trace::Entry* entry) {
  if (entry != nullptr) __atomic_store_n(&entry->end_ns, now_ns(), __ATOMIC_RELEASE);
}

}  // namespace ddprun::worker
