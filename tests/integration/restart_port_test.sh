#!/usr/bin/env bash
# A fixed --master-port taken while round 0 runs (here by a process rank 0 leaves behind,
# out of its process group): ddprun does not start round 1 into a port it cannot bind; it
# says who holds the port and stops.
set -euo pipefail
ddprun=$1
source "$(dirname "$0")/script_test_lib.sh"
command -v setsid >/dev/null || cannot_run "setsid(1) is missing (Debian: util-linux)"
command -v python3 >/dev/null || cannot_run "python3 is missing"
work=$(mktemp -d)
holder_pid=
cleanup() {
  [[ -n $holder_pid ]] && kill "$holder_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])')
cat >"$work/worker.sh" <<'WORKER'
#!/bin/sh
if [ "$RANK" = 0 ] && [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then
  # Holds MASTER_PORT in a session of its own, then says so; the rank fails after that.
  setsid python3 -c '
import os, socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("", int(os.environ["MASTER_PORT"]))); s.listen()
open(sys.argv[1] + ".tmp", "w").write(str(os.getpid())); os.rename(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(60)' "$WORK/holder.pid" </dev/null >/dev/null 2>&1 &
  while [ ! -s "$WORK/holder.pid" ]; do sleep 0.05; done
  exit 3
fi
exit 0
WORKER
chmod +x "$work/worker.sh"
rc=0
out=$(WORK=$work "$ddprun" --nproc-per-node 2 --master-port "$port" --max-restarts 2 \
  -- "$work/worker.sh" 2>&1) || rc=$?
holder_pid=$(cat "$work/holder.pid" 2>/dev/null || true)
[[ -n $holder_pid ]] || fail "the holder never started: $out"
[[ $rc -ne 0 ]] || fail "ddprun exited 0: $out"
grep -q "ddprun: error: cannot restart: master port $port was taken on this host while round 0 ran, by pid $holder_pid (" <<<"$out" ||
  fail "no line naming the port and its holder: $out"
if grep -q ":$port, restart 1 of 2" <<<"$out"; then fail "a round started on the taken port: $out"; fi
echo "PASS: exit $rc; $(grep 'cannot restart' <<<"$out")"
