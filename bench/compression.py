#!/usr/bin/python3
"""Compressed gradients: ddp-train with runtime.comm_hook "none", "bf16" and "fp16" on two
simulated nodes (tests/simcluster, root only), --per-node ranks each (2: the hierarchical
path, leaders exchanging node sums; 1: flat gloo), every node's outgoing link shaped to
--link (default 1gbit), in the same run, interleaved.

Per variant: the bytes the nodes sent on their links per training step (the eth0 transmit
counters of both nodes around the whole run, start-up broadcast and evaluation included,
over the run's steps), the second epoch's samples/s, and the test accuracy after the run.
Medians of --reps runs; ratios against "none" from the same run.

Usage: bench/compression.py [--reps 3] [--link 1gbit] [--per-node 2]
                            [--out bench/results/compression.json]
"""
import argparse
import json
import os
import platform
import re
import statistics
import tempfile
import time

from on_nodes import Cluster, DDP_TRAIN, DDPRUN, ROOT, shape_links, training_config

CASES = [("mlp batch 64", "configs/fashion_mlp.json"), ("cnn batch 64", "configs/fashion_cnn.json")]
HOOKS = ["none", "bf16", "fp16"]
EPOCHS = 2


def sent_bytes(cluster):
    """Bytes every node has sent on its link so far, summed (iproute2 reads the counters
    through netlink inside each node's namespace)."""
    total = 0
    for node in cluster.nodes:
        r = cluster.run(node, ["ip", "-s", "-j", "link", "show", "eth0"], check=True, timeout=30)
        total += json.loads(r.stdout)[0]["stats64"]["tx"]["bytes"]
    return total


def run(cluster, per_node, config):
    """One training run under ddprun over ssh: (bytes sent per step, second-epoch samples/s,
    final test accuracy)."""
    argv = [DDPRUN, "-q", "--hostfile", cluster.hostfile, "--launcher", "ssh", "--ssh-config",
            cluster.ssh_config, "--nproc-per-node", str(per_node), "--", DDP_TRAIN, "--config",
            config, "--epochs", str(EPOCHS)]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "OMP_NUM_THREADS": "1",
           "OPENBLAS_NUM_THREADS": "1"}
    before = sent_bytes(cluster)
    r = cluster.run(cluster.nodes[0], argv, env=env, cwd=ROOT, timeout=900)
    sent = sent_bytes(cluster) - before
    if r.returncode != 0:
        raise RuntimeError(f"exit {r.returncode}\n{r.stdout}\n{r.stderr}")
    last = re.findall(rf"epoch {EPOCHS}/{EPOCHS}\s+step (\d+).*test_accuracy ([\d.]+)"
                      r".*samples/s (\d+)", r.stdout)
    if len(last) != 1:
        raise RuntimeError(f"no last-epoch line in:\n{r.stdout}")
    steps, accuracy, rate = int(last[0][0]), float(last[0][1]), float(last[0][2])
    return sent / steps, rate, accuracy


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--link", default="1gbit")
    parser.add_argument("--per-node", type=int, default=2, help="ranks per node")
    parser.add_argument("--samples", type=int, default=12800, help="training samples an epoch")
    parser.add_argument("--out", default="bench/results/compression.json")
    args = parser.parse_args()
    rows = []
    tmp = tempfile.mkdtemp()
    with Cluster(2) as cluster:
        cluster.start_sshd()
        shape_links(cluster, args.link)
        for name, base in CASES:
            case = name.split()[0]
            configs = {h: training_config(tmp, base, f"{case}-{h}", args.samples,
                                          {"comm_hook": h})
                       for h in HOOKS}
            runs = {h: [] for h in HOOKS}
            for _ in range(args.reps):  # interleaved, so drift hits all alike
                for h in HOOKS:
                    runs[h].append(run(cluster, args.per_node, configs[h]))
            row = {"case": name, "link": args.link, "nodes": 2, "ranks_per_node": args.per_node,
                   "transport": "hierarchical (shared memory + gloo between leaders)"
                   if args.per_node > 1 else "gloo"}
            for h in HOOKS:
                sent, rate, acc = zip(*runs[h])
                row[h] = {"bytes_per_step": statistics.median(sent),
                          "samples_per_s": statistics.median(rate),
                          "test_accuracy": statistics.median(acc), "runs": runs[h]}
            for h in HOOKS[1:]:
                row[f"{h}_bytes_ratio"] = row[h]["bytes_per_step"] / row["none"]["bytes_per_step"]
                row[f"{h}_speed_ratio"] = row[h]["samples_per_s"] / row["none"]["samples_per_s"]
            rows.append(row)
            print(f"{name:13s} 2x{args.per_node} link {args.link}: " + "  ".join(
                f"{h} {row[h]['bytes_per_step'] / 1e3:7.1f} kB/step {row[h]['samples_per_s']:6.0f}"
                f" samples/s acc {row[h]['test_accuracy']:.4f}" for h in HOOKS) + "  " + "  ".join(
                f"{h}: bytes {row[f'{h}_bytes_ratio']:.2f}x speed {row[f'{h}_speed_ratio']:.2f}x"
                for h in HOOKS[1:]), flush=True)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as out:
        json.dump({"benchmark": "compression", "date": time.strftime("%Y-%m-%d"),
                   "machine": platform.node(), "cpus": os.cpu_count(), "reps": args.reps,
                   "samples_per_epoch": args.samples, "rows": rows}, out, indent=2)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
