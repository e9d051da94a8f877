#!/usr/bin/env python3
"""Time to first step: from launch to the end of the first training step on rank 0 (which,
being a DDP step, waits for every rank's gradients), and to the end of the whole run.

ddp-train under ddprun against the same model in Python (torch DDP, gloo) under torchrun
(Debian's, through tests/support/torchrun_wrapper.py): the Fashion-MNIST MLP, Adam, batch 64,
2 ranks, one thread each, both loading the data before the first step.

Usage: bench/first_step.py [--reps 5] [--out bench/results/first_step.json]
As the Python worker (started by torchrun): bench/first_step.py --worker
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# Debian's torchrun through the tests' wrapper (tests/support), which the benchmarks share.
TORCHRUN_WRAPPER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "tests", "support", "torchrun_wrapper.py")


def worker():
    import numpy as np
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.utils.data import DistributedSampler
    sys.path.insert(0, HERE)
    from python_ddp import MEAN, STD, idx, models

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    root = "/usr/share/datasets/fashion-mnist"
    images = idx(f"{root}/train-images-idx3-ubyte.gz").astype(np.float32) / 255.0
    x = (torch.from_numpy(images).unsqueeze(1) - MEAN) / STD
    y = torch.from_numpy(idx(f"{root}/train-labels-idx1-ubyte.gz").astype(np.int64))
    torch.manual_seed(1)
    model = torch.nn.parallel.DistributedDataParallel(models("mlp"))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    batch = torch.tensor(list(DistributedSampler(range(len(x)), world, rank, seed=1)))[:64]
    opt.zero_grad()
    F.cross_entropy(model(x[batch]), y[batch]).backward()
    opt.step()
    if rank == 0:
        print("first step done", flush=True)
    dist.destroy_process_group()


def timed(command, first_line_marker):
    """Seconds from start to the first stdout line holding the marker, and to exit."""
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    start = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True, env=env)
    first = None
    for line in proc.stdout:
        if first is None and first_line_marker in line:
            first = time.perf_counter() - start
    if proc.wait() != 0 or first is None:
        raise RuntimeError(f"{command[0]} failed or never reported its first step")
    return first, time.perf_counter() - start


def summary(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker", action="store_true")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--out", default="bench/results/first_step.json")
    args = parser.parse_args()
    if args.worker:
        worker()
        return
    cpp = ["build/bin/ddprun", "-q", "--nproc-per-node", "2", "--", "build/bin/ddp-train",
           "--config", "configs/fashion_mlp.json", "--max-steps", "1", "--log-every", "1",
           "--threads", "1"]
    py = ["/usr/bin/python3", TORCHRUN_WRAPPER, "--standalone",
          "--monitor_interval", "0.01", "--nproc_per_node", "2", os.path.abspath(__file__),
          "--worker"]
    samples = {"ddprun_ddp_train": [], "torchrun_python": []}
    for _ in range(args.reps):  # interleaved
        samples["ddprun_ddp_train"].append(timed(cpp, "step 1"))
        samples["torchrun_python"].append(timed(py, "first step done"))
    result = {"benchmark": "first_step", "date": time.strftime("%Y-%m-%d"),
              "machine": platform.node(), "cpus": os.cpu_count(), "reps": args.reps,
              "world": 2, "model": "Fashion-MNIST MLP, batch 64"}
    for name, runs in samples.items():
        result[name] = {"first_step_s": summary([r[0] for r in runs]),
                        "total_s": summary([r[1] for r in runs])}
        print(f"{name:18s} first step {result[name]['first_step_s']['median']:.2f} s, "
              f"whole run {result[name]['total_s']['median']:.2f} s", flush=True)
    result["torchrun_vs_ddprun_first_step"] = (
        result["torchrun_python"]["first_step_s"]["median"] /
        result["ddprun_ddp_train"]["first_step_s"]["median"])
    print(f"ratio {result['torchrun_vs_ddprun_first_step']:.2f}x")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as out:
        json.dump(result, out, indent=2)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
