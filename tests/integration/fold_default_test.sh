#!/usr/bin/env bash
# --fold-output's default (docs/launching.md#folded-output): on a terminal (a real
# pseudo-terminal from script(1)) a job of 8 ranks or more shows a line all ranks print once,
# tagged with the ranks; 7 ranks, --no-fold-output and a pipe show it once per rank.
set -euo pipefail
ddprun=$1
source "$(dirname "$0")/script_test_lib.sh"
command -v script >/dev/null || cannot_run "script(1) is missing (Debian: bsdutils)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Each rank prints once all have started (a barrier in files), so that their lines arrive
# together on a loaded machine; the long window costs nothing: a line goes out as soon as
# every rank has printed it.
run() {  # run NPROC [OPTIONS...]: the console's lines, CRs dropped
  local nproc=$1 barrier
  shift
  barrier=$(mktemp -d "$work/barrier.XXXXXX")
  local worker="touch $barrier/r.\$RANK; until [ \$(ls $barrier | wc -l) -eq $nproc ]; do sleep 0.01; done; echo hello"
  if [[ ${tty:-} == yes ]]; then
    script -qfec "'$ddprun' -q --nproc-per-node $nproc --fold-window 3000 $* -- /bin/sh -c '$worker'" /dev/null | tr -d '\r'
  else
    "$ddprun" -q --nproc-per-node "$nproc" --fold-window 3000 "$@" -- /bin/sh -c "$worker"
  fi
}

out=$(tty=yes run 8)
[[ $out == "[0-7] hello" ]] || fail "8 ranks on a terminal: expected one folded line, got: $out"
out=$(tty=yes run 7)
[[ $(grep -c -x hello <<<"$out") == 7 ]] || fail "7 ranks on a terminal: expected 7 lines, got: $out"
out=$(tty=yes run 8 --no-fold-output)
[[ $(grep -c -x hello <<<"$out") == 8 ]] || fail "--no-fold-output: expected 8 lines, got: $out"
out=$(run 8)
[[ $(grep -c -x hello <<<"$out") == 8 ]] || fail "8 ranks in a pipe: expected 8 lines, got: $out"
out=$(run 8 --fold-output)
[[ $out == "[0-7] hello" ]] || fail "--fold-output in a pipe: expected one folded line, got: $out"
echo "fold default: 5 passed, 0 failed"
