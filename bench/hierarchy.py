#!/usr/bin/python3
"""Hierarchical all-reduce across nodes: ddp-train's default when a job spans nodes with
several ranks each (shared memory within a node, gloo between one leader per node) against
ddp-train over flat gloo (runtime.shared_memory false: every rank in one gloo ring) and
Python DDP (bench/python_ddp.py, gloo), all three in the same run on the same nodes.

Two simulated nodes (tests/simcluster: network namespaces on a bridge), --per-node ranks
each, started by one ddprun over ssh. Links: "none" leaves the veth pair as it is (memory
speed, microseconds); a rate shapes each node's outgoing link with a tc token bucket (tbf),
so that traffic between nodes pays for bandwidth. (No added delay: this kernel has no
netem.) All ranks of both nodes share this machine's cores: on 2 cores, 4 ranks and their
gloo threads compete for them, which every variant pays alike.

Each run trains 2 epochs of --samples samples and counts the second (the first is
warm-up); medians of --reps runs, the variants interleaved in every rep. Root only.

Usage: bench/hierarchy.py [--reps 3] [--links none 1gbit] [--per-node 2]
                            [--out bench/results/hierarchy.json]
"""
import argparse
import json
import os
import platform
import statistics
import tempfile
import time

from on_nodes import Cluster, DDP_TRAIN, HERE, second_epoch_rate, shape_links, training_config

CASES = [  # name, ddp-train config and overrides, python_ddp.py arguments
    ("toy batch 20", "configs/toy.json", {"train": {"batch_size_per_rank": 20}},
     ["--model", "toy", "--batch", "20", "--optimizer", "sgd", "--lr", "0.05"]),
    ("mlp batch 64", "configs/fashion_mlp.json", {}, ["--model", "mlp", "--batch", "64"]),
    ("cnn batch 64", "configs/fashion_cnn.json", {}, ["--model", "cnn", "--batch", "64"]),
]
VARIANTS = ["hierarchical", "flat_gloo", "python_ddp"]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--links", nargs="+", default=["none", "1gbit"])
    parser.add_argument("--per-node", type=int, default=2, help="ranks per node")
    parser.add_argument("--samples", type=int, default=12800, help="training samples an epoch")
    parser.add_argument("--cases", nargs="+", default=["toy", "mlp", "cnn"])
    parser.add_argument("--out", default="bench/results/hierarchy.json")
    args = parser.parse_args()
    rows = []
    tmp = tempfile.mkdtemp()
    python_ddp = os.path.join(HERE, "python_ddp.py")
    with Cluster(2) as cluster:
        cluster.start_sshd()
        for link in args.links:
            shape_links(cluster, link)
            for name, base, overrides, py_args in CASES:
                case = name.split()[0]
                if case not in args.cases:
                    continue
                train = ["--epochs", "2"]
                commands = {
                    "hierarchical": [DDP_TRAIN, "--config", training_config(
                        tmp, base, f"{case}-hierarchical", args.samples,
                        {"shared_memory": True}, overrides)] + train,
                    "flat_gloo": [DDP_TRAIN, "--config", training_config(
                        tmp, base, f"{case}-flat", args.samples,
                        {"shared_memory": False}, overrides)] + train,
                    "python_ddp": ["/usr/bin/python3", python_ddp, "--epochs", "2", "--limit",
                                   str(args.samples), "--synthetic", str(args.samples)] + py_args,
                }
                patterns = {"hierarchical": r"epoch 2/2 .*samples/s (\d+)",
                            "flat_gloo": r"epoch 2/2 .*samples/s (\d+)",
                            "python_ddp": r"epoch 2 samples/s (\d+)"}
                rates = {v: [] for v in VARIANTS}
                for _ in range(args.reps):  # interleaved, so drift hits all alike
                    for v in VARIANTS:
                        rates[v].append(second_epoch_rate(cluster, args.per_node, commands[v],
                                                           patterns[v]))
                med = {v: statistics.median(rates[v]) for v in VARIANTS}
                row = {"link": link, "case": name, "nodes": 2, "ranks_per_node": args.per_node,
                       **{v: {"median": med[v], "all": rates[v]} for v in VARIANTS},
                       "ratio_vs_flat_gloo": med["hierarchical"] / med["flat_gloo"],
                       "ratio_vs_python_ddp": med["hierarchical"] / med["python_ddp"]}
                rows.append(row)
                print(f"link {link:6s} {name:13s} 2x{args.per_node}: hierarchical "
                      f"{med['hierarchical']:8.0f}  flat gloo {med['flat_gloo']:8.0f}  python DDP "
                      f"{med['python_ddp']:8.0f} samples/s  vs flat "
                      f"{row['ratio_vs_flat_gloo']:.2f}x  vs python "
                      f"{row['ratio_vs_python_ddp']:.2f}x", flush=True)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as out:
        json.dump({"benchmark": "hierarchy", "date": time.strftime("%Y-%m-%d"),
                   "machine": platform.node(), "cpus": os.cpu_count(), "reps": args.reps,
                   "samples_per_epoch": args.samples, "rows": rows}, out, indent=2)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
