"""What the multinode test scripts share around a job: its folder with the worker script
and the training config every node reads, and the closing report."""

import json
import os


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
