#!/usr/bin/env bash
# ddprun colours "error:" only on a terminal (a pseudo-terminal from script(1)), and never
# with NO_COLOR set or in a pipe.
set -euo pipefail
ddprun=$1
source "$(dirname "$0")/script_test_lib.sh"
command -v script >/dev/null || cannot_run "script(1) is missing (Debian: bsdutils)"
red=$'\e[1;31merror:'
tty_out=$(script -qfec "'$ddprun' -q --nproc-per-node 2 -- sh -c 'exit 3'" /dev/null || true)
[[ $tty_out == *"ddprun: ${red}"*"rank "*"exit code 3"* ]] || fail "no colour on a terminal: $(cat -v <<<"$tty_out")"
usage=$(script -qfec "'$ddprun' --nproc-per-node 0 true" /dev/null || true)
[[ $usage == *"ddprun: ${red}"*"--nproc-per-node"* ]] || fail "usage error not coloured: $(cat -v <<<"$usage")"
no_colour=$(NO_COLOR=1 script -qfec "'$ddprun' -q --nproc-per-node 2 -- sh -c 'exit 3'" /dev/null || true)
[[ $no_colour != *$'\e['* && $no_colour == *"ddprun: error: rank"* ]] || fail "colour despite NO_COLOR: $(cat -v <<<"$no_colour")"
piped=$("$ddprun" -q --nproc-per-node 2 -- sh -c 'exit 3' 2>&1 || true)
[[ $piped != *$'\e['* ]] || fail "colour in a pipe: $(cat -v <<<"$piped")"
echo "colour: 4 passed, 0 failed"
