#!/usr/bin/env bash
# --restart-scope rank on one node, end to end: three /bin/sh workers; the test SIGKILLs
# rank 1. The other two keep their processes (never restarted), rank 1 comes back with the
# same RANK and a new pid, the membership file's version goes up and names the replacement
# (the survivors read it), the job exits 0 when they finish, and nothing is left behind;
# its --report counts the recovery and marks the lost row and its replacement.
# Then, with --max-restarts 1, a second kill ends the job with its code (137) and no
# process is left. With --max-restarts 3, a replacement lost in its recovery window restarts
# all, and the run line counts that restart as the verdict does (2 of 3). Every wait is on a file the workers write, bounded.
set -euo pipefail
ddprun=$1
source "$(dirname "$0")/script_test_lib.sh"
work=$(mktemp -d)
ddprun_pid=
cleanup() {
  [[ -n $ddprun_pid ]] && kill -KILL "$ddprun_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

# Each start of a rank appends its pid to $WORK/<job>/starts.<RANK> and names its
# membership file; when $WORK/<job>/finish appears, it copies that file and exits 0.
cat >"$work/worker.sh" <<'WORKER'
#!/bin/sh
dir=$WORK/$JOB
printf '%s\n' "$DDPRUN_MEMBERSHIP_FILE" >"$dir/membership_path.$RANK"
printf '%s\n' "$$" >>"$dir/starts.$RANK"
while [ ! -e "$dir/finish" ]; do sleep 0.02; done
cp "$DDPRUN_MEMBERSHIP_FILE" "$dir/seen.$RANK.$$"
exit 0
WORKER
chmod +x "$work/worker.sh"

starts() { [[ -f $1 ]] && [[ $(wc -l <"$1") -ge $2 ]]; }

# launch JOB MAX_RESTARTS: ddprun with three workers, in the background (its report in
# $work/JOB.json).
launch() {
  mkdir "$work/$1"
  WORK=$work JOB=$1 "$ddprun" --nproc-per-node 3 --restart-scope rank --max-restarts "$2" \
    --run-id "scope-$1-$$" --shutdown-timeout 5 --report "$work/$1.json" -- "$work/worker.sh" >"$work/$1.out" 2>&1 &
  ddprun_pid=$!
  local rank
  for rank in 0 1 2; do wait_for "rank $rank's start" starts "$work/$1/starts.$rank" 1; done
  membership=$(cat "$work/$1/membership_path.0")
  wait_for "the first membership" grep -q '"version": 1,' "$membership"
}
# wait_job JOB: waits for its ddprun; sets rc (its exit status) and out (what it said).
wait_job() {
  rc=0
  wait "$ddprun_pid" || rc=$?
  ddprun_pid=
  out=$(cat "$work/$1.out")
}
version_of() { sed -n 's/^{"version": \([0-9]*\),.*/\1/p' "$1"; }

# --- one kill, replaced; the job ends 0 -------------------------------------------------
launch one 2
dir=$work/one
p0=$(cat "$dir/starts.0")
p1=$(cat "$dir/starts.1")
p2=$(cat "$dir/starts.2")
for rank in 1 2; do
  [[ $(cat "$dir/membership_path.$rank") == "$membership" ]] || fail "ranks see different files"
done
grep -q "{\"rank\": 1, \"state\": \"running\", \"pid\": $p1}" "$membership" ||
  fail "the first membership does not name rank 1's pid: $(cat "$membership")"
first_version=$(version_of "$membership")
kill -KILL "$p1"
wait_for "rank 1's replacement" starts "$dir/starts.1" 2
q1=$(sed -n 2p "$dir/starts.1")
[[ $q1 != "$p1" ]] || fail "the replacement has the lost pid"
wait_for "the membership naming the replacement" \
  grep -q "{\"rank\": 1, \"state\": \"replaced\", \"pid\": $q1}" "$membership"
text=$(cat "$membership")
(($(version_of "$membership") > first_version)) || fail "the version did not increase: $text"
grep -q '"recoveries": 1,' <<<"$text" || fail "no recovery counted: $text"
grep -q "{\"rank\": 0, \"state\": \"running\", \"pid\": $p0}" <<<"$text" || fail "rank 0: $text"
grep -q "{\"rank\": 2, \"state\": \"running\", \"pid\": $p2}" <<<"$text" || fail "rank 2: $text"
# --status counts the replacement against --max-restarts, as the verdicts do.
status=$("$ddprun" --status "scope-one-$$")
grep -q "), restarts 1 of 2" <<<"$status" || fail "--status after a replacement: $status"
touch "$dir/finish"
wait_job one
[[ $rc -eq 0 ]] || fail "ddprun exited $rc, not 0: $out"
[[ $(wc -l <"$dir/starts.0") -eq 1 && $(wc -l <"$dir/starts.2") -eq 1 ]] ||
  fail "a survivor was restarted: $(cat "$dir"/starts.*)"
# The survivors read the new membership (ranks 0 and 2 from their first processes); by the
# time one reads it, the replacement may have finished already.
for seen in "$dir/seen.0.$p0" "$dir/seen.2.$p2" "$dir/seen.1.$q1"; do
  grep -qE "\{\"rank\": 1, \"state\": \"(replaced|done)\", \"pid\": $q1\}" "$seen" ||
    fail "$seen does not name the replacement: $(cat "$seen" 2>/dev/null)"
done
grep -q "ddprun: rank 1 (pid $p1) signal SIGKILL; started its replacement, pid $q1" <<<"$out" ||
  fail "no line on the replacement: $out"
none_alive "$p0" "$p1" "$p2" "$q1"
python3 - "$work/one.json" "$p1" "$q1" <<'PYTHON' || fail "the report: $(cat "$work/one.json")"
import json, sys
report, lost, replacement = json.load(open(sys.argv[1])), int(sys.argv[2]), int(sys.argv[3])
(round0,) = report["rounds"]
assert round0["recoveries"] == 1 and round0["not_replaced"] is None, round0
rows = {row["pid"]: row for row in round0["ranks"]}
assert rows[lost]["rank"] == 1 and rows[lost]["replaced"] and not rows[lost]["replacement"]
assert rows[replacement]["rank"] == 1 and rows[replacement]["replacement"]
assert not rows[replacement]["replaced"] and rows[replacement]["exit_code"] == 0
assert sum(row["replacement"] or row["replaced"] for row in round0["ranks"]) == 2, rows
PYTHON
replaced="$p1 -> $q1"

# --- --max-restarts 1: a second kill ends the job with 137 ------------------------------
launch two 1
dir=$work/two
p0=$(cat "$dir/starts.0")
p1=$(cat "$dir/starts.1")
p2=$(cat "$dir/starts.2")
kill -KILL "$p1"
wait_for "rank 1's replacement" starts "$dir/starts.1" 2
q1=$(sed -n 2p "$dir/starts.1")
wait_for "the membership naming the replacement" \
  grep -q "{\"rank\": 1, \"state\": \"replaced\", \"pid\": $q1}" "$membership"
kill -KILL "$p2"
wait_job two
[[ $rc -eq 137 ]] || fail "ddprun exited $rc after the second kill, not 137: $out"
grep -q "ddprun: error: rank 2 (local rank 2 on .*, pid $p2) failed first: signal SIGKILL" <<<"$out" ||
  fail "the second kill is not the root cause: $out"
grep -q "restarting all workers" <<<"$out" && fail "a full restart past the bound: $out"
[[ $(wc -l <"$dir/starts.2") -eq 1 ]] || fail "rank 2 was replaced past the bound"
none_alive "$p0" "$p1" "$p2" "$q1"

# --- a replacement lost in its recovery: all restart, counted as the verdict counts --------
# The replacement spent one of the three, so the full restart is the second, in the verdict
# and in the new round's run line alike.
launch three 3
dir=$work/three
p0=$(cat "$dir/starts.0")
p1=$(cat "$dir/starts.1")
kill -KILL "$p1"
wait_for "rank 1's replacement" starts "$dir/starts.1" 2
kill -KILL "$(sed -n 2p "$dir/starts.1")"
wait_for "the restarted round's rank 0" starts "$dir/starts.0" 2
wait_for "the restarted round's rank 2" starts "$dir/starts.2" 2
touch "$dir/finish"
wait_job three
[[ $rc -eq 0 ]] || fail "ddprun exited $rc after the restart, not 0: $out"
grep -q "ddprun: restarting all workers (restart 2 of 3)" <<<"$out" || fail "the verdict: $out"
grep -q "^ddprun: run .*, restart 2 of 3$" <<<"$out" || fail "the run line: $out"
grep -q "restart 1 of 3" <<<"$out" && fail "a restart counted twice: $out"
none_alive "$p0" "$p1"
echo "PASS: rank 1 replaced ($replaced), survivors kept, --status counts it;" \
  "a second kill past the bound exits 137;" \
  "a replacement lost in its recovery restarts all as restart 2 of 3"
