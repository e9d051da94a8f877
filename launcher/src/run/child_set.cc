#include "run/child_set.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>
#include <system_error>

#include "ddprun/common/net.h"

namespace ddprun {

ChildSet::~ChildSet() {
  for (Child& child : children_) {
    // Whatever is written on the connection next (the rendezvous's lines) would land
    // inside the line it did not take whole: the node is let go, as one that reads nothing.
    if (child.connection >= 0 && child.outbox.unsent() > 0) {
      ::shutdown(child.connection, SHUT_RDWR);
    }
    if (child.exited || child.pid == 0) continue;
    kill_and_wait(child);
  }
  if (standby_) kill_and_wait(*standby_);
}

void ChildSet::kill_and_wait(const Child& child) {
  signal_group(child.pid, SIGKILL);
  int status = 0;
  while (::waitpid(child.pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (guardian_ != nullptr) guardian_->forget(child.pid);
}

void ChildSet::start_standby(SpawnSpec spec) {
  if (standby_) kill_and_wait(*standby_);
  standby_.reset();
  Pipe out = make_pipe();
  Pipe err = make_pipe();
  Pipe in = make_pipe(/*nonblocking_read=*/false);
  spec.stdout_fd = out.write_end.get();
  spec.stderr_fd = err.write_end.get();
  spec.stdin_fd = in.read_end.get();
  Child child;
  child.pid = spawn_process(spec, signals_.original_mask());
  if (guardian_ != nullptr) guardian_->watch(child.pid);
  child.out = std::move(out.read_end);
  child.err = std::move(err.read_end);
  child.stdin_pipe = std::move(in.write_end);
  // Its message must never wait for it (take_standby): room for a large environment, and a
  // write that returns at once.
  (void)::fcntl(child.stdin_pipe.get(), F_SETPIPE_SZ, kStandbyPipeBytes);
  (void)::fcntl(child.stdin_pipe.get(), F_SETFL,
                ::fcntl(child.stdin_pipe.get(), F_GETFL) | O_NONBLOCK);
  standby_ = std::move(child);
}

std::optional<std::size_t> ChildSet::take_standby(std::string_view message) {
  reap_standby();
  if (!standby_) return std::nullopt;
  Child child = std::move(*standby_);
  standby_.reset();
  // The loop never waits for a spare that reads nothing yet (still loading, or hung): the
  // message goes whole into its empty pipe at once, or the spare is not used. One that ended
  // meanwhile takes none either.
  std::string_view rest = message;
  while (!rest.empty()) {
    const ssize_t written = ::write(child.stdin_pipe.get(), rest.data(), rest.size());
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) break;
    rest.remove_prefix(static_cast<std::size_t>(written));
  }
  if (!rest.empty()) {
    kill_and_wait(child);
    return std::nullopt;
  }
  child.stdin_pipe.reset();               // its end of input: one message
  child.started_at = SteadyClock::now();  // the rank's time counts from here
  children_.push_back(std::move(child));
  return children_.size() - 1;
}

void ChildSet::reap_standby() {
  if (!standby_) return;
  int status = 0;
  pid_t pid = 0;
  do {
    pid = ::wait4(standby_->pid, &status, WNOHANG, nullptr);
  } while (pid < 0 && errno == EINTR);
  if (pid != standby_->pid) return;
  signal_group(standby_->pid, SIGKILL);
  if (guardian_ != nullptr) guardian_->forget(standby_->pid);
  standby_.reset();
  standby_end_ = status;
}

std::size_t ChildSet::start(SpawnSpec spec, const std::string& input, bool keep_stdin, bool beats) {
  Pipe out = make_pipe();
  Pipe err = make_pipe();
  Pipe in = input.empty() ? Pipe{} : make_pipe(/*nonblocking_read=*/false);
  spec.stdout_fd = out.write_end.get();
  spec.stderr_fd = err.write_end.get();
  spec.stdin_fd = in.read_end.valid() ? in.read_end.get() : -1;
  Child& child = children_.emplace_back();
  child.started_at = SteadyClock::now();
  try {
    child.pid = spawn_process(spec, signals_.original_mask());
  } catch (...) {
    children_.pop_back();
    throw;
  }
  if (guardian_ != nullptr) guardian_->watch(child.pid);
  // Our copies of the write ends close when `out` and `err` go: EOF then means the
  // child's side is done.
  child.out = std::move(out.read_end);
  child.err = std::move(err.read_end);
  if (!input.empty()) {
    // A first message fits in the pipe; a reader that died already is noticed later.
    write_all(in.write_end.get(), input);
    if (keep_stdin) child.stdin_pipe = std::move(in.write_end);
  }
  child.stdin_beats = beats && child.stdin_pipe.valid();
  child.beat = watch_.start(child.started_at);
  return children_.size() - 1;
}

std::size_t ChildSet::connect(int socket, const std::string& hello, LineEnd line_end,
                              std::size_t max_line) {
  Child& child = children_.emplace_back();
  child.pid = 0;
  child.started_at = SteadyClock::now();
  child.connection = socket;
  child.reading = true;
  child.line_end = std::move(line_end);
  child.max_line = max_line;
  child.beat = watch_.start(child.started_at);
  // A first message fits in an idle socket's buffer; a peer that is gone shows as the
  // connection's end when it is read.
  (void)send(children_.size() - 1, hello);
  return children_.size() - 1;
}

std::size_t ChildSet::await_connection(SteadyClock::time_point until) {
  Child& child = children_.emplace_back();
  child.pid = 0;
  child.started_at = SteadyClock::now();
  child.await_until = until;
  return children_.size() - 1;
}

void ChildSet::attach(std::size_t index, int socket, const std::string& hello, LineEnd line_end,
                      std::size_t max_line) {
  Child& child = children_.at(index);
  if (!awaiting(index)) throw std::logic_error("attach: the child awaits no connection");
  child.await_until.reset();
  child.connection = socket;
  child.reading = true;
  child.line_end = std::move(line_end);
  child.max_line = max_line;
  child.beat = watch_.start(SteadyClock::now());
  (void)send(index, hello);
}

void ChildSet::end_overdue_awaits(const ChildEvents& events) {
  const auto now = SteadyClock::now();
  for (std::size_t i = 0; i < children_.size(); ++i) {
    if (!awaiting(i) || now < *children_[i].await_until) continue;
    const auto waited = std::chrono::ceil<std::chrono::seconds>(*children_[i].await_until -
                                                                children_[i].started_at);
    if (events.output) {
      events.output(i, true,
                    "ddprun: this node's ddprun did not join again within " +
                        std::to_string(waited.count()) + " s\n");
    }
    end_connection(i, 255 << 8, events);
  }
}

bool ChildSet::send(std::size_t index, std::string_view message) {
  Child& child = children_.at(index);
  ssize_t written = -1;
  do {
    if (child.connection >= 0) {
      if (child.exited) return false;
      watch_.sent(child.beat, SteadyClock::now());  // a line is a beat
      return child.outbox.send(child.connection, message);
    } else if (child.stdin_pipe.valid()) {
      const int input = child.stdin_pipe.get();
      ::fcntl(input, F_SETFL, ::fcntl(input, F_GETFL) | O_NONBLOCK);
      written = ::write(input, message.data(), message.size());
    } else {
      return false;
    }
  } while (written < 0 && errno == EINTR);
  return written == static_cast<ssize_t>(message.size());
}

void ChildSet::kill(std::size_t index, const ChildEvents& events) {
  Child& child = children_.at(index);
  if (child.exited) return;
  if (child.pid != 0) {
    signal_group(child.pid, SIGKILL);
    return;
  }
  end_connection(index, SIGKILL, events);  // as a process killed by SIGKILL
}

void ChildSet::end_connection(std::size_t index, int wait_status, const ChildEvents& events) {
  Child& child = children_.at(index);
  child.exited = true;
  if (child.reading) {
    child.reading = false;
    if (events.output) {
      events.output(index, false, {});
      events.output(index, true, {});
    }
  }
  const ChildExit exit{
      wait_status, 0, std::chrono::duration<double>(SteadyClock::now() - child.started_at).count()};
  if (events.exited) events.exited(index, exit);
}

void ChildSet::pump_connection(std::size_t index, const ChildEvents& events) {
  Child& child = children_[index];
  const ssize_t got = recv_to_line_end(child.connection, buffer_.data(), buffer_.size());
  if (got < 0 && (errno == EINTR || errno == EAGAIN)) return;
  if (got <= 0) {
    if (events.output) {
      // ETIMEDOUT: the kernel's keepalive gave up on the node (keep_alive, net.h).
      const std::string why = got == 0 ? "it closed the connection"
                              : errno == ETIMEDOUT
                                  ? "no answer within " + std::to_string(kPeerDeadAfterSeconds) +
                                        " s (its host is down, or the network to it is cut)"
                                  : std::string(std::strerror(errno));
      events.output(index, true,
                    "ddprun: lost the connection to this node's ddprun: " + why + "\n");
    }
    end_connection(index, 255 << 8, events);
    // Nothing is written on it again: the rendezvous closes a lost node's socket when the
    // node joins again, and its number may then be another's.
    child.connection = -1;
    return;
  }
  child.beat.heard_at = SteadyClock::now();
  child.line.append(buffer_.data(), static_cast<std::size_t>(got));
  if (child.line.back() != '\n') {
    if (child.line.size() > child.max_line) {
      end_connection(index, 255 << 8, events);
      child.connection = -1;  // not a ddprun: nothing more is said to it
    }
    return;
  }
  child.line.pop_back();
  std::string line = std::move(child.line);
  child.line.clear();
  if (line.empty()) return;  // a heartbeat
  if (const auto code = child.line_end(line)) {
    end_connection(index, (*code & 0xff) << 8, events);
    return;
  }
  line += '\n';
  if (events.output) events.output(index, true, line);
}

void ChildSet::close_output(const ChildEvents& events) {
  for (std::size_t i = 0; i < children_.size(); ++i) {
    if (children_[i].reading) {
      children_[i].reading = false;  // a connection not read again: its exit is a kill's
      if (events.output) {
        events.output(i, false, {});
        events.output(i, true, {});
      }
      continue;
    }
    for (const bool is_stderr : {false, true}) {
      UniqueFd& fd = is_stderr ? children_[i].err : children_[i].out;
      if (!fd.valid()) continue;
      fd.reset();
      if (events.output) events.output(i, is_stderr, {});
    }
  }
}

void ChildSet::wait_once(std::optional<SteadyClock::time_point> deadline, int extra_fd,
                         const ChildEvents& events) {
  std::vector<pollfd> fds;
  std::vector<std::pair<std::size_t, bool>> owners;  // (child, is_stderr) of fds[2..]
  fds.push_back({signals_.fd(), POLLIN, 0});
  fds.push_back({extra_fd, POLLIN, 0});  // a negative fd is ignored by poll
  for (std::size_t i = 0; i < children_.size(); ++i) {
    if (children_[i].reading) {
      // Writable too while the rest of a line waits for room in its socket.
      const bool unsent = children_[i].outbox.unsent() > 0;
      fds.push_back(
          {children_[i].connection, static_cast<short>(POLLIN | (unsent ? POLLOUT : 0)), 0});
      owners.emplace_back(i, true);
      continue;
    }
    for (const bool is_stderr : {false, true}) {
      const UniqueFd& fd = is_stderr ? children_[i].err : children_[i].out;
      if (!fd.valid()) continue;
      fds.push_back({fd.get(), POLLIN, 0});
      owners.emplace_back(i, is_stderr);
    }
  }
  const std::size_t first_output = fds.size();  // then the descriptors to write to
  std::vector<int> outputs;
  if (events.write_interest) events.write_interest(outputs);
  for (const int fd : outputs) fds.push_back({fd, POLLOUT, 0});
  const std::size_t first_input = fds.size();  // then the more descriptors to read
  std::vector<int> inputs;
  if (events.read_interest) events.read_interest(inputs);
  for (const int fd : inputs) fds.push_back({fd, POLLIN, 0});
  if (const auto due = heartbeat_due(); due && (!deadline || *due < *deadline)) deadline = due;
  for (const Child& child : children_) {
    if (child.await_until && !child.exited && (!deadline || *child.await_until < *deadline)) {
      deadline = child.await_until;
    }
  }
  int timeout_ms = -1;
  if (deadline) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(*deadline - SteadyClock::now());
    timeout_ms = static_cast<int>(std::clamp<long long>(left.count(), 0, 1 << 30));
  }
  const int ready = ::poll(fds.data(), fds.size(), timeout_ms);
  if (ready < 0) {
    if (errno == EINTR) return;
    throw std::system_error(errno, std::generic_category(), "poll");
  }
  // Output first, then exits: a child's last lines are relayed before its exit is known.
  for (std::size_t k = 2; k < first_output; ++k) {
    if (fds[k].revents == 0) continue;
    const auto [child, is_stderr] = owners[k - 2];
    if (children_[child].reading) {
      Child& peer = children_[child];
      if ((fds[k].revents & POLLOUT) != 0) (void)peer.outbox.send(peer.connection, {});
      if ((fds[k].revents & ~POLLOUT) != 0) pump_connection(child, events);
    } else {
      pump(child, is_stderr, events);
    }
  }
  for (std::size_t k = first_output; k < first_input; ++k) {
    if (fds[k].revents != 0 && events.writable) events.writable(fds[k].fd);
  }
  if (fds[0].revents != 0) {
    while (const int sig = signals_.read_signal()) {
      if (sig == SIGCHLD) {
        reap(events);
      } else if (events.signal) {
        events.signal(sig);
      }
    }
  }
  if (fds[1].revents != 0 && events.extra_ready) events.extra_ready();
  for (std::size_t k = first_input; k < fds.size(); ++k) {
    if (fds[k].revents != 0 && events.readable) events.readable(fds[k].fd);
  }
  keep_heartbeats(events);
  end_overdue_awaits(events);
}

std::optional<SteadyClock::time_point> ChildSet::heartbeat_due() const {
  if (!watch_.on()) return std::nullopt;
  std::optional<SteadyClock::time_point> due;
  for (const Child& child : children_) {
    if (!beats(child)) continue;
    const auto at = watch_.due(child.beat, child.connection >= 0 && child.reading);
    if (!due || at < *due) due = at;
  }
  return due;
}

void ChildSet::beat(std::size_t index, SteadyClock::time_point now) {
  Child& child = children_[index];
  if (child.connection >= 0) {
    (void)child.outbox.beat(child.connection);
  } else {
    (void)send(index, "\n");  // one byte: whole or not at all; a full pipe: a stuck reader
  }
  watch_.sent(child.beat, now);
}

void ChildSet::send_heartbeats() {
  const auto now = SteadyClock::now();
  for (std::size_t i = 0; i < children_.size(); ++i) {
    if (beats(children_[i])) beat(i, now);
  }
}

void ChildSet::keep_heartbeats(const ChildEvents& events) {
  if (!watch_.on()) return;
  const auto now = SteadyClock::now();
  watch_.turn(now);
  for (std::size_t i = 0; i < children_.size(); ++i) {
    Child& child = children_[i];
    if (!beats(child)) continue;
    if (child.connection >= 0 && child.reading && watch_.silent(child.beat, now)) {
      if (events.output) {
        events.output(i, true,
                      "ddprun: lost this node's ddprun: not a line from it in " +
                          watch_.beat().silence() +
                          ", though its host answers (it is stopped, by SIGSTOP or a "
                          "debugger, or hung)\n");
      }
      end_connection(i, 255 << 8, events);
    }
    // Never waiting: a node that reads nothing has a full socket, and is silent itself.
    if (watch_.beat_due(child.beat, now)) beat(i, now);
  }
}

void ChildSet::reap(const ChildEvents& events) {
  reap_standby();
  for (std::size_t i = 0; i < children_.size(); ++i) {
    Child& child = children_[i];
    if (child.exited || child.pid == 0) continue;
    int status = 0;
    rusage usage{};
    pid_t pid = 0;
    do {
      pid = ::wait4(child.pid, &status, WNOHANG, &usage);
    } while (pid < 0 && errno == EINTR);
    if (pid != child.pid) continue;
    child.exited = true;
    child.stdin_pipe.reset();
    // Whatever the child left behind in its group goes with it.
    signal_group(child.pid, SIGKILL);
    if (guardian_ != nullptr) guardian_->forget(child.pid);
    const ChildExit exit{
        status, usage.ru_maxrss,
        std::chrono::duration<double>(SteadyClock::now() - child.started_at).count()};
    if (events.exited) events.exited(i, exit);
  }
}

void ChildSet::pump(std::size_t child, bool is_stderr, const ChildEvents& events) {
  UniqueFd& fd = is_stderr ? children_[child].err : children_[child].out;
  const ssize_t got = ::read(fd.get(), buffer_.data(), buffer_.size());
  if (got < 0 && (errno == EINTR || errno == EAGAIN)) return;
  if (got <= 0) {
    fd.reset();
    if (events.output) events.output(child, is_stderr, {});
    return;
  }
  if (events.output) {
    events.output(child, is_stderr, {buffer_.data(), static_cast<std::size_t>(got)});
  }
}

std::vector<CapturedRun> run_all_captured(SignalChannel& signals, std::vector<SpawnSpec> specs,
                                          const std::vector<std::string>& inputs, int timeout_ms,
                                          const std::function<bool(int)>& on_signal) {
  std::vector<CapturedRun> results(specs.size());
  ChildSet children(signals);
  for (std::size_t i = 0; i < specs.size(); ++i) {
    children.start(std::move(specs[i]), i < inputs.size() ? inputs[i] : std::string());
  }
  ChildEvents events;
  events.output = [&](std::size_t child, bool is_stderr, std::string_view data) {
    (is_stderr ? results[child].err : results[child].out).append(data);
  };
  events.exited = [&](std::size_t child, const ChildExit& exit) {
    results[child].wait_status = exit.wait_status;
  };
  bool give_up = false;
  if (on_signal) events.signal = [&](int sig) { give_up = on_signal(sig) || give_up; };
  const auto deadline = SteadyClock::now() + std::chrono::milliseconds(timeout_ms);
  bool killed = false;
  while (children.running_count() > 0 || children.output_open()) {
    if (!killed && (give_up || SteadyClock::now() >= deadline)) {
      for (std::size_t i = 0; i < results.size(); ++i) {
        if (!children.running(i)) continue;
        results[i].timed_out = true;
        signal_group(children.pid(i), SIGKILL);
      }
      children.close_output({});
      killed = true;
    }
    children.wait_once(killed ? std::nullopt : std::optional(deadline), -1, events);
  }
  return results;
}

}  // namespace ddprun
