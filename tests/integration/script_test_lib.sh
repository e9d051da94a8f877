# Sourced by the shell tests here: how they fail, and how a test that cannot run reports it
# (ctest's SKIP_RETURN_CODE 77 outside CI; a failure under CI=true, never a pass).
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
cannot_run() {
  [[ ${CI:-} == true ]] && fail "cannot run, and CI=true: $*"
  echo "SKIP: $*"
  exit 77
}

# wait_for WHAT COMMAND...: until COMMAND succeeds, for at most 20 s; then fails naming WHAT
# and what ddprun said (the caller's "$work"/*.out).
wait_for() {
  local what=$1
  shift
  for _ in $(seq 1000); do
    "$@" && return 0
    sleep 0.02
  done
  fail "timed out waiting for $what; ddprun said: $(cat "$work"/*.out 2>/dev/null)"
}
# A process that still exists (a zombie that ddprun has not reaped counts).
alive() { kill -0 "$1" 2>/dev/null; }
# Fails unless every pid given is gone within 10 s.
none_alive() {
  local pid
  for pid in "$@"; do
    for _ in $(seq 500); do alive "$pid" || break; sleep 0.02; done
    alive "$pid" && fail "pid $pid is left behind"
  done
  return 0
}
