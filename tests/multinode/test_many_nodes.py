#!/usr/bin/python3
"""Many nodes on one machine: N real ddprun processes, one per "node" (--node-rank 0..N-1,
all in one simulated node's network namespace, so that node 0's address is not loopback),
one worker each, meet through the launchers' rendezvous. One rank fails in round 0; every
node must restart together once (--max-restarts 1) and every ddprun must exit 0.

  --nodes N      how many ddprun processes (default 300)
  --limit hard   `ulimit -n 1024` for every ddprun: soft and hard (node 0 cannot raise it)
  --limit soft   a soft limit of 1024 only (ddprun raises it to the hard one, as at most sites)

Node 0 serves every node from its one event loop, with one descriptor per node: 300 nodes
fit under a hard limit of 1024, and 1,024 nodes under a soft one. Prints a RESULT line with
node 0's descriptors and memory during round 1 (rank 0 reads them from its parent), the
time from the last ddprun's start to the last worker's start of round 0, and the time from
the failure to the last worker's start of round 1 (bench/nodes.py makes a table of them).

  PYTHONPATH=tests tests/multinode/test_many_nodes.py --ddprun BIN [--nodes N] [--limit L]
Exit 77: skipped (not root, no namespaces); under CI=true that is a failure.
"""
import argparse
import os
import resource
import subprocess
import sys
import time
import uuid

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from simcluster.jobs import check_leftovers, job_env, run_on_cluster  # noqa: E402

PORT = 29561
LIMIT = 1024
# Each worker stamps its start (round, rank; whole, as the rest of round 0 is stopped at any
# moment); one fails in round 0; rank 0 of round 1
# records what its parent, node 0's ddprun, holds.
WORKER_SH = r"""#!/bin/sh
d=$1 round=$TORCHELASTIC_RESTART_COUNT
date +%s.%N > "$d/.start.$round.$RANK" && mv "$d/.start.$round.$RANK" "$d/start.$round.$RANK"
if [ "$round" = 1 ] && [ "$RANK" = 0 ]; then
  ls /proc/$PPID/fd | wc -l > "$d/node0_fds"
  grep -E '^(VmRSS|VmHWM):' /proc/$PPID/status > "$d/node0_memory"
fi
if [ "$round" = 0 ] && [ "$RANK" = "$FAIL_RANK" ]; then
  # Once every worker has started (a wait for other processes, not a stand-in for one).
  while [ "$(ls "$d" | grep -c '^start\.0\.')" -lt "$WORLD_SIZE" ]; do sleep 0.05; done
  date +%s.%N > "$d/failed_at"
  exit 3
fi
exit 0
"""
# Starts every node's ddprun at once and writes each one's exit code.
DRIVER_SH = r"""#!/bin/bash
n=$1 out=$2 ddprun=$3; shift 3
pids=()
for i in $(seq 0 $((n - 1))); do
  "$ddprun" --node-rank "$i" "$@" > "$out/node.$i.txt" 2>&1 &
  pids+=($!)
done
date +%s.%N > "$out/all_started"
for i in "${!pids[@]}"; do
  wait "${pids[$i]}"
  echo "$i $?" >> "$out/codes"
done
"""


def read(path):
    with open(path) as f:
        return f.read()


def stamps(d, prefix):
    return [float(read(os.path.join(d, f))) for f in os.listdir(d) if f.startswith(prefix)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ddprun", required=True)
    ap.add_argument("--nodes", type=int, default=300)
    ap.add_argument("--limit", choices=["hard", "soft"], default="hard")
    a = ap.parse_args()

    def limit_descriptors():
        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE,
                           (LIMIT, LIMIT if a.limit == "hard" else hard))

    def body(cluster, result, failures):
        d = os.path.join(cluster.dir, "marks")
        out = os.path.join(cluster.dir, "out")
        os.makedirs(d)
        os.makedirs(out)
        worker = os.path.join(cluster.dir, "worker.sh")
        driver = os.path.join(cluster.dir, "driver.sh")
        for path, text in ((worker, WORKER_SH), (driver, DRIVER_SH)):
            with open(path, "w") as f:
                f.write(text)
            os.chmod(path, 0o755)
        marker = f"ddpc{uuid.uuid4().hex[:12]}"
        env = job_env(marker, FAIL_RANK=str(a.nodes // 2), DDPRUN_RDZV_TOKEN=uuid.uuid4().hex)
        node = cluster.nodes[0]
        argv = [driver, str(a.nodes), out, os.path.abspath(a.ddprun),
                "--run-id", f"many{uuid.uuid4().hex[:8]}", "--nnodes", str(a.nodes),
                "--master-addr", node, "--master-port", str(PORT), "--nproc-per-node", "1",
                "--max-restarts", "1", "--rdzv-conf", "join_timeout=120", "--", worker, d]
        started = time.time()
        proc = cluster.popen(node, argv, env=env, preexec_fn=limit_descriptors)
        try:
            proc.wait(timeout=240)
        except subprocess.TimeoutExpired:
            proc.kill()
            failures.append(f"the {a.nodes} nodes did not end within 240 s")
        result["wall_s"] = round(time.time() - started, 2)
        codes = {}
        if os.path.exists(os.path.join(out, "codes")):
            for line in read(os.path.join(out, "codes")).split("\n"):
                if line:
                    i, code = line.split()
                    codes[int(i)] = int(code)
        bad = {i: c for i, c in codes.items() if c != 0}
        if len(codes) != a.nodes or bad:
            failures.append(f"{a.nodes - len(codes)} ddprun did not report, "
                            f"{len(bad)} exited non-zero: {dict(list(bad.items())[:8])}")
            for i in list(bad)[:3] + [0]:
                print(f"--- node {i}:\n{read(os.path.join(out, f'node.{i}.txt'))[-3000:]}")
        node0 = read(os.path.join(out, "node.0.txt")) if os.path.exists(
            os.path.join(out, "node.0.txt")) else ""
        if "restarting all workers (restart 1 of 1)" not in node0:
            failures.append("node 0 did not restart the job once")
        for round_ in (0, 1):
            n = len(stamps(d, f"start.{round_}."))
            if n != a.nodes:
                failures.append(f"{n} of {a.nodes} workers started in round {round_}")
        check_leftovers(cluster, marker, failures)
        if failures:
            return
        all_started = float(read(os.path.join(out, "all_started")))
        failed_at = float(read(os.path.join(d, "failed_at")))
        memory = dict(line.split(":") for line in read(os.path.join(d, "node0_memory")).split("\n")
                      if line)
        result.update({
            "node0_fds": int(read(os.path.join(d, "node0_fds"))),
            "node0_rss_kb": int(memory["VmRSS"].split()[0]),
            "node0_hwm_kb": int(memory["VmHWM"].split()[0]),
            "round0_start_s": round(max(stamps(d, "start.0.")) - all_started, 3),
            "restart_s": round(max(stamps(d, "start.1.")) - failed_at, 3),
        })
        # One descriptor per node and a few dozen of ddprun's own (the command's own `ls`
        # holds a few more).
        if result["node0_fds"] > a.nodes + 64:
            failures.append(f"node 0 held {result['node0_fds']} descriptors for {a.nodes} nodes")

    return run_on_cluster(1, body, {"nodes": a.nodes, "limit": f"{a.limit} {LIMIT}"}, sshd=False)


if __name__ == "__main__":
    sys.exit(main())
