#!/usr/bin/env python3
"""ZeRO-1: ddp-train's optimizer state per rank and its speed with optimizer.zero_stage 0 and
1, Adam, the MLP and the CNN on Fashion-MNIST (12,800 samples an epoch, 2 epochs, the second
counted), at 2 and 4 ranks on this machine, started by ddprun, interleaved in one run; and
ZeRO-1 with live recovery (runtime.recovery "peer" under --restart-scope rank: each share
also kept by the rank before it, the gradients all-reduced whole).
The state is what the last line reports for rank 0 (its optimizer's state tensors; with
ZeRO-1 its share, and with "peer" rank 1's too). Medians of --reps runs; ratios against
zero_stage 0 from the same run.
Usage: bench/zero.py [--reps 3] [--out bench/results/zero.json]   (DDPRUN, DDP_TRAIN name
other binaries)
"""
import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import tempfile
import time

from train import DDPRUN, DDP_TRAIN, variant_config

CASES = [("mlp batch 64", "configs/fashion_mlp.json"), ("cnn batch 64", "configs/fashion_cnn.json")]


VARIANTS = (("zero0", 0, "restart"), ("zero1", 1, "restart"), ("zero1_peer", 1, "peer"))


def run(world, config, peer):
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    scope = ["--restart-scope", "rank", "--max-restarts", "1"] if peer else []
    out = subprocess.run([DDPRUN, "-q", "--nproc-per-node", str(world), *scope, "--", DDP_TRAIN,
                          "--config", config, "--epochs", "2", "--threads", "1"],
                         check=True, capture_output=True, text=True, env=env).stdout
    rate = float(re.findall(r"epoch 2/2 .*samples/s (\d+)", out)[0])
    state = int(re.search(r"optimizer state (\d+) bytes", out).group(1))
    accuracy = float(re.findall(r"epoch 2/2 .*test_accuracy ([\d.]+)", out)[0])
    return rate, state, accuracy


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--worlds", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--out", default="bench/results/zero.json")
    args = parser.parse_args()
    tmp = tempfile.mkdtemp()
    rows = []
    for name, base in CASES:
        with open(base) as f:
            optimizer = json.load(f)["optimizer"]
        configs = {}
        for key, stage, recovery in VARIANTS:
            path = variant_config(base, tmp, f"{name.split()[0]}-{key}", {"recovery": recovery})
            with open(path) as f:
                config = json.load(f)
            config["optimizer"] = {"name": "adam", "lr": optimizer.get("lr", 1e-3),
                                   "zero_stage": stage}
            config["data"]["train_limit"] = 12800
            with open(path, "w") as f:
                json.dump(config, f)
            configs[key] = path
        for world in args.worlds:
            runs = {key: [] for key, _, _ in VARIANTS}
            for _ in range(args.reps):  # interleaved, so drift hits all alike
                for key, _, recovery in VARIANTS:
                    runs[key].append(run(world, configs[key], recovery == "peer"))
            row = {"case": name, "world": world, "transport": "gloo + shared memory (one node)"}
            for key, _, _ in VARIANTS:
                rate, state, acc = zip(*runs[key])
                row[key] = {"samples_per_s": statistics.median(rate),
                            "state_bytes": statistics.median(state),
                            "test_accuracy": statistics.median(acc), "runs": runs[key]}
            row["state_ratio"] = row["zero1"]["state_bytes"] / row["zero0"]["state_bytes"]
            row["speed_ratio"] = row["zero1"]["samples_per_s"] / row["zero0"]["samples_per_s"]
            row["peer_state_ratio"] = (row["zero1_peer"]["state_bytes"] /
                                       row["zero0"]["state_bytes"])
            row["peer_speed_ratio"] = (row["zero1_peer"]["samples_per_s"] /
                                       row["zero0"]["samples_per_s"])
            rows.append(row)
            print(f"{name:13s} world {world}: optimizer state {row['zero0']['state_bytes']:9d} -> "
                  f"{row['zero1']['state_bytes']:9d} bytes ({row['state_ratio']:.3f}x), "
                  f"samples/s {row['zero0']['samples_per_s']:7.0f} -> "
                  f"{row['zero1']['samples_per_s']:7.0f} ({row['speed_ratio']:.2f}x), accuracy "
                  f"{row['zero0']['test_accuracy']:.4f} -> {row['zero1']['test_accuracy']:.4f}; "
                  f"with \"peer\": {row['zero1_peer']['state_bytes']:9d} bytes "
                  f"({row['peer_state_ratio']:.3f}x), "
                  f"{row['zero1_peer']['samples_per_s']:7.0f} samples/s "
                  f"({row['peer_speed_ratio']:.2f}x)", flush=True)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as out:
        json.dump({"benchmark": "zero", "date": time.strftime("%Y-%m-%d"),
                   "machine": platform.node(), "cpus": os.cpu_count(), "reps": args.reps,
                   "rows": rows}, out, indent=2)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
