#!/usr/bin/python3
"""Overlap where it pays: gradient all-reduce overlapped with backward against all-reduce
after backward (runtime.overlap), and the bucket size, over a network that costs what a
network costs. Two simulated nodes (tests/simcluster: network namespaces on a bridge), one
ddp-train rank each, started by one ddprun over ssh; each node's outgoing link shaped with a
tc token bucket (tbf) to the --links rate, so an all-reduce pays for bandwidth instead of
running at memory speed between namespaces. (No added delay: this kernel has no netem; a veth
hop costs microseconds.) The peer of every row is the same
model on the same link with the gradients all-reduced after backward.

Each run trains 2 epochs of --samples samples and counts the second (the first is warm-up);
medians of --reps runs, all variants interleaved in every rep. Root only (namespaces).

Usage: bench/overlap_net.py [--reps 3] [--links 1gbit 10gbit]
                              [--out bench/results/overlap_net.json]
"""
import argparse
import json
import os
import platform
import statistics
import tempfile
import time

from on_nodes import Cluster, DDP_TRAIN, second_epoch_rate, shape_links, training_config

CASES = [("mlp", "configs/fashion_mlp.json"), ("cnn", "configs/fashion_cnn.json")]
BUCKETS_MB = [0.25, 1, 25]  # 25: PyTorch's default, one bucket for these models


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--links", nargs="+", default=["1gbit", "10gbit"])
    parser.add_argument("--samples", type=int, default=12800, help="training samples an epoch")
    parser.add_argument("--out", default="bench/results/overlap_net.json")
    args = parser.parse_args()
    rows = []
    tmp = tempfile.mkdtemp()
    with Cluster(2) as cluster:
        cluster.start_sshd()
        for link in args.links:
            shape_links(cluster, link)
            for name, base in CASES:
                variants = {(overlap, mb): training_config(
                                tmp, base, f"{name}-{overlap}-{mb}", args.samples,
                                {"overlap": overlap, "bucket_cap_mb": mb})
                            for mb in BUCKETS_MB for overlap in (True, False)}
                rates = {key: [] for key in variants}
                for _ in range(args.reps):  # interleaved, so drift hits all alike
                    for key, path in variants.items():
                        rates[key].append(second_epoch_rate(
                            cluster, 1, [DDP_TRAIN, "--config", path, "--epochs", "2"]))
                for mb in BUCKETS_MB:
                    over = statistics.median(rates[(True, mb)])
                    after = statistics.median(rates[(False, mb)])
                    row = {"link": link, "model": name, "bucket_cap_mb": mb,
                           "overlap": {"median": over, "all": rates[(True, mb)]},
                           "after_backward": {"median": after, "all": rates[(False, mb)]},
                           "ratio": over / after}
                    rows.append(row)
                    print(f"{link:7s} {name}: bucket {mb:5} MB  overlapped {over:8.0f}  after "
                          f"backward {after:8.0f} samples/s  ratio {over / after:.2f}x",
                          flush=True)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as out:
        json.dump({"benchmark": "overlap_net", "date": time.strftime("%Y-%m-%d"),
                   "machine": platform.node(), "cpus": os.cpu_count(), "reps": args.reps,
                   "samples_per_epoch": args.samples, "rows": rows}, out, indent=2)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
