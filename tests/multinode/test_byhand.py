#!/usr/bin/python3
"""torchrun's by-hand multi-node form, one ddprun per node with no scheduler (3 simulated
nodes): `ddprun --nnodes 3 --node-rank I --master-addr node1 --master-port P` on each, the
third node started 2 s after the others, every worker an unmodified torchrun-style Python
script (gloo all-reduce). Every rank must be unique, every sum right, every ddprun exit 0,
every node must derive the same run id by itself, and nothing may be left on any node.

  PYTHONPATH=tests tests/multinode/test_byhand.py --ddprun BIN
Exit 77: skipped (not root, no namespaces); under CI=true that is a failure (exit 1).
"""
import argparse
import os
import re
import subprocess
import sys
import time
import uuid

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from simcluster.jobs import check_leftovers, job_env, run_on_cluster  # noqa: E402

NPROC = 2
WORKER_PY = r"""
import os, socket, sys
import torch
import torch.distributed as dist
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
    a = ap.parse_args()

    def body(cluster, result, failures):
        worker = os.path.join(cluster.dir, "worker.py")
        with open(worker, "w") as f:
            f.write(WORKER_PY)
        marker = f"ddpc{uuid.uuid4().hex[:12]}"
        env = job_env(marker)
        nodes = len(cluster.nodes)
        procs = []
        for i, node in enumerate(cluster.nodes):
            if i == nodes - 1:
                time.sleep(2)  # the fault under test: this node starts late
            argv = [os.path.abspath(a.ddprun), "--nnodes", str(nodes), "--node-rank", str(i),
                    "--master-addr", cluster.nodes[0], "--master-port", "29511",
                    "--nproc-per-node", str(NPROC),
                    "--shutdown-timeout", "5", "--", "/usr/bin/python3", worker]
            procs.append(cluster.popen(node, argv, env=env, stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT, text=True))
        world = nodes * NPROC
        seen = {}
        run_ids = set()
        for i, p in enumerate(procs):
            try:
                out, _ = p.communicate(timeout=120)
            except subprocess.TimeoutExpired:
                p.kill()
                out, _ = p.communicate()
                failures.append(f"node {i}'s ddprun did not exit within 120 s")
            print(f"--- node {i}: exit {p.returncode}\n{out}")
            if p.returncode != 0:
                failures.append(f"node {i}'s ddprun exited {p.returncode}, not 0")
            run_ids.update(re.findall(r"ddprun: run (\S+):", out))
            for m in LINE.finditer(out):
                rank, size, host, group, total = m.groups()
                if int(rank) in seen:
                    failures.append(f"rank {rank} twice")
                seen[int(rank)] = host
                if int(size) != world:
                    failures.append(f"rank {rank} saw a world of {size}, not {world}")
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

    return run_on_cluster(3, body, {"nodes": 3, "nproc": NPROC})


if __name__ == "__main__":
    sys.exit(main())
