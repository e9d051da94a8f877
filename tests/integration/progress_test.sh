#!/usr/bin/env bash
# ddp-train's progress under ddprun: redrawn in place on a terminal (a real pseudo-terminal
# from script(1)), plain lines without control characters otherwise.
set -euo pipefail
ddprun=$1 train=$2 config=$3
source "$(dirname "$0")/script_test_lib.sh"
command -v script >/dev/null || cannot_run "script(1) is missing (Debian: bsdutils)"

tty_out=$(script -qfec "'$ddprun' -q --nproc-per-node 2 --tag-output -- '$train' --config '$config' --epochs 1 --batch-size 1" /dev/null)
[[ $tty_out == *$'\r['*':0] epoch 1/1  step '*'ETA'*$'\e[K'* ]] || fail "no progress redrawn in place: $(cat -v <<<"$tty_out")"
[[ $tty_out == *$'\r\e[K['*':0] epoch 1/1  step '*'train_loss'* ]] || fail "progress line not cleared before the epoch line: $(cat -v <<<"$tty_out")"

plain=$("$ddprun" -q --nproc-per-node 2 -- "$train" --config "$config" --epochs 1 --log-every 20)
[[ $plain != *$'\r'* && $plain != *$'\e'* ]] || fail "control characters in plain output: $(cat -v <<<"$plain")"
progress_lines=$(grep -c '^epoch 1/1  step [0-9]*/[0-9]*  loss .* ETA' <<<"$plain" || true)
[[ $progress_lines -ge 1 ]] || fail "no plain progress line: $plain"

quiet=$("$ddprun" -q --nproc-per-node 2 -- "$train" --config "$config" --epochs 1 --log-every 20 --quiet)
[[ $quiet != *ETA* && $quiet == *train_loss* ]] || fail "--quiet still reports progress: $quiet"
echo "progress: 5 passed, 0 failed"
