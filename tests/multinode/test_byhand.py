#!/usr/bin/python3
"""torchrun's by-hand multi-node forms, one ddprun per node with no scheduler (3 simulated
nodes), the third node started 2 s after the others, every worker an unmodified
torchrun-style Python script (gloo all-reduce):
  --form static  ddprun --nnodes 3 --node-rank I --master-addr node1 --master-port P
  --form c10d    ddprun --nnodes 3 --rdzv-backend c10d --rdzv-endpoint node1:P --rdzv-id J
                 --max-restarts 1 (no node rank: node1 is node 0, the others ranked by host
                 name once all came); a worker on the third node fails round 0, and every
                 node must keep its place in round 1
  --form absent  the static form with --nnodes 4 and --rdzv-conf join_timeout=5 on the 3
                 nodes: node 0 must fail within the timeout naming the node that never
                 came, and every ddprun must exit non-zero, nothing left behind.
With --form static, nodes 0 and 1 get SIGHUP (a closed terminal) while they wait for the
late node: they must detach, not stop, and finish the job with their output in their
console files. Every rank must be unique, every sum right, every ddprun exit 0,
every node must derive the same run id by itself, and nothing may be left on any node.

  PYTHONPATH=tests tests/multinode/test_byhand.py --ddprun BIN
Exit 77: skipped (not root, no namespaces); under CI=true that is a failure (exit 1).
"""
import argparse
import glob
import os
import re
import signal
import subprocess
import sys
import time
import uuid

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from simcluster.jobs import check_leftovers, job_env, run_on_cluster  # noqa: E402
from simcluster.procs import processes_with_marker  # noqa: E402

NPROC = 2


def hang_up(ddprun, marker, node_rank, deadline_s=20):
    """SIGHUP to node `node_rank`'s ddprun once it has taken over its signals (SIGHUP
    blocked, for its signalfd); returns whether it could be sent."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        for pid, cmd in processes_with_marker(marker):
            if ddprun not in cmd or f"--node-rank {node_rank} " not in cmd + " ":
                continue
            try:
                with open(f"/proc/{pid}/status") as f:
                    blocked = next(int(l.split()[1], 16) for l in f if l.startswith("SigBlk:"))
            except (OSError, StopIteration):
                continue
            if blocked & (1 << (signal.SIGHUP - 1)):
                os.kill(pid, signal.SIGHUP)
                return True
        time.sleep(0.05)  # polling a condition, not standing in for one
    return False
WORKER_PY = r"""
import os, socket, sys
import torch
import torch.distributed as dist
if (os.environ.get("FAIL_ROUND_0_ON_GROUP") == os.environ["GROUP_RANK"]
        and os.environ["TORCHELASTIC_RESTART_COUNT"] == "0" and os.environ["LOCAL_RANK"] == "0"):
    sys.exit(1)
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
value = torch.tensor([float(rank + 1)])
dist.all_reduce(value)
print(f"rank {rank} of {world} on {socket.gethostname()} group {os.environ['GROUP_RANK']} "
      f"sum {value.item():g}", flush=True)
