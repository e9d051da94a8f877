#!/usr/bin/python3
"""ddprun --check --bandwidth across simulated nodes (head mode over ssh):

  ready: every node answers, each times its link to the next in a ring (rounds of 32 MiB,
    all at once), the slowest link is named, and the job is declared ready (exit 0). Every
    node's interface is limited to 2 Gbit/s with tc (a token bucket) first: unlimited, a
    veth link runs as fast as its ends get the CPU, and 3 nodes streaming at once on 2
    cores share it unevenly (one link read 1071 MB/s against another's 2191), which
    measures the scheduler, not the network.
  slow link: node2's interface limited to 200 Mbit/s: the check fails (exit 1) naming
    node2's link as far slower than the median link.
  busy port: the ring's port (master port + 1) held on node3: the check fails naming it.
  placement: with --numa-binding exclusive every node answers with its topology and its
    rank's CPUs (the agents bind as the head was asked to); the topologies are alike.

  PYTHONPATH=tests tests/multinode/test_check.py --ddprun BIN
Exit 77: skipped (not root, no namespaces, no tc); under CI=true that is a failure (exit 1).
"""
import argparse
import os
import re
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from simcluster import SkipTest, kill_and_wait  # noqa: E402 (tests/ on PYTHONPATH)
from simcluster.jobs import run_on_cluster  # noqa: E402

NODES = 3
LINK = re.compile(r"(?m)^\s+link to node (\d) \(node\d\): (\d+) MB/s$")


def shape(cluster, node, rate, burst):
    shaped = cluster.run(node, ["tc", "qdisc", "replace", "dev", "eth0", "root", "tbf", "rate", rate,
                                "burst", burst, "latency", "50ms"], timeout=30)
    if shaped.returncode != 0:
        raise SkipTest(f"tc cannot shape a node's link: {shaped.stderr.strip()}")


def check(cluster, a, port, extra_env=None, extra_args=("--bandwidth",)):
    argv = [os.path.abspath(a.ddprun), "--check", *extra_args, "--hostfile", cluster.hostfile,
            "--launcher", "ssh", "--ssh-config", cluster.ssh_config, "--master-port", str(port),
            "--nproc-per-node", "1", "--", "/bin/true"]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **(extra_env or {})}
    t0 = time.time()
    r = cluster.run(cluster.nodes[0], argv, env=env, timeout=120, stderr=subprocess.STDOUT)
    return r.returncode, r.stdout, round(time.time() - t0, 2)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ddprun", required=True)
    a = ap.parse_args()
    port = 29400 + os.getpid() % 500

    def body(cluster, result, failures):
        for node in cluster.nodes:
            shape(cluster, node, "2gbit", "1mb")
        rc, out, seconds = check(cluster, a, port)
        print(f"--- ready: exit {rc}, {seconds} s\n{out}")
        links = {int(to): int(mb) for to, mb in LINK.findall(out)}
        result["ready_s"], result["links_mb_s"] = seconds, links
        if rc != 0 or "every node is ready" not in out:
            failures.append(f"ready: exit {rc}, not a ready cluster")
        if sorted(links) != list(range(NODES)) or min(links.values(), default=0) <= 0:
            failures.append(f"ready: want one measured link into every node, got {links}")
        if "ddprun: preflight: links " not in out or "the slowest: node " not in out:
            failures.append("ready: the slowest link is not named")

        rc, out, seconds = check(cluster, a, port, extra_args=("--numa-binding", "exclusive"))
        print(f"--- placement: exit {rc}, {seconds} s\n{out}")
        topologies = re.findall(r"(?m)^\s+topology: (.+)$", out)
        placed = re.findall(r"(?m)^\s+rank (\d): CPUs (\S+) \(\d+ cores?\), NUMA \d", out)
        if rc != 0 or len(topologies) != NODES or len(set(topologies)) != 1:
            failures.append(f"placement: exit {rc}, want one alike topology line per node: {topologies}")
        if sorted(int(r) for r, _ in placed) != list(range(NODES)):
            failures.append(f"placement: want each node's rank placed, got {placed}")

        # node2 -> node3 limited to 200 Mbit/s (25 MB/s): two rounds of 32 MiB take about 2.7 s. (node1's
        # link to node2 slows too: node2's acknowledgements queue behind that limit.)
        shape(cluster, cluster.nodes[1], "200mbit", "64kb")
        rc, out, seconds = check(cluster, a, port)
        print(f"--- slow link: exit {rc}, {seconds} s\n{out}")
        result["slow_link_s"] = seconds
        want = "ddprun: error: preflight: node 1 (node2): its link to node 2 (node3) carries "
        if rc != 1 or want not in out:
            failures.append(f"slow link: exit {rc}, and no line '{want}...'")
        shape(cluster, cluster.nodes[1], "2gbit", "1mb")

        # The ring's port busy on node3.
        holder = cluster.popen(cluster.nodes[2], [sys.executable, "-c",
                               "import socket, sys, time\n"
                               "s = socket.socket()\n"
                               "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
                               "s.bind(('', int(sys.argv[1]))); s.listen()\n"
                               "print('listening', flush=True); time.sleep(120)", str(port + 1)],
                               stdout=subprocess.PIPE, text=True)
        try:
            if holder.stdout.readline().strip() != "listening":
                failures.append("busy port: the holder did not listen")
            rc, out, seconds = check(cluster, a, port)
            print(f"--- busy port: exit {rc}, {seconds} s\n{out}")
            # One line, naming the holder.
            want = (r"(?m)^ddprun: error: preflight: node 2 \(node3\): its link to node 0 \(node1\) "
                    rf"could not be measured: port {port + 1} is busy on node3 \(pid \d+ "
                    r"\(/usr/bin/python3 -c import socket.*\)\)$")
            if rc != 1 or not re.search(want, out):
                failures.append(f"busy port: exit {rc}, and no line matching {want}")
        finally:
            kill_and_wait([holder.pid])

    return run_on_cluster(NODES, body, {"nodes": NODES})


if __name__ == "__main__":
    sys.exit(main())
