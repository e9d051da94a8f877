#!/usr/bin/python3
"""The ssh tree across simulated nodes: 7 nodes, --ssh-fanout 2 (the head starts node2 and
node5; node2 starts node3 and node4, node5 starts node6 and node7), one ddp-train rank each.

  train: every rank trains and ends 0, and the head says it started a tree.
  leaf fails: the worker on node7 (two levels down) exits 3: the job ends on every node
    with a non-zero exit, the report names node7's rank, and nothing is left anywhere.
  head killed: SIGKILL to the head once training runs: every agent down the tree stops
    its workers; nothing is left anywhere. A --env value never shows on a command line.

  PYTHONPATH=tests tests/multinode/test_tree.py --ddprun BIN --ddp-train BIN --config JSON
Exit 77: skipped (not root, no namespaces); under CI=true that is a failure (exit 1).
"""
import os
import signal
import subprocess
import sys
import time
import uuid

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from simcluster import kill_and_wait  # noqa: E402 (tests/ on PYTHONPATH)
from simcluster.jobs import job_arguments, run_on_cluster, write_job  # noqa: E402
from simcluster.procs import all_pids, cmdline  # noqa: E402

NODES = 7
WORKER_SH = r"""#!/bin/sh
echo "rank $RANK on $(hostname)"
if [ -n "$DDPC_FAIL_HOST" ] && [ "$(hostname)" = "$DDPC_FAIL_HOST" ]; then
  "$DDPC_TRAIN" "$@" &
  sleep 2
  echo "injected failure on $(hostname)" >&2
  exit 3
fi
exec "$DDPC_TRAIN" "$@"
"""


def wait_gone(cluster, marker, seconds):
    deadline = time.monotonic() + seconds
    while cluster.leftovers(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    return cluster.leftovers(marker)


def main():
    a = job_arguments()

    def body(cluster, result, failures):
        job, worker, config = write_job(cluster, WORKER_SH, a.config, timeout_s=30,
                                            threads=1)
        secret = f"s3cret-{uuid.uuid4().hex}"

        def head(marker, fail_host=""):
            env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "DDPC_MARK": marker,
                   "DDPC_TRAIN": os.path.abspath(a.ddp_train), "DDPC_FAIL_HOST": fail_host,
                   "DDPC_SECRET": secret, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
            argv = [os.path.abspath(a.ddprun), "--hostfile", cluster.hostfile, "--launcher",
                    "ssh", "--ssh-config", cluster.ssh_config, "--ssh-fanout", "2", "--run-id",
                    marker, "--tag-output", "--shutdown-timeout", "5", "--env", "DDPC_MARK",
                    "--env", "DDPC_TRAIN", "--env", "DDPC_FAIL_HOST", "--env", "DDPC_SECRET"]
            return env, argv

        # Train on every node.
        marker = f"ddpc{uuid.uuid4().hex[:12]}"
        env, argv = head(marker)
        t0 = time.time()
        r = cluster.run(cluster.nodes[0], argv + ["--", worker, "--config", config, "--epochs",
                                                  "1", "--max-steps", "20"],
                        env=env, timeout=150, stderr=subprocess.STDOUT)
        result["train_s"] = round(time.time() - t0, 2)
        print(f"--- train: exit {r.returncode}\n{r.stdout[-4000:]}")
        if r.returncode != 0:
            failures.append(f"train: the head exited {r.returncode}")
        if "a tree: 2 from here, each starting the next at most 2" not in r.stdout:
            failures.append("train: the head did not say it started a tree")
        for rank in range(NODES):
            if f"rank {rank} on node{rank + 1}" not in r.stdout:
                failures.append(f"train: rank {rank} did not run on node{rank + 1}")
        left = wait_gone(cluster, marker, 10)
        if left:
            failures.append(f"train: processes left: {left}")
            kill_and_wait([p for p, _ in left])

        # A leaf two levels down fails.
        marker = f"ddpc{uuid.uuid4().hex[:12]}"
        env, argv = head(marker, fail_host="node7")
        t0 = time.time()
        r = cluster.run(cluster.nodes[0], argv + ["--", worker, "--config", config, "--epochs",
                                                  "1000"],
                        env=env, timeout=150, stderr=subprocess.STDOUT)
        result["leaf_failure_s"] = round(time.time() - t0, 2)
        print(f"--- leaf fails: exit {r.returncode}\n{r.stdout[-4000:]}")
        if r.returncode == 0:
            failures.append("leaf fails: the head exited 0")
        if "rank 6 (local rank 0 on node7" not in r.stdout or "injected failure on node7" not in r.stdout:
            failures.append("leaf fails: no report names rank 6 on node7")
        left = wait_gone(cluster, marker, 10)
        if left:
            failures.append(f"leaf fails: processes left: {left}")
            kill_and_wait([p for p, _ in left])

        # The head SIGKILLed while every rank trains.
        marker = f"ddpc{uuid.uuid4().hex[:12]}"
        env, argv = head(marker)
        proc = cluster.popen(cluster.nodes[0], argv + ["--", worker, "--config", config,
                                                      "--epochs", "1000", "--log-every", "5"],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for line in proc.stdout:
            if "step 5/" in line:
                break
        leaked = [cmd for cmd in map(cmdline, all_pids()) if secret in cmd]
        if leaked:
            failures.append(f"head killed: the --env value shows on command lines: {leaked}")
        t0 = time.time()
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=60)
        left = wait_gone(cluster, marker, 15)
        result["head_sigkill_to_all_gone_s"] = round(time.time() - t0, 2)
        if left:
            failures.append(f"head killed: processes left: {left}")
            kill_and_wait([p for p, _ in left])

    return run_on_cluster(NODES, body, {"nodes": NODES, "ssh_fanout": 2})


if __name__ == "__main__":
    sys.exit(main())
