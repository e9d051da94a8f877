#!/usr/bin/env bash
# The master port ddprun picks is held for rank 0 through its round: another program's bind
# without SO_REUSEADDR fails on it (IPv4 and IPv6), a store's bind with SO_REUSEADDR listens
# on it. Checked by rank 0 itself at each start: before its store binds (round 0 and the new
# port of round 1, after a full restart), and in the replacement of a lost rank 0 under
# --restart-scope rank, when nothing listens on the port any more. A port given with
# --master-port is the user's: not held.
set -euo pipefail
ddprun=$1
source "$(dirname "$0")/script_test_lib.sh"
command -v python3 >/dev/null || cannot_run "python3 is missing"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Rank 0 writes one line a start to $WORK/log: the restart count, whether it replaces a
# lost rank, the port, and what each bind got. Its first start exits 3 (unless NO_FAIL);
# the others exit 0. Rank 1 stays until rank 0 has written two lines (bounded: 20 s).
cat >"$work/worker.py" <<'WORKER'
import errno, os, socket, sys, time
log = os.path.join(os.environ["WORK"], "log")
if os.environ["RANK"] != "0":
    for _ in range(1000):
        if os.path.exists(log) and len(open(log).readlines()) >= 2: sys.exit(0)
        time.sleep(0.02)
    sys.exit(0)
port = int(os.environ["MASTER_PORT"])
def bind(family, host, reuse):
    try:
        s = socket.socket(family, socket.SOCK_STREAM)
    except OSError:
        return "none"  # no IPv6 on this host
    try:
        if reuse:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, port))
        if reuse:
            s.listen()
        return "listens" if reuse else "bound"
    except OSError as e:
        if e.errno in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT):
            return "none"  # IPv6 switched off on this host
        return errno.errorcode.get(e.errno, str(e.errno))
    finally:
        s.close()
line = "%s %s %d plain4=%s plain6=%s store=%s\n" % (
    os.environ["TORCHELASTIC_RESTART_COUNT"], os.environ.get("DDPRUN_REPLACEMENT", "0"), port,
    bind(socket.AF_INET, "", False), bind(socket.AF_INET6, "::", False),
    bind(socket.AF_INET, "", True))
first = not os.path.exists(log)
with open(log, "a") as out:
    out.write(line)
sys.exit(3 if first and not os.environ.get("NO_FAIL") else 0)
WORKER

run_job() {  # NAME ARGS...: ddprun with 2 ranks of the worker; its log in $work/NAME.log
  local name=$1 rc=0
  shift
  rm -f "$work/log"
  WORK=$work "$ddprun" --nproc-per-node 2 "$@" -- python3 "$work/worker.py" \
    >"$work/$name.out" 2>&1 || rc=$?
  [[ $rc -eq 0 ]] || fail "$name: ddprun exited $rc: $(cat "$work/$name.out")"
  mv "$work/log" "$work/$name.log"
}
held='plain4=EADDRINUSE plain6=EADDRINUSE store=listens'
# A host without IPv6 has no IPv6 program to keep out.
python3 -c 'import socket; socket.socket(socket.AF_INET6).bind(("::", 0))' 2>/dev/null ||
  held='plain4=EADDRINUSE plain6=none store=listens'

run_job restart --max-restarts 1
mapfile -t lines <"$work/restart.log"
[[ ${#lines[@]} -eq 2 ]] || fail "restart: rank 0 started ${#lines[@]} time(s): ${lines[*]}"
[[ ${lines[0]} == "0 0 "*" $held" ]] || fail "round 0's port is not held: ${lines[0]}"
[[ ${lines[1]} == "1 0 "*" $held" ]] || fail "round 1's port is not held: ${lines[1]}"
read -r _ _ port0 _ <<<"${lines[0]}"
read -r _ _ port1 _ <<<"${lines[1]}"
[[ $port0 != "$port1" ]] || fail "round 1 did not pick a port of its own: ${lines[*]}"

run_job rank --restart-scope rank --max-restarts 1
mapfile -t lines <"$work/rank.log"
[[ ${#lines[@]} -eq 2 ]] || fail "rank scope: rank 0 started ${#lines[@]} time(s): ${lines[*]}"
[[ ${lines[1]} == "0 1 "*" $held" ]] ||
  fail "the replacement of rank 0 found its port not held: ${lines[1]}"
read -r _ _ first_port _ <<<"${lines[0]}"
read -r _ _ again_port _ <<<"${lines[1]}"
[[ $first_port == "$again_port" ]] || fail "the replacement got another port: ${lines[*]}"

given=$(python3 -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])')
NO_FAIL=1 run_job given --master-port "$given"
grep -q "^0 0 $given plain4=bound " "$work/given.log" ||
  fail "a port given with --master-port was held: $(cat "$work/given.log")"
echo "PASS: rounds ${port0} then ${port1} held; a lost rank 0's port held for its replacement; --master-port ${given} left alone"
