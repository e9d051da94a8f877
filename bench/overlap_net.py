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

Usage: PYTHONPATH=tests bench/overlap_net.py [--reps 3] [--links 1gbit 10gbit]
                                             [--out bench/results/overlap_net.json]
"""
import argparse
import json
import os
import platform
import re
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
try:
    from simcluster import Cluster  # noqa: E402
except ModuleNotFoundError as e:
    if e.name != "simcluster":
        raise
    sys.exit("bench/overlap_net.py: no simcluster package; run it with PYTHONPATH=tests")

DDPRUN = os.environ.get("DDPRUN", os.path.join(ROOT, "build", "bin", "ddprun"))
DDP_TRAIN = os.environ.get("DDP_TRAIN", os.path.join(ROOT, "build", "bin", "ddp-train"))
CASES = [("mlp", "configs/fashion_mlp.json"), ("cnn", "configs/fashion_cnn.json")]
BUCKETS_MB = [0.25, 1, 25]  # 25: PyTorch's default, one bucket for these models


def config(tmp, base, samples, overlap, bucket_mb):
    with open(os.path.join(ROOT, base)) as f:
        cfg = json.load(f)
    cfg["data"]["train_limit"] = samples
    cfg["runtime"].update({"overlap": overlap, "bucket_cap_mb": bucket_mb, "threads": 1,
                           "timeout_s": 60})
    cfg.setdefault("progress", {})["quiet"] = True
    path = os.path.join(tmp, f"{os.path.basename(base)}-{overlap}-{bucket_mb}.json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    return path


def rate(cluster, config_path):
    """Rank 0's samples/s in the second epoch."""
    argv = [DDPRUN, "-q", "--hostfile", cluster.hostfile, "--launcher", "ssh", "--ssh-config",
            cluster.ssh_config, "--nproc-per-node", "1", "--", DDP_TRAIN, "--config",
            config_path, "--epochs", "2"]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "OMP_NUM_THREADS": "1",
           "OPENBLAS_NUM_THREADS": "1"}
    r = cluster.run(cluster.nodes[0], argv, env=env, cwd=ROOT, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"exit {r.returncode}\n{r.stdout}\n{r.stderr}")
    rates = [float(m) for m in re.findall(r"epoch 2/2 .*samples/s (\d+)", r.stdout)]
    if len(rates) != 1:
        raise RuntimeError(f"no second-epoch line in:\n{r.stdout}")
    return rates[0]


def shape(cluster, link):
    # The bucket must hold at least a tick's worth of bytes at the rate (rate / 250 Hz).
    burst = "1mb" if link.startswith("10") else "128kb"
    for node in cluster.nodes:
        cluster.run(node, ["tc", "qdisc", "replace", "dev", "eth0", "root", "tbf", "rate", link,
                           "burst", burst, "latency", "20ms"], check=True, timeout=30)


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
            shape(cluster, link)
            for name, base in CASES:
                variants = {(overlap, mb): config(tmp, base, args.samples, overlap, mb)
                            for mb in BUCKETS_MB for overlap in (True, False)}
                rates = {key: [] for key in variants}
                for _ in range(args.reps):  # interleaved, so drift hits all alike
                    for key, path in variants.items():
                        rates[key].append(rate(cluster, path))
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
