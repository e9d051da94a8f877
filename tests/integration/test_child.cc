// A tiny worker for ddprun's integration tests. Its behaviour is chosen per rank by
// arguments of the form ACTION[@RANK] (no @RANK: every rank), run in order:
//   print:N        print N numbered lines to stdout ("rank R line I")
//   stderr:TEXT    print TEXT to stderr
//   partial        write one line to stdout in three pieces with pauses of no length
//   env            print the environment contract, one KEY=VALUE a line
//   grandchild     fork a child that sleeps forever (in the same process group)
//   ignore:SIG     ignore signal number SIG
//   error-file:MSG write a torchelastic error file with message MSG
//   ready          write "R <pid> <grandchild pid or 0>\n" to the fd in $TEST_READY_FD
//   wait-signal    block until SIGTERM, SIGINT, SIGUSR1 or SIGUSR2 arrives, print its
//                  name to stdout ("got SIGUSR1") and continue
//   sleep          sleep forever (until killed)
//   stuck          sleep forever inside stuck_in_named_function (a native frame to find)
//   exit:N         exit with status N
//   raise:SIG      kill itself with signal number SIG
//   fail-round:K:N exit with N when TORCHELASTIC_RESTART_COUNT is K
//   progress       write (TORCHELASTIC_RESTART_COUNT + 1) * 100 to $DDPRUN_PROGRESS_FILE
//   touch:PATH     create the file PATH
//   wait-file:PATH wait until the file PATH exists (another rank's touch)
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace {

int g_grandchild = 0;

// Not inlined, and named: the frame ddprun's stack capture must show.
[[gnu::noinline]] void stuck_in_named_function() {
  for (;;) {
    ::pause();
    asm volatile("");
  }
}

const sigset_t& waited_signals() {
  static const sigset_t set = [] {
    sigset_t signals;
    sigemptyset(&signals);
    for (int sig : {SIGTERM, SIGINT, SIGUSR1, SIGUSR2}) sigaddset(&signals, sig);
    return signals;
  }();
  return set;
}

void do_action(std::string_view action, int rank) {
  const auto colon = action.find(':');
  const std::string_view verb = action.substr(0, colon);
  const std::string arg =
      colon == std::string_view::npos ? "" : std::string(action.substr(colon + 1));
  if (verb == "print") {
    // One write per line: a worker stopped while printing leaves whole lines behind, so
    // a log that ends mid-line is ddprun's doing (stdio's 4 KiB blocks would cut lines).
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    const int count = std::atoi(arg.c_str());
    for (int i = 0; i < count; ++i) std::printf("rank %d line %d\n", rank, i);
    std::fflush(stdout);
  } else if (verb == "stderr") {
    std::fprintf(stderr, "%s\n", arg.c_str());
  } else if (verb == "partial") {
    for (const char* piece : {"first piece, ", "second piece, ", "end\n"}) {
      if (::write(STDOUT_FILENO, piece, std::strlen(piece)) < 0) std::exit(90);
    }
  } else if (verb == "env") {
    for (const char* name :
         {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
          "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME", "MASTER_ADDR", "MASTER_PORT",
          "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS",
          "TORCHELASTIC_ERROR_FILE", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "DDPRUN_HOST"}) {
      const char* value = std::getenv(name);
      std::printf("%s=%s\n", name, value != nullptr ? value : "<unset>");
    }
    std::fflush(stdout);
  } else if (verb == "grandchild") {
    const pid_t pid = ::fork();
    if (pid == 0) {
      for (;;) ::pause();
    }
    g_grandchild = pid;
  } else if (verb == "ignore") {
    ::signal(std::atoi(arg.c_str()), SIG_IGN);
  } else if (verb == "error-file") {
    const char* path = std::getenv("TORCHELASTIC_ERROR_FILE");
    if (path == nullptr) std::exit(93);
    if (FILE* file = std::fopen(path, "w")) {
      std::fprintf(file, "{\"message\": {\"message\": \"%s\", \"extraInfo\": {}}}", arg.c_str());
      std::fclose(file);
    }
  } else if (verb == "ready") {
    const char* fd_text = std::getenv("TEST_READY_FD");
    if (fd_text == nullptr) std::exit(91);
    char line[64];
    const int length = std::snprintf(line, sizeof line, "%d %d %d\n", rank,
                                     static_cast<int>(::getpid()), g_grandchild);
    if (::write(std::atoi(fd_text), line, static_cast<std::size_t>(length)) != length)
      std::exit(92);
  } else if (verb == "wait-signal") {
    int sig = 0;
    ::sigwait(&waited_signals(), &sig);
    std::printf("got SIG%s\n", sigabbrev_np(sig));
    std::fflush(stdout);
  } else if (verb == "touch") {
    const int fd = ::open(arg.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
    if (fd < 0) std::exit(96);
    ::close(fd);
  } else if (verb == "wait-file") {
    // Another rank's step, not a stand-in for one: it touches the file when it is there.
    while (::access(arg.c_str(), F_OK) != 0) ::usleep(1000);
  } else if (verb == "sleep") {
    for (;;) ::pause();
  } else if (verb == "stuck") {
    stuck_in_named_function();
  } else if (verb == "exit") {
    std::exit(std::atoi(arg.c_str()));
  } else if (verb == "raise") {
    const int sig = std::atoi(arg.c_str());
    ::signal(sig, SIG_DFL);
    ::raise(sig);
  } else if (verb == "progress") {
    const char* path = std::getenv("DDPRUN_PROGRESS_FILE");
    const char* round = std::getenv("TORCHELASTIC_RESTART_COUNT");
    if (path == nullptr || round == nullptr) std::exit(98);
    std::FILE* file = std::fopen(path, "w");
    if (file == nullptr) std::exit(97);
    std::fprintf(file, "%d\n", (std::atoi(round) + 1) * 100);
    std::fclose(file);
  } else if (verb == "fail-round") {
    const auto sep = arg.find(':');
    const char* round = std::getenv("TORCHELASTIC_RESTART_COUNT");
    if (round != nullptr && arg.substr(0, sep) == round)
      std::exit(std::atoi(arg.c_str() + sep + 1));
  } else {
    std::fprintf(stderr, "test_child: unknown action %.*s\n", static_cast<int>(action.size()),
                 action.data());
    std::exit(99);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const char* rank_text = std::getenv("RANK");
  const int rank = rank_text != nullptr ? std::atoi(rank_text) : 0;
  std::vector<std::string_view> actions;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    const auto at = arg.rfind('@');
    if (at != std::string_view::npos) {
      if (std::atoi(std::string(arg.substr(at + 1)).c_str()) != rank) continue;
      arg = arg.substr(0, at);
    }
    actions.push_back(arg);
  }
  // A rank that will wait for a signal blocks it from the start, so a signal sent as soon
  // as it reports ready is never lost to the default action.
  if (std::find(actions.begin(), actions.end(), "wait-signal") != actions.end()) {
    ::sigprocmask(SIG_BLOCK, &waited_signals(), nullptr);
  }
  for (const auto action : actions) do_action(action, rank);
  return 0;
}
