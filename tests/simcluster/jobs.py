"""What the multinode test scripts share around a job: the cluster's start and stop, its
folder with the worker script and the training config every node reads, its environment,
the check that nothing is left, and the closing report."""

import argparse
import json
import os
import subprocess

from .cluster import Cluster
from .namespaces import SkipTest, skip_exit_code
from .procs import kill_and_wait


def write_job(cluster, worker_sh, config_path, **runtime):
    """cluster.dir/job holding worker.sh (executable, `worker_sh`) and config.json (the
    config at `config_path` with `runtime` entries laid over its runtime section). Returns
    (job folder, worker path, config path)."""
    job = os.path.join(cluster.dir, "job")
    os.makedirs(job, exist_ok=True)
    worker = os.path.join(job, "worker.sh")
    with open(worker, "w") as f:
        f.write(worker_sh)
    os.chmod(worker, 0o755)
    with open(config_path) as f:
        cfg = json.load(f)
    cfg.setdefault("runtime", {}).update(runtime)
    config = os.path.join(job, "config.json")
    with open(config, "w") as f:
        json.dump(cfg, f)
    return job, worker, config


def report(result, failures):
    """Prints the RESULT line and one FAIL line per failure; returns the exit code."""
    print("RESULT " + json.dumps(result))
    for failure in failures:
        print(f"FAIL: {failure}")
    return 1 if failures else 0


def run_on_cluster(nodes, body, result=None, sshd=True):
    """Starts `nodes` simulated nodes (with sshd unless `sshd` is false), runs
    body(cluster, result, failures) and stops the cluster whatever happens. Returns
    report()'s exit code, or the skip code (77; under CI=true a failure) when this machine
    cannot make the nodes."""
    try:
        Cluster.check_possible()
    except SkipTest as e:
        return skip_exit_code(e)
    result = dict(result or {})
    failures = []
    cluster = Cluster(nodes)
    try:
        cluster.start()
        if sshd:
            cluster.start_sshd()
        body(cluster, result, failures)
    except SkipTest as e:
        return skip_exit_code(e)
    finally:
        cluster.stop()
    return report(result, failures)


def sbatch(cluster, nodes, script, out):
    """Submits `script` (a path) to the simulated Slurm on `nodes` nodes, its output to
    `out`; returns the job id. Raises RuntimeError when sbatch refuses it."""
    r = subprocess.run(["sbatch", f"-N{nodes}", "--parsable", "-o", out, script], text=True,
                       capture_output=True, env=cluster.slurm_env)
    if r.returncode != 0:
        raise RuntimeError(f"sbatch failed: {r.stderr}")
    return r.stdout.strip().split(";")[0]


def job_env(marker, **extra):
    """A job's environment: PATH, the marker that finds its processes on every node
    (DDPC_MARK), one thread per rank, and `extra`."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "DDPC_MARK": marker,
           "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    env.update(extra)
    return env


def wait_for_nodes(procs, failures, what="", timeout=150):
    """Waits for each ddprun in `procs` ({node: Popen with text stdout}) to exit, printing
    its output; a failure (prefixed `what`) for one that takes longer than `timeout` (it is
    killed) or exits other than 0. Returns {node: output}."""
    outputs = {}
    for node, p in procs.items():
        try:
            out, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
            failures.append(f"{what}{node}'s ddprun did not exit within {timeout} s")
        print(f"--- {what}{node}: exit {p.returncode}\n{out}")
        outputs[node] = out
        if p.returncode != 0:
            failures.append(f"{what}{node}'s ddprun exited {p.returncode}, not 0")
    return outputs


def check_leftovers(cluster, marker, failures, what=""):
    """A failure (prefixed `what`) for each process of the job still alive on any node,
    which is then killed."""
    left = cluster.leftovers(marker)
    if left:
        failures.append(f"{what}processes left: {left}")
        kill_and_wait([p for p, _ in left])


def job_arguments():
    """The command line of a test that trains: --ddprun BIN --ddp-train BIN --config JSON."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--ddprun", required=True)
    ap.add_argument("--ddp-train", required=True)
    ap.add_argument("--config", required=True)
    return ap.parse_args()
