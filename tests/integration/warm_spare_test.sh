#!/usr/bin/env bash
# --warm-spare with --restart-scope rank, end to end: two bash workers that speak the spare's
# protocol (docs/environment.md). ddprun starts a spare once the ranks run; the test SIGKILLs
# rank 1, and its replacement is that spare's own process, given rank 1's whole environment
# (its RANK, its error file, no DDPRUN_SPARE) on its stdin; ddprun says so after its line on
# the loss, starts another spare later, and at the end leaves no process behind (the unused
# spare included). Then a program that cannot be a spare (it exits 1 when it is one): ddprun
# says once that the spare ended, the replacement starts as a new process, and the job
# still ends 0. Every wait is on a file the workers write, bounded.
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

# A spare records its pid in $WORK/$JOB/spares, reads its rank's environment on stdin
# (NUL-ended entries) and goes on as that rank, with that environment alone; at the end of
# its input with nothing, it exits 0. With $REFUSE set, a spare exits 1 at once instead.
# A rank records "pid RANK error-file spare-flag" in starts.<RANK> and exits 0 once
# $WORK/$JOB/finish appears.
cat >"$work/worker.sh" <<'WORKER'
#!/bin/bash
dir=$WORK/$JOB
if [[ ${DDPRUN_SPARE:-} == 1 ]]; then
  [[ -n ${REFUSE:-} ]] && exit 1
  echo $$ >>"$dir/spares"
  entries=()
  while IFS= read -r -d '' entry; do entries+=("$entry"); done
  ((${#entries[@]} > 0)) || exit 0
  exec env -i "${entries[@]}" "$0"
fi
echo "$$ $RANK $TORCHELASTIC_ERROR_FILE ${DDPRUN_SPARE:-none}" >>"$dir/starts.$RANK"
while [[ ! -e $dir/finish ]]; do sleep 0.02; done
exit 0
WORKER
chmod +x "$work/worker.sh"

lines() { [[ -f $1 ]] && [[ $(wc -l <"$1") -ge $2 ]]; }
# launch JOB [ENV...]: ddprun with two workers and a warm spare, in the background.
launch() {
  local job=$1
  shift
  mkdir "$work/$job"
  env WORK="$work" JOB="$job" "$@" "$ddprun" --nproc-per-node 2 --restart-scope rank \
    --max-restarts 2 --warm-spare --run-id "spare-$job-$$" --shutdown-timeout 5 \
    -- "$work/worker.sh" >"$work/$job.out" 2>&1 &
  ddprun_pid=$!
  wait_for "rank 0's start" lines "$work/$job/starts.0" 1
  wait_for "rank 1's start" lines "$work/$job/starts.1" 1
}
wait_job() {
  rc=0
  wait "$ddprun_pid" || rc=$?
  ddprun_pid=
  out=$(cat "$work/$1.out")
}

# --- the spare becomes rank 1 -----------------------------------------------------------
launch warm
dir=$work/warm
wait_for "the spare" lines "$dir/spares" 1
spare=$(sed -n 1p "$dir/spares")
read -r p1 _ <"$dir/starts.1"
kill -KILL "$p1"
wait_for "rank 1's replacement" lines "$dir/starts.1" 2
read -r q1 rank error_file spare_flag < <(sed -n 2p "$dir/starts.1")
[[ $q1 == "$spare" ]] || fail "the replacement ($q1) is not the spare ($spare)"
[[ $rank == 1 && $spare_flag == none ]] || fail "the replacement's environment: $rank $spare_flag"
first_error_file=$(sed -n 1p "$dir/starts.1" | cut -d' ' -f3)
[[ $error_file == "$first_error_file" ]] ||
  fail "the replacement's error file $error_file is not rank 1's ($first_error_file)"
wait_for "a new spare" lines "$dir/spares" 2
next_spare=$(sed -n 2p "$dir/spares")
touch "$dir/finish"
wait_job warm
[[ $rc -eq 0 ]] || fail "ddprun exited $rc, not 0: $out"
grep -q "ddprun: rank 1 (pid $p1) signal SIGKILL; started its replacement, pid $q1" <<<"$out" ||
  fail "no line on the replacement: $out"
grep -A1 "started its replacement, pid $q1" <<<"$out" |
  grep -q "^ddprun: rank 1's replacement is the warm spare, started .* s before$" ||
  fail "no line on the spare after the loss's: $out"
[[ $(wc -l <"$dir/starts.0") -eq 1 ]] || fail "rank 0 was restarted"
read -r p0 _ <"$dir/starts.0"
none_alive "$p0" "$p1" "$q1" "$next_spare"
warm="$p1 -> $q1"

# --- a program that cannot be a spare: a new process replaces the rank -------------------
launch cold REFUSE=1
dir=$work/cold
wait_for "ddprun's word on the spare" grep -q "the warm spare ended before it was needed" \
  "$work/cold.out"
read -r p1 _ <"$dir/starts.1"
kill -KILL "$p1"
wait_for "rank 1's replacement" lines "$dir/starts.1" 2
read -r q1 _ < <(sed -n 2p "$dir/starts.1")
touch "$dir/finish"
wait_job cold
[[ $rc -eq 0 ]] || fail "ddprun exited $rc without a spare, not 0: $out"
[[ $(grep -c "the warm spare ended before it was needed (exit code 1)" <<<"$out") -eq 1 ]] ||
  fail "the spare's end is not said once: $out"
grep -q "replacement is the warm spare" <<<"$out" && fail "a spare that ended was used: $out"
read -r p0 _ <"$dir/starts.0"
none_alive "$p0" "$p1" "$q1"
echo "PASS: rank 1's replacement was the warm spare ($warm), a new spare followed," \
  "nothing left behind; a program that cannot be a spare is replaced by a new process"
