#!/bin/bash
# No scheduler: start one ddprun per node over ssh, all with the same hostfile and port.
# Usage: hostfile-ssh.sh HOSTFILE [ddprun options] -- WORKER [ARGS...]
#   HOSTFILE: one node name per line; the first hosts rank 0. The same paths must exist
#   on every node (shared file system). SSH_CONFIG=FILE picks an ssh_config (ssh -F);
#   FORWARD_ENV="NAME ..." passes those variables to every node (ssh does not).
# If one node's ddprun fails, this script stops the others (SIGTERM through ssh's
# closed connection is not reliable, so it kills the ssh clients and ddprun's --run-id
# lets you find stragglers).
set -euo pipefail
hostfile=$1; shift
port=${MASTER_PORT:-$((29500 + RANDOM % 1000))}
ssh_args=(-o BatchMode=yes -tt)            # -tt: the remote ddprun dies with the connection
[[ -n ${SSH_CONFIG:-} ]] && ssh_args=(-F "$SSH_CONFIG" "${ssh_args[@]}")
DDPRUN=${DDPRUN:-ddprun}
quoted=$(printf '%q ' "$@")
assignments=""
for name in ${FORWARD_ENV:-}; do assignments+="$name=$(printf '%q' "${!name-}") "; done
pids=()
while read -r host _; do
  [[ -z $host || $host == \#* ]] && continue
  ssh "${ssh_args[@]}" "$host" \
    "cd $(printf '%q' "$PWD") && exec env $assignments$(printf '%q' "$DDPRUN") --hostfile $(printf '%q' "$(realpath "$hostfile")") --master-port $port $quoted" </dev/null &
  pids+=($!)
done < "$hostfile"
rc=0
# The first non-zero exit stops the rest.
for _ in "${pids[@]}"; do
  set +e; wait -n; s=$?; set -e
  if ((s != 0 && rc == 0)); then rc=$s; kill "${pids[@]}" 2>/dev/null || true; fi
done
exit "$rc"
