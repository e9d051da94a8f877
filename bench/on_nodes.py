"""What the benchmarks on simulated nodes share (root only): the simcluster package from
tests/ (no PYTHONPATH needed), the binaries under test (build/bin's unless DDPRUN /
DDP_TRAIN name others), shaping the nodes' links, training configs and a training run's rate."""
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(ROOT, "tests"))
from simcluster import Cluster, SkipTest  # noqa: E402,F401 (re-exported)

DDPRUN = os.environ.get("DDPRUN", os.path.join(ROOT, "build", "bin", "ddprun"))
DDP_TRAIN = os.environ.get("DDP_TRAIN", os.path.join(ROOT, "build", "bin", "ddp-train"))


def shape_links(cluster, link):
    """Limits every node's outgoing link to `link` (a tc rate such as 1gbit) with a token
    bucket (tbf), or removes the limit ("none"). This kernel has no netem: no delay."""
    for node in cluster.nodes:
        if link == "none":
            cluster.run(node, ["tc", "qdisc", "del", "dev", "eth0", "root"], timeout=30)
            continue
        # The bucket must hold at least a tick's worth of bytes at the rate (rate / 250 Hz).
        burst = "1mb" if link.startswith("10") else "128kb"
        cluster.run(node, ["tc", "qdisc", "replace", "dev", "eth0", "root", "tbf", "rate", link,
                           "burst", burst, "latency", "20ms"], check=True, timeout=30)


def second_epoch_rate(cluster, per_node, command, pattern=r"epoch 2/2 .*samples/s (\d+)"):
    """Runs `command` under ddprun over ssh on every node, `per_node` ranks each, one thread
    per rank, and returns the one rate in its output that `pattern` matches (by default
    ddp-train's second epoch)."""
    argv = [DDPRUN, "-q", "--hostfile", cluster.hostfile, "--launcher", "ssh", "--ssh-config",
            cluster.ssh_config, "--nproc-per-node", str(per_node), "--"] + command
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "OMP_NUM_THREADS": "1",
           "OPENBLAS_NUM_THREADS": "1"}
    r = cluster.run(cluster.nodes[0], argv, env=env, cwd=ROOT, timeout=900)
    if r.returncode != 0:
        raise RuntimeError(f"exit {r.returncode}\n{r.stdout}\n{r.stderr}")
    rates = [float(m) for m in re.findall(pattern, r.stdout)]
    if len(rates) != 1:
        raise RuntimeError(f"no second-epoch line in:\n{r.stdout}")
    return rates[0]


def training_config(tmp, base, tag, samples, runtime, sections=None):
    """A copy of the source tree's config `base` in `tmp` (named after `tag`): `samples`
    training samples an epoch, one thread per rank, a 60 s timeout and `runtime` laid over
    its runtime section, `sections` ({section: {key: value}}) over the others, quiet."""
    with open(os.path.join(ROOT, base)) as f:
        cfg = json.load(f)
    for key, value in (sections or {}).items():
        cfg.setdefault(key, {}).update(value)
    if cfg["data"]["name"] == "synthetic":
        cfg["data"]["synthetic_train"] = samples
    else:
        cfg["data"]["train_limit"] = samples
    cfg["runtime"].update({"threads": 1, "timeout_s": 60, **runtime})
    cfg.setdefault("progress", {})["quiet"] = True
    path = os.path.join(tmp, f"{tag}.json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    return path