dist.destroy_process_group()
"""
LINE = re.compile(r"rank (\d+) of (\d+) on (\S+) group (\d+) sum (\S+)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ddprun", required=True)
    ap.add_argument("--form", choices=["static", "c10d", "absent"], default="static")
    a = ap.parse_args()

    def body(cluster, result, failures):
        worker = os.path.join(cluster.dir, "worker.py")
        with open(worker, "w") as f:
            f.write(WORKER_PY)
        marker = f"ddpc{uuid.uuid4().hex[:12]}"
        env = job_env(marker)
        nodes = len(cluster.nodes)
        if a.form == "c10d":
            env["FAIL_ROUND_0_ON_GROUP"] = str(nodes - 1)
        procs = []
        runtime_dirs = []
        for i, node in enumerate(cluster.nodes):
            if i == nodes - 1:
                time.sleep(2)  # the fault under test: this node starts late
                if a.form == "static":
                    for early in range(nodes - 1):
                        if not hang_up(os.path.abspath(a.ddprun), marker, early):
                            failures.append(f"node {early}'s ddprun never blocked SIGHUP")
            argv = [os.path.abspath(a.ddprun), "--nproc-per-node", str(NPROC),
                    "--shutdown-timeout", "5"]
            if a.form == "c10d":
                argv += ["--nnodes", str(nodes), "--rdzv-backend", "c10d", "--rdzv-endpoint",
                         f"{cluster.nodes[0]}:29511", "--rdzv-id", "byhand-c10d",
                         "--max-restarts", "1"]
            else:
                argv += ["--nnodes", str(nodes + (a.form == "absent")), "--node-rank", str(i),
                         "--master-addr", cluster.nodes[0], "--master-port", "29511"]
            if a.form == "absent":
                argv += ["--rdzv-conf", "join_timeout=5"]
            argv += ["--", "/usr/bin/python3", worker]
            runtime_dirs.append(os.path.join(cluster.dir, f"runtime{i}"))
            os.makedirs(runtime_dirs[-1], mode=0o700, exist_ok=True)
            procs.append(cluster.popen(node, argv, env=dict(env, XDG_RUNTIME_DIR=runtime_dirs[-1]),
                                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                       text=True))
        world = nodes * NPROC
        seen = {}
        run_ids = set()
        t0 = time.monotonic()
        if a.form == "absent":
            for i, p in enumerate(procs):
                out, _ = p.communicate(timeout=60)
                print(f"--- node {i}: exit {p.returncode}\n{out}")
                if p.returncode == 0:
                    failures.append(f"node {i}'s ddprun exited 0 with a node missing")
                if "missing node(s): 3" not in out:
                    failures.append(f"node {i} did not name the missing node 3")
            result["failed_after_s"] = round(time.monotonic() - t0, 1)
            if result["failed_after_s"] > 20:
                failures.append(f"the nodes took {result['failed_after_s']} s to give up, "
                                "more than join_timeout 5 s and the grace")
            check_leftovers(cluster, marker, failures)
            return
        for i, p in enumerate(procs):
            try:
                out, _ = p.communicate(timeout=120)
            except subprocess.TimeoutExpired:
                p.kill()
                out, _ = p.communicate()
                failures.append(f"node {i}'s ddprun did not exit within 120 s")
            consoles = glob.glob(os.path.join(runtime_dirs[i], "ddprun", "*.console"))
            if a.form == "static" and i < nodes - 1:
                # Detached: what came after the hangup is in the console file only.
                if len(consoles) != 1 or LINE.search(out):
                    failures.append(f"node {i}: SIGHUP did not detach it (console files "
                                    f"{consoles}, ranks on its stdout: {bool(LINE.search(out))})")
            for console in consoles:
                with open(console) as f:
                    out += f.read()
            print(f"--- node {i}: exit {p.returncode}\n{out}")
            if p.returncode != 0:
                failures.append(f"node {i}'s ddprun exited {p.returncode}, not 0")
            if a.form == "c10d" and not re.search(r"^ddprun: run .*, restart 1 of 1$", out, re.M):
                failures.append(f"node {i} did not run round 1 after the failure")
            run_ids.update(re.findall(r"ddprun: run (\S+):", out))
            for m in LINE.finditer(out):
                rank, size, host, group, total = m.groups()
                if int(rank) in seen:
                    failures.append(f"rank {rank} twice")
                seen[int(rank)] = host
                if int(size) != world:
                    failures.append(f"rank {rank} saw a world of {size}, not {world}")
                # c10d: ranked by the natural order of the host names (node1, node2, node3).
                if host != cluster.nodes[i] or int(group) != i or int(rank) // NPROC != i:
                    failures.append(f"rank {rank} ran on {host} as group {group}, "
                                    f"from node {i}'s ddprun")
                if float(total) != world * (world + 1) / 2:
                    failures.append(f"rank {rank}'s all-reduce gave {total}")
        if sorted(seen) != list(range(world)):
            failures.append(f"ranks {sorted(seen)}, not 0-{world - 1}")
        if len(run_ids) != 1:
            failures.append(f"the nodes derived different run ids: {sorted(run_ids)}")
        result["ranks"] = len(seen)
        check_leftovers(cluster, marker, failures)

    return run_on_cluster(3, body, {"nodes": 3, "nproc": NPROC, "form": a.form})


if __name__ == "__main__":
    sys.exit(main())
