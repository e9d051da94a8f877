#!/usr/bin/env python3
"""Training throughput on one GPU: ddp-train with runtime.backend "nccl" against Python DDP
(bench/python_ddp.py --device cuda, NCCL) on the same model, data, optimizer and batch, both
started by ddprun with one rank (one GPU: NCCL refuses two ranks on one device), in the same
run. Each run trains 2 epochs and only the second counts; both read every step's loss, so
both wait for the GPU once per step. Reports each side's median samples/s and the ratio.
The mixed-precision rows run both sides under their autocast (fp16 with loss scaling).
Usage: bench/gpu.py [--reps 3] [--cases NAME,...] [--out bench/results/gpu.json]
(DDPRUN, DDP_TRAIN, PYTHON name other binaries; PYTHON must be an interpreter whose torch has
CUDA)
"""
import argparse
import json
import os
import platform
import subprocess
import tempfile
import time

from train import DDPRUN, DDP_TRAIN, EPOCHS, rate, stats, variant_config

PYTHON = os.environ.get("PYTHON", "python3")

CASES = [  # name, ddp-train config and overrides, python_ddp.py arguments, autocast
    ("toy batch 20", "configs/toy.json", ["--batch-size", "20"],
     ["--model", "toy", "--batch", "20", "--optimizer", "sgd", "--lr", "0.05"], "none"),
    ("mlp batch 64", "configs/fashion_mlp.json", [], ["--model", "mlp", "--batch", "64"], "none"),
    ("cnn batch 64", "configs/fashion_cnn.json", [], ["--model", "cnn", "--batch", "64"], "none"),
    ("cnn batch 1024", "configs/fashion_cnn.json", ["--batch-size", "1024"],
     ["--model", "cnn", "--batch", "1024"], "none"),
    # Mixed precision, each side with its own autocast (fp16: with loss scaling).
    ("mlp batch 64 bf16", "configs/fashion_mlp.json", [], ["--model", "mlp", "--batch", "64"],
     "bf16"),
    ("cnn batch 1024 bf16", "configs/fashion_cnn.json", ["--batch-size", "1024"],
     ["--model", "cnn", "--batch", "1024"], "bf16"),
    ("cnn batch 1024 fp16", "configs/fashion_cnn.json", ["--batch-size", "1024"],
     ["--model", "cnn", "--batch", "1024"], "fp16"),
]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--out", default="bench/results/gpu.json")
    parser.add_argument("--cases", default="", help="comma-separated case names (default: all)")
    args = parser.parse_args()
    gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip()
    torch_version = subprocess.run([PYTHON, "-c", "import torch; print(torch.__version__)"],
                                   capture_output=True, text=True).stdout.strip()
    print(f"GPU: {gpu}; Python torch {torch_version}")
    rows = []
    tmp = tempfile.mkdtemp()
    launch = [DDPRUN, "-q", "--nproc-per-node", "1", "--"]
    only = set(args.cases.split(",")) if args.cases else None
    for name, config, overrides, py_args, autocast in CASES:
        if only and name not in only:
            continue
        nccl = variant_config(config, tmp, name.replace(" ", "-"),
                              {"backend": "nccl", "autocast": autocast})
        commands = {
            "ddp_train": launch + [DDP_TRAIN, "--config", nccl, "--epochs", str(EPOCHS),
                                   "--quiet", "--threads", "1"] + overrides,
            "python_ddp": launch + [PYTHON, "bench/python_ddp.py", "--device", "cuda",
                                    "--epochs", str(EPOCHS), "--autocast", autocast] + py_args}
        rates = {k: [] for k in commands}
        for _ in range(args.reps):  # interleaved, so drift hits both alike
            for k, command in commands.items():
                rates[k].append(rate(command))
        row = {"case": name, "world": 1, "transport": "nccl (one GPU)", "autocast": autocast}
        row.update({k: stats(v) for k, v in rates.items()})
        row["ratio"] = row["ddp_train"]["median"] / row["python_ddp"]["median"]
        rows.append(row)
        print(f"{name:15s} nccl, 1 GPU: ddp-train {row['ddp_train']['median']:9.0f}  "
              f"python DDP {row['python_ddp']['median']:9.0f} samples/s  "
              f"ratio {row['ratio']:.2f}x", flush=True)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as out:
        json.dump({"benchmark": "gpu", "date": time.strftime("%Y-%m-%d"),
                   "machine": platform.node(), "gpu": gpu, "torch": torch_version,
                   "reps": args.reps, "rows": rows}, out, indent=2)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
