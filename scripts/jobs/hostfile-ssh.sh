#!/bin/bash
# No scheduler: run this on the first node of HOSTFILE. ddprun starts one agent per other
# node over ssh (the same paths must exist on every node: a shared file system), passes
# the environment the workers need, and stops every node when one fails or on Ctrl-C.
# Usage: hostfile-ssh.sh HOSTFILE [ddprun options] -- WORKER [ARGS...]
#   SSH_CONFIG=FILE picks an ssh_config (ssh -F); FORWARD_ENV="NAME ..." passes those
#   variables too (PATH, LD_LIBRARY_PATH, CUDA_*, NCCL_*, OMP_* always go).
set -euo pipefail
hostfile=$1; shift
options=(--hostfile "$hostfile" --launcher ssh)
[[ -n ${SSH_CONFIG:-} ]] && options+=(--ssh-config "$SSH_CONFIG")
for name in ${FORWARD_ENV:-}; do options+=(--env "$name"); done
exec "${DDPRUN:-ddprun}" "${options[@]}" "$@"
