#!/usr/bin/python3
"""Head mode across simulated nodes, beyond success and failure (test_multinode.py):

  preempt: SIGTERM to the head mid-training reaches every worker on every node (over ssh,
    as a message); all stop at an agreed step after a checkpoint and exit 75, and so does
    the head. A value given with --env never shows on any command line (ps) meanwhile.
  control: `ddprun --status` and `--stacks` from a shell on node 0 show every node's ranks
    running (nothing stopped by looking); `--stop` stops the job as SIGTERM would.
  restart: with --max-restarts 1, a worker failing in round 0 makes the head restart the
    whole job on every node; round 1 (TORCHELASTIC_RESTART_COUNT=1) succeeds.
  setup: the last node's agent cannot create its --log-dir (a read-only mount there only):
    its own error reaches the head as the node's event, and the head names it, stops every
    node and spends no restart (--max-restarts 1), exiting with the error's code (125).

  PYTHONPATH=tests tests/multinode/test_head.py -n N --ddprun BIN --ddp-train BIN \
      --config JSON --source DIR
Exit 77: skipped (not root, no namespaces); under CI=true that is a failure (exit 1).
"""
import argparse
import os
import signal
import subprocess
import sys
import threading
import time
import uuid

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from simcluster.jobs import check_leftovers, run_on_cluster, write_job  # noqa: E402 (tests/ on PYTHONPATH)
from simcluster.procs import all_pids, cmdline  # noqa: E402


