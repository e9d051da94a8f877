#include "ddprun/worker/shm_allreduce.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>
#include <type_traits>
#include <vector>

#include "cpus.h"

namespace ddprun::worker {

namespace {

constexpr std::uint64_t kMagic = 0x6464707275'6e534dULL;  // "ddprunSM"
constexpr std::size_t kLine = 64;                         // one cache line per counter
constexpr std::size_t kPage = 4096;
// Budget for both slot sets: 2 x (ranks + 1) chunks. Containers often get little shared memory.
constexpr std::size_t kBudgetBytes = 16u << 20;
constexpr std::size_t kMinChunk = 16u << 10;
constexpr std::size_t kMaxChunk = 256u << 10;  // measured: 64 KiB-1 MiB, 256 KiB best (L2)
// How long a waiter spins before it sleeps on the futex: longer than a typical gap between
// ranks reaching the same all-reduce, shorter than a step.
constexpr auto kSpin = std::chrono::microseconds(100);
constexpr auto kSleepSlice = std::chrono::milliseconds(10);

std::string errno_text(const std::string& what) {
  return what + ": " + std::strerror(errno);
}

std::size_t round_up(std::size_t n, std::size_t to) {
  return (n + to - 1) / to * to;
}

std::size_t chunk_bytes_for(int size) {
  const std::size_t chunk = kBudgetBytes / (2 * (static_cast<std::size_t>(size) + 1));
  return std::clamp(chunk / kPage * kPage, kMinChunk, kMaxChunk);
}

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// A process-shared futex on a word of the segment.
void futex_wait(std::atomic<std::uint32_t>* word, std::uint32_t expected,
                std::chrono::nanoseconds timeout) {
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(timeout.count() / 1'000'000'000);
  ts.tv_nsec = static_cast<long>(timeout.count() % 1'000'000'000);
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futex_wake_all(std::atomic<std::uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr,
          0);
}

template <typename T>
void reduce_share(T* out, const std::byte* slots, std::size_t slot_stride, int size, std::size_t lo,
                  std::size_t hi, ShmOp op) {
  const auto slot = [&](int r) {
    return reinterpret_cast<const T*>(slots + static_cast<std::size_t>(r) * slot_stride);
  };
  std::memcpy(out + lo, slot(0) + lo, (hi - lo) * sizeof(T));
  for (int r = 1; r < size; ++r) {
    const T* in = slot(r);
    switch (op) {
      case ShmOp::kSum:
        if constexpr (std::is_integral_v<T>) {
          // Wraps on overflow as gloo's sum does in practice; signed overflow would be UB.
          using U = std::make_unsigned_t<T>;
          for (std::size_t i = lo; i < hi; ++i)
            out[i] = static_cast<T>(static_cast<U>(out[i]) + static_cast<U>(in[i]));
        } else {
          for (std::size_t i = lo; i < hi; ++i) out[i] += in[i];
        }
        break;
      case ShmOp::kMin:
        for (std::size_t i = lo; i < hi; ++i) out[i] = in[i] < out[i] ? in[i] : out[i];
        break;
      case ShmOp::kMax:
        for (std::size_t i = lo; i < hi; ++i) out[i] = out[i] < in[i] ? in[i] : out[i];
        break;
    }
  }
}

std::size_t element_bytes(ShmType type) {
  switch (type) {
    case ShmType::kFloat32:
    case ShmType::kInt32:
      return 4;
    case ShmType::kFloat64:
    case ShmType::kInt64:
      return 8;
  }
  return 1;
}

// Locks byte `rank` of the segment for as long as this open file description lives (the
// process): its absence tells the others that the rank is gone.
bool lock_rank_byte(int fd, int rank) {
  struct flock lock {};
  lock.l_type = F_WRLCK;
  lock.l_whence = SEEK_SET;
  lock.l_start = rank;
  lock.l_len = 1;
  return fcntl(fd, F_OFD_SETLK, &lock) == 0;
}

}  // namespace

// The segment: a header line, one line per rank's phase counter, then two slot sets, each
// `size` input slots and one result, every one chunk_bytes long.
struct SharedMemoryAllreduce::Layout {
  struct alignas(kLine) Header {
    std::uint64_t magic;
    std::uint32_t size;
    std::uint32_t chunk_bytes;
  };
  struct alignas(kLine) Wake {
    std::atomic<std::uint32_t> epoch;       // bumped on every arrival; sleepers wait on it
    std::atomic<std::uint32_t> sleepers;    // ranks that may be in futex_wait
    std::atomic<std::uint32_t> aborted_by;  // 0, or 1 + the rank that called abort()
  };
  struct alignas(kLine) Counter {
    std::atomic<std::uint64_t> phase;
  };

  static std::size_t counters_offset() { return 2 * kLine; }
  static std::size_t data_offset(int size) {
    return round_up(counters_offset() + static_cast<std::size_t>(size) * kLine, kPage);
  }
  static std::size_t set_bytes(int size, std::size_t chunk) {
    return (static_cast<std::size_t>(size) + 1) * chunk;
  }
  static std::size_t total_bytes(int size, std::size_t chunk) {
    return data_offset(size) + 2 * set_bytes(size, chunk);
  }
};

static_assert(std::atomic<std::uint64_t>::is_always_lock_free);
static_assert(std::atomic<std::uint32_t>::is_always_lock_free);

std::unique_ptr<SharedMemoryAllreduce> SharedMemoryAllreduce::create(int size) {
  if (size < 1) throw SharedMemoryError("shared-memory all-reduce: size must be >= 1");
  // Anonymous memory (memfd), never a file in /dev/shm: it is freed when the last rank
  // holding it exits, whoever dies when. The others open it through /proc.
  const int fd = memfd_create("ddprun-allreduce", MFD_CLOEXEC);
  if (fd < 0) throw SharedMemoryError(errno_text("memfd_create"));
  const std::string name = "/proc/" + std::to_string(getpid()) + "/fd/" + std::to_string(fd);
  const std::size_t chunk = chunk_bytes_for(size);
  const std::size_t total = Layout::total_bytes(size, chunk);
  const auto fail = [&](const std::string& what) {
    const std::string text = what;
    close(fd);
    throw SharedMemoryError(text);
  };
  if (ftruncate(fd, static_cast<off_t>(total)) != 0) fail(errno_text("ftruncate"));
  // Reserve every page now: running out of memory then fails here, not with SIGBUS
  // mid-training.
  if (const int rc = posix_fallocate(fd, 0, static_cast<off_t>(total)); rc != 0) {
    fail(std::string("reserving ") + std::to_string(total >> 10) +
         " KiB of shared memory: " + std::strerror(rc));
  }
  void* base = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) fail(errno_text("mmap"));
  if (!lock_rank_byte(fd, 0)) {
    munmap(base, total);
    fail(errno_text("locking the segment"));
  }
  auto* header = new (base)
      Layout::Header{kMagic, static_cast<std::uint32_t>(size), static_cast<std::uint32_t>(chunk)};
  (void)header;
  auto* bytes = static_cast<std::byte*>(base);
  new (bytes + kLine) Layout::Wake{};
  for (int r = 0; r < size; ++r) {
    new (bytes + Layout::counters_offset() + static_cast<std::size_t>(r) * kLine) Layout::Counter{};
  }
  return std::unique_ptr<SharedMemoryAllreduce>(
      new SharedMemoryAllreduce(name, fd, 0, size, chunk, base, total));
}

std::unique_ptr<SharedMemoryAllreduce> SharedMemoryAllreduce::open(const std::string& name,
                                                                   int rank, int size) {
  if (rank < 0 || rank >= size) throw SharedMemoryError("shared-memory all-reduce: bad rank");
  const int fd = ::open(name.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) throw SharedMemoryError(errno_text("open " + name));
  const std::size_t chunk = chunk_bytes_for(size);
  const std::size_t total = Layout::total_bytes(size, chunk);
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<std::size_t>(st.st_size) != total) {
    close(fd);
    throw SharedMemoryError(name + ": not a segment for " + std::to_string(size) + " ranks");
  }
  void* base = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    const std::string text = errno_text("mmap " + name);
    close(fd);
    throw SharedMemoryError(text);
  }
  const auto* header = static_cast<const Layout::Header*>(base);
  if (header->magic != kMagic || header->size != static_cast<std::uint32_t>(size) ||
      header->chunk_bytes != chunk || !lock_rank_byte(fd, rank)) {
    munmap(base, total);
    close(fd);
    throw SharedMemoryError(name + ": wrong layout, or rank " + std::to_string(rank) +
                            " is already taken");
  }
  return std::unique_ptr<SharedMemoryAllreduce>(
      new SharedMemoryAllreduce(name, fd, rank, size, chunk, base, total));
}

