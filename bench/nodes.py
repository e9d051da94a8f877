#!/usr/bin/python3
"""Node 0 at scale: one ddprun per "node" on this machine (real processes, one worker each,
in a simulated node's network namespace), at 64, 256 and 1,024 nodes, one rank failing in
round 0 and every node restarting together (tests/multinode/test_many_nodes.py). Prints
node 0's descriptors and memory during a round, the time from the last ddprun's start to
the last worker's start of round 0, and from the failure to the last worker's start of
round 1, then the projection to 16,384 nodes from the per-node slope. Root only.

  bench/nodes.py --ddprun build/bin/ddprun [--nodes 64,256,1024]
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TEST = os.path.join(HERE, "..", "tests", "multinode", "test_many_nodes.py")


def measure(ddprun, nodes):
    env = dict(os.environ, PYTHONPATH=os.path.join(HERE, "..", "tests"))
    out = subprocess.run([sys.executable, TEST, "--ddprun", ddprun, "--nodes", str(nodes),
                          "--limit", "soft"], env=env, capture_output=True, text=True,
                         timeout=600)
    for line in out.stdout.splitlines():
        if line.startswith("FAIL:"):
            raise SystemExit(f"{nodes} nodes: {line}")
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise SystemExit(f"{nodes} nodes: no result (exit {out.returncode}): {out.stdout[-2000:]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ddprun", required=True)
    ap.add_argument("--nodes", default="64,256,1024")
    a = ap.parse_args()
    rows = [measure(os.path.abspath(a.ddprun), int(n)) for n in a.nodes.split(",")]
    print("| nodes | node 0 fds | node 0 RSS MB | peak MB | round 0 start s | restart s |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['nodes']} | {r['node0_fds']} | {r['node0_rss_kb'] / 1024:.1f} | "
              f"{r['node0_hwm_kb'] / 1024:.1f} | {r['round0_start_s']} | {r['restart_s']} |")
    if len(rows) >= 2:
        lo, hi = rows[0], rows[-1]
        per_node_kb = (hi["node0_hwm_kb"] - lo["node0_hwm_kb"]) / (hi["nodes"] - lo["nodes"])
        fds = hi["node0_fds"] - hi["nodes"] + 16384
        mb = (hi["node0_hwm_kb"] + per_node_kb * (16384 - hi["nodes"])) / 1024
        print(f"projected to 16,384 nodes: {fds} descriptors, about {mb:.0f} MB peak "
              f"({per_node_kb:.1f} KB per node)")


if __name__ == "__main__":
    main()
