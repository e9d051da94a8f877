#!/usr/bin/env bash
# NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME on a multi-homed node, with the kernel's real
# route lookup: in a network namespace of its own (unshare -rn) with two interfaces, ddprun
# runs node 1 of a 2-node job and its worker prints what it got. Needs unprivileged user
# namespaces and veth; skipped (77) without them, failed under CI=true.
set -euo pipefail
ddprun=$1
source "$(dirname "$0")/script_test_lib.sh"
command -v unshare >/dev/null || cannot_run "unshare(1) is missing (Debian: util-linux)"
command -v ip >/dev/null || cannot_run "ip(8) is missing (Debian: iproute2)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
printf 'node-a\nnode-b\n' >"$work/hosts"
cat >"$work/inside.sh" <<'INSIDE'
set -eu
ddprun=$1 hosts=$2
ip link set lo up
ip link add eth-a type veth peer name eth-a-peer
ip link add ib-b type veth peer name ib-b-peer
ip addr add 10.1.0.1/24 dev eth-a
ip addr add 10.2.0.1/24 dev ib-b
for link in eth-a eth-a-peer ib-b ib-b-peer; do ip link set "$link" up; done
show='echo "IF=${NCCL_SOCKET_IFNAME-unset}/${GLOO_SOCKET_IFNAME-unset}"'
run() { "$ddprun" -q --hostfile "$hosts" --node-rank 1 --master-port 29500 --launcher local "$@" -- sh -c "$show"; }
echo "routed-b $(run --master-addr 10.2.0.7)"
echo "routed-a $(run --master-addr 10.1.0.9)"
echo "user $(NCCL_SOCKET_IFNAME=eth-a run --master-addr 10.2.0.7)"
echo "doctor $("$ddprun" --master-addr 10.2.0.7 --doctor | grep 'NCCL/gloo')"
INSIDE
if ! out=$(unshare -rn bash "$work/inside.sh" "$ddprun" "$work/hosts" 2>&1); then
  [[ $out == *"ddprun"* ]] && fail "ddprun failed in the namespace: $out"
  cannot_run "no network namespace with veth here: $out"
fi
expect() { grep -qxF -- "$1" <<<"$out" || fail "expected '$1' in: $out"; }
expect "routed-b IF=ib-b/ib-b"
expect "routed-a IF=eth-a/eth-a"
expect "user IF=eth-a/unset"
expect "doctor   NCCL/gloo net ib-b as NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME for the workers (routes to the master 10.2.0.7)"
echo "socket interface: 4 passed, 0 failed"