SharedMemoryAllreduce::SharedMemoryAllreduce(std::string name, int fd, int rank, int size,
                                             std::size_t chunk_bytes, void* base,
                                             std::size_t mapped_bytes)
    : name_(std::move(name)),
      fd_(fd),
      rank_(rank),
      size_(size),
      chunk_bytes_(chunk_bytes),
      base_(base),
      mapped_bytes_(mapped_bytes),
      spin_(may_spin(size)) {}

SharedMemoryAllreduce::~SharedMemoryAllreduce() {
  munmap(base_, mapped_bytes_);
  close(fd_);
}

void SharedMemoryAllreduce::unlink() {
  // The name is this fd's number in /proc: move the segment to another number and close
  // this one. OFD locks belong to the open file description, so rank 0's lock stays.
  if (name_.empty()) return;
  const int moved = fcntl(fd_, F_DUPFD_CLOEXEC, 0);
  if (moved < 0) return;  // the name stays usable; harmless, as it is only a number
  close(fd_);
  fd_ = moved;
  name_.clear();
}

void SharedMemoryAllreduce::arrive() {
  auto* bytes = static_cast<std::byte*>(base_);
  auto* wake = reinterpret_cast<Layout::Wake*>(bytes + kLine);
  auto* mine = reinterpret_cast<Layout::Counter*>(bytes + Layout::counters_offset() +
                                                  static_cast<std::size_t>(rank_) * kLine);
  ++phase_;
  // Sequentially consistent on both sides (here and in wait_for_all): either the sleeper
  // sees this phase before it sleeps, or this sees the sleeper and wakes it.
  mine->phase.store(phase_);
  wake->epoch.fetch_add(1);
  if (wake->sleepers.load() != 0) futex_wake_all(&wake->epoch);
}