# Rank 1 fails in round 0 only when DDPC_FAIL_ROUND0 is set; otherwise the worker trains.
WORKER_SH = r"""#!/bin/sh
if [ -n "$DDPC_FAIL_ROUND0" ] && [ "$RANK" = 1 ] && [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then
  echo "injected failure in round 0" >&2
  exit 3
fi
echo "round $TORCHELASTIC_RESTART_COUNT rank $RANK on $(hostname)"
exec "$DDPC_TRAIN" "$@"
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=2)
    ap.add_argument("--ddprun", required=True)
    ap.add_argument("--ddp-train", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--source", required=True)
    a = ap.parse_args()

    def body(cluster, result, failures):
        job, worker, config = write_job(cluster, WORKER_SH, a.config, timeout_s=30,
                                            threads=1)
        marker = f"ddpc{uuid.uuid4().hex[:12]}"
        secret = f"s3cret-{uuid.uuid4().hex}"
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "DDPC_MARK": marker,
               "DDPC_TRAIN": os.path.abspath(a.ddp_train), "DDPC_SECRET": secret,
               "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
        head = [os.path.abspath(a.ddprun), "--hostfile", cluster.hostfile, "--launcher", "ssh",
                "--ssh-config", cluster.ssh_config, "--run-id", marker, "--tag-output",
                "--shutdown-timeout", "10", "--env", "DDPC_MARK", "--env", "DDPC_TRAIN",
                "--env", "DDPC_SECRET"]

        def start_training(argv):
            """The head started on node 0; returns once training has begun on every rank
            (rank 0 finished a DDP step: lockstep), with the lines read so far."""
            proc = cluster.popen(cluster.nodes[0], argv, env=env, cwd=a.source,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            lines = []
            for line in proc.stdout:
                lines.append(line)
                if "step 5/" in line:
                    break
            return proc, lines

        # Preemption across nodes.
        ckpt = os.path.join(job, "ckpt")
        proc, lines = start_training(head + ["--", worker, "--config", config, "--epochs",
                                             "1000", "--log-every", "5", "--checkpoint-dir", ckpt])
        leaked = [cmd for cmd in map(cmdline, all_pids()) if secret in cmd]
        if leaked:
            failures.append(f"preempt: the --env value shows on command lines: {leaked}")
        t0 = time.time()
        os.kill(proc.pid, signal.SIGTERM)
        out = "".join(lines) + proc.communicate(timeout=120)[0]
        result["preempt_sigterm_to_exit_s"] = round(time.time() - t0, 2)
        print(f"--- preempt: exit {proc.returncode}\n" + "\n".join(out.splitlines()[-25:]))
        if proc.returncode != 75:
            failures.append(f"preempt: the head exited {proc.returncode}, not 75")
        if out.count("exit code 75") < a.n:
            failures.append("preempt: not every rank exited 75")
        if not os.path.exists(os.path.join(ckpt, "latest")):
            failures.append("preempt: no checkpoint was written")
        check_leftovers(cluster, marker, failures, "preempt: ")

        # A handle on the running job, from a shell on the first node: status and stacks of
        # the ranks on every node, nothing stopped by looking; then a stop, as SIGTERM.
        proc, lines = start_training(head + ["--", worker, "--config", config, "--epochs",
                                             "1000", "--log-every", "5"])
        rest = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
        rest.start()
        ask = lambda *args: cluster.run(cluster.nodes[0], [os.path.abspath(a.ddprun), *args],
                                        env=env, timeout=60)
        status = ask("--status", marker)
        print(f"--- status: exit {status.returncode}\n{status.stdout}{status.stderr}")
        rows = [l.split() for l in status.stdout.splitlines()[2:] if l[:1].isdigit()]
        if status.returncode != 0 or sorted(int(r[0]) for r in rows) != list(range(a.n)):
            failures.append(f"status: not one row per rank: {status.stdout}{status.stderr}")
        if {r[1] for r in rows} != set(cluster.nodes):
            failures.append(f"status: the ranks' hosts are not every node's: {rows}")
        if any(r[3] != "running" or not r[4].isdigit() for r in rows):
            failures.append(f"status: a rank is not running with a step: {rows}")
        stacks = ask("--stacks")  # the latest run
        print(f"--- stacks: exit {stacks.returncode}\n" + "\n".join(stacks.stdout.splitlines()[:6]))
        for rank in range(a.n):
            if f"--- rank {rank} (" not in stacks.stdout:
                failures.append(f"stacks: rank {rank}'s stack is missing")
        if "ddprun: where the %d ranks still running were (now, on request" % a.n \
                not in stacks.stdout:
            failures.append("stacks: no digest of every rank")
        again = ask("--status", marker)
        if again.stdout.count(" running ") != a.n:
            failures.append(f"status after stacks: not every rank still running: {again.stdout}")
        stop = ask("--stop", marker)
        proc.wait(timeout=120)
        rest.join(timeout=10)
        result["control_stop_exit"] = proc.returncode
        if stop.returncode != 0 or proc.returncode not in (75, 128 + signal.SIGTERM):
            failures.append(f"stop: exit {stop.returncode}, the head's {proc.returncode}: "
                            + stop.stderr + "".join(lines[-10:]))
        check_leftovers(cluster, marker, failures, "control: ")

        # The head killed with SIGKILL: its guardian ends the ssh clients, each agent sees its
        # connection close and stops its node's workers. Nothing may survive anywhere.
        argv = head + ["--", worker, "--config", config, "--epochs", "1000", "--log-every", "5"]
        proc = cluster.popen(cluster.nodes[0], argv, env=env, cwd=a.source,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for line in proc.stdout:
            if "step 5/" in line:
                break
        t0 = time.time()
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=60)
        deadline = time.monotonic() + 10
        while cluster.leftovers(marker) and time.monotonic() < deadline:
            time.sleep(0.05)
        result["head_sigkill_to_all_gone_s"] = round(time.time() - t0, 2)
        check_leftovers(cluster, marker, failures, "head killed: ")

        # A restart round on every node.
        argv = head + ["--env", "DDPC_FAIL_ROUND0", "--max-restarts", "1", "--", worker, "--config", config, "--epochs", "1",
                       "--max-steps", "20"]
        r = cluster.run(cluster.nodes[0], argv, env=dict(env, DDPC_FAIL_ROUND0="1"),
                        cwd=a.source, timeout=150, stderr=subprocess.STDOUT)
        print(f"--- restart: exit {r.returncode}\n" + "\n".join(r.stdout.splitlines()[-25:]))
        if r.returncode != 0:
            failures.append(f"restart: the head exited {r.returncode}, not 0")
        if "restarting all workers (restart 1 of 1)" not in r.stdout:
            failures.append("restart: no restart round")
        for rank in range(a.n):
            if f"round 1 rank {rank} on" not in r.stdout:
                failures.append(f"restart: rank {rank} did not run in round 1")
        check_leftovers(cluster, marker, failures, "restart: ")

        # An agent's own set-up failure (its node's --log-dir is read-only there alone).
        logs = os.path.join(job, "logs")
        os.makedirs(logs)
        last = cluster.nodes[-1]
        mounted = cluster.run(last, ["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", logs],
                              timeout=30)
        if mounted.returncode != 0:
            failures.append(f"setup: cannot mount a read-only folder on {last}: {mounted.stderr}")
            return
        try:
            argv = head + ["--log-dir", logs, "--max-restarts", "1", "--", worker, "--config",
                           config, "--epochs", "1", "--max-steps", "20"]
            r = cluster.run(cluster.nodes[0], argv, env=env, cwd=a.source, timeout=150,
                            stderr=subprocess.STDOUT)
        finally:
            cluster.run(last, ["umount", logs], timeout=30)
        print(f"--- setup: exit {r.returncode}\n" + "\n".join(r.stdout.splitlines()[-15:]))
        if r.returncode != 125:
            failures.append(f"setup: the head exited {r.returncode}, not 125 (the node's error)")
        if f"node {a.n - 1} could not start its workers" not in r.stdout or \
                "Read-only file system" not in r.stdout:
            failures.append("setup: the head did not name the node's own error")
        if "restarting all workers" in r.stdout:
            failures.append("setup: the head spent a restart on a node whose set-up failed")
        check_leftovers(cluster, marker, failures, "setup: ")

    return run_on_cluster(a.n, body, {"nodes": a.n})


if __name__ == "__main__":
    sys.exit(main())