void SharedMemoryAllreduce::throw_if_aborted() const {
  const auto* wake =
      reinterpret_cast<const Layout::Wake*>(static_cast<const std::byte*>(base_) + kLine);
  if (const std::uint32_t by = wake->aborted_by.load(); by != 0) {
    throw SharedMemoryError("rank " + std::to_string(job_rank(static_cast<int>(by) - 1)) +
                            " abandoned the shared-memory collective");
  }
}

void SharedMemoryAllreduce::check_peers_alive() const {
  const auto* bytes = static_cast<const std::byte*>(base_);
  std::vector<int> gone;
  for (int r = 0; r < size_; ++r) {
    const auto* counter = reinterpret_cast<const Layout::Counter*>(
        bytes + Layout::counters_offset() + static_cast<std::size_t>(r) * kLine);
    if (r == rank_ || counter->phase.load() >= phase_) continue;
    struct flock probe {};
    probe.l_type = F_WRLCK;
    probe.l_whence = SEEK_SET;
    probe.l_start = r;
    probe.l_len = 1;
    if (fcntl(fd_, F_OFD_GETLK, &probe) == 0 && probe.l_type == F_UNLCK) gone.push_back(r);
  }
  if (gone.empty()) return;
  std::string text;
  for (const int r : gone) text += (text.empty() ? "" : ", ") + std::to_string(job_rank(r));
  throw SharedMemoryError(std::string(gone.size() == 1 ? "rank " : "ranks ") + text +
                          " exited during a shared-memory all-reduce");
}

void SharedMemoryAllreduce::wait_for_all(std::chrono::steady_clock::time_point deadline) {
  auto* bytes = static_cast<std::byte*>(base_);
  auto* wake = reinterpret_cast<Layout::Wake*>(bytes + kLine);
  const auto all_arrived = [&] {
    for (int r = 0; r < size_; ++r) {
      const auto* counter = reinterpret_cast<const Layout::Counter*>(
          bytes + Layout::counters_offset() + static_cast<std::size_t>(r) * kLine);
      if (counter->phase.load(std::memory_order_acquire) < phase_) return false;
    }
    return true;
  };
  if (all_arrived()) return;
  if (spin_) {
    const auto spin_until = std::chrono::steady_clock::now() + kSpin;
    for (unsigned i = 1;; ++i) {
      cpu_relax();
      if (all_arrived()) return;
      if (i % 64 == 0) {
        throw_if_aborted();
        if (std::chrono::steady_clock::now() >= spin_until) break;
      }
    }
  }
  for (;;) {
    wake->sleepers.fetch_add(1);
    const std::uint32_t epoch = wake->epoch.load();
    if (all_arrived()) {
      wake->sleepers.fetch_sub(1);
      return;
    }
    futex_wait(&wake->epoch, epoch, kSleepSlice);
    wake->sleepers.fetch_sub(1);
    if (all_arrived()) return;
    throw_if_aborted();
    check_peers_alive();
    if (std::chrono::steady_clock::now() >= deadline) {
      std::string missing;
      for (int r = 0; r < size_; ++r) {
        const auto* counter = reinterpret_cast<const Layout::Counter*>(
            bytes + Layout::counters_offset() + static_cast<std::size_t>(r) * kLine);
        if (counter->phase.load() < phase_)
          missing += (missing.empty() ? "" : ", ") + std::to_string(job_rank(r));
      }
      throw SharedMemoryError("shared-memory collective timed out waiting for rank(s) " + missing);
    }
  }
}

void SharedMemoryAllreduce::allreduce(void* data, std::size_t count, ShmType type, ShmOp op,
                                      std::chrono::milliseconds timeout) {
  reduce_chunks(data, count, type, op, -1, timeout);
}

void SharedMemoryAllreduce::reduce(void* data, std::size_t count, ShmType type, ShmOp op, int root,
                                   std::chrono::milliseconds timeout) {
  reduce_chunks(data, count, type, op, root, timeout);
}

void SharedMemoryAllreduce::reduce_chunks(void* data, std::size_t count, ShmType type, ShmOp op,
                                          int root, std::chrono::milliseconds timeout) {
  throw_if_aborted();  // an aborted segment is unusable, also for collectives begun later
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const std::size_t elem = element_bytes(type);
  const std::size_t per_chunk = chunk_bytes_ / elem;
  auto* user = static_cast<std::byte*>(data);
  for (std::size_t done = 0; done < count;) {
    const std::size_t n = std::min(per_chunk, count - done);
    std::byte* set = slot_set();
    std::byte* result = set + static_cast<std::size_t>(size_) * chunk_bytes_;
    std::memcpy(set + static_cast<std::size_t>(rank_) * chunk_bytes_, user + done * elem, n * elem);
    arrive();
    wait_for_all(deadline);
    // This rank's share of the chunk, reduced over every slot in rank order.
    const std::size_t lo = n * static_cast<std::size_t>(rank_) / static_cast<std::size_t>(size_);
    const std::size_t hi =
        n * (static_cast<std::size_t>(rank_) + 1) / static_cast<std::size_t>(size_);
    switch (type) {
      case ShmType::kFloat32:
        reduce_share(reinterpret_cast<float*>(result), set, chunk_bytes_, size_, lo, hi, op);
        break;
      case ShmType::kFloat64:
        reduce_share(reinterpret_cast<double*>(result), set, chunk_bytes_, size_, lo, hi, op);
        break;
      case ShmType::kInt32:
        reduce_share(reinterpret_cast<std::int32_t*>(result), set, chunk_bytes_, size_, lo, hi, op);
        break;
      case ShmType::kInt64:
        reduce_share(reinterpret_cast<std::int64_t*>(result), set, chunk_bytes_, size_, lo, hi, op);
        break;
    }
    arrive();
    wait_for_all(deadline);
    if (root < 0 || root == rank_) std::memcpy(user + done * elem, result, n * elem);
    ++chunks_done_;
    done += n;
  }
}

void SharedMemoryAllreduce::broadcast(void* data, std::size_t bytes, int root,
                                      std::chrono::milliseconds timeout) {
  throw_if_aborted();
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto* user = static_cast<std::byte*>(data);
  // One barrier per chunk is enough: a rank reads chunk k before it arrives anywhere in
  // chunk k + 1, and the root writes this set again only in chunk k + 2, after that arrival.
  for (std::size_t done = 0; done < bytes;) {
    const std::size_t n = std::min(chunk_bytes_, bytes - done);
    std::byte* result = slot_set() + static_cast<std::size_t>(size_) * chunk_bytes_;
    if (rank_ == root) std::memcpy(result, user + done, n);
    arrive();
    wait_for_all(deadline);
    if (rank_ != root) std::memcpy(user + done, result, n);
    ++chunks_done_;
    done += n;
  }
}

void SharedMemoryAllreduce::set_job_ranks(std::vector<int> ranks) {
  if (static_cast<int>(ranks.size()) == size_) job_ranks_ = std::move(ranks);
}

int SharedMemoryAllreduce::job_rank(int rank) const {
  return job_ranks_.empty() ? rank : job_ranks_[static_cast<std::size_t>(rank)];
}

std::byte* SharedMemoryAllreduce::slot_set() const {
  return static_cast<std::byte*>(base_) + Layout::data_offset(size_) +
         (chunks_done_ % 2) * Layout::set_bytes(size_, chunk_bytes_);
}

void SharedMemoryAllreduce::abort() {
  auto* wake = reinterpret_cast<Layout::Wake*>(static_cast<std::byte*>(base_) + kLine);
  std::uint32_t none = 0;
  wake->aborted_by.compare_exchange_strong(none, static_cast<std::uint32_t>(rank_) + 1);
  wake->epoch.fetch_add(1);
  futex_wake_all(&wake->epoch);
}

}  // namespace ddprun::worker
