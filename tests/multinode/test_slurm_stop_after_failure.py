#!/usr/bin/python3
"""The root cause survives Slurm's SIGTERM (3 simulated nodes under Slurm): one ddprun per
node under `srun --kill-on-bad-exit=1`, meeting through node 0's rendezvous (--max-restarts
1). Node 2's ddprun dies (SIGKILL, as a crash or the OOM killer would end it) while every
node runs its workers: node 0 hears it at once and stops node 1 naming node 2 as the cause;
then srun sees a task end badly and sends SIGCONT and SIGTERM to every task left (SIGKILL
after KillWait), as Slurm 26.05 now also does when any task fails under mpi/pmix. The
workers take 3 s to stop, so Slurm's SIGTERM reaches ddprun on nodes 0 and 1 while they
stop them: both must still exit with node 2's code (255: its ddprun was lost), not 143,
name node 2 as the root cause, restart nothing, and leave nothing behind.

  PYTHONPATH=tests tests/multinode/test_slurm_stop_after_failure.py --ddprun BIN
Exit 77: skipped (not root, no namespaces, no Slurm); under CI=true that is a failure.
"""
import argparse
import os
import re
import sys
import time
import uuid

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from simcluster.jobs import check_leftovers, run_on_cluster, sbatch  # noqa: E402

WORKER_PY = r"""
import os, signal, socket, sys, time
host = socket.gethostname()
stopping = []
def on_term(sig, frame):
    print(f"worker on {host} got TERM", flush=True)
    if stopping:
        return  # Slurm's, after ddprun's: still stopping
    stopping.append(1)
    time.sleep(3)
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
print(f"worker on {host} ready, node {os.environ['GROUP_RANK']}", flush=True)
if os.environ["GROUP_RANK"] == "2":
    time.sleep(3)  # every node runs its workers by now
    pid = os.getppid()
    while pid > 1 and b"ddprun" not in open(f"/proc/{pid}/cmdline", "rb").read():
        pid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
    print(f"killing ddprun (pid {pid}) on {host}", flush=True)
    os.kill(pid, signal.SIGKILL)
while True:
    time.sleep(0.1)
"""
EXIT = re.compile(r"task (\d) ddprun exit (\d+)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ddprun", required=True)
    a = ap.parse_args()

    def body(cluster, result, failures):
        cluster.start_slurm()
        d = cluster.dir
        worker = os.path.join(d, "worker.py")
        with open(worker, "w") as f:
            f.write(WORKER_PY)
        marker = f"ddpc{uuid.uuid4().hex[:12]}"
        home = os.path.join(d, "home")  # one home folder for every node: the secret's
        os.makedirs(home, mode=0o700, exist_ok=True)
        # Each task reports its ddprun's exit: the shell outlives Slurm's SIGTERM (a trap),
        # waits for ddprun, and passes its code on to srun.
        task = (f"trap true TERM; {os.path.abspath(a.ddprun)} --nproc-per-node 1 "
                f"--max-restarts 1 --shutdown-timeout 4 --tag-output -- /usr/bin/python3 "
                f"{worker}; rc=$?; echo \"task $SLURM_NODEID ddprun exit $rc\"; exit $rc")
        script = os.path.join(d, "job.sh")
        with open(script, "w") as f:
            f.write(f"""#!/bin/sh
export DDPC_MARK={marker} OMP_NUM_THREADS=1 HOME={home}
srun --ntasks-per-node=1 --kill-on-bad-exit=1 sh -c '{task}'
echo "srun exit $?"
""")
        os.chmod(script, 0o755)
        out = os.path.join(d, "out.txt")
        t0 = time.monotonic()
        state, code = cluster.slurm_wait(sbatch(cluster, len(cluster.nodes), script, out),
                                         timeout=120)
        result["job_s"] = round(time.monotonic() - t0, 2)
        text = open(out).read() if os.path.exists(out) else ""
        print(f"--- job: {state} {code}\n{text}")
        codes = {int(n): int(c) for n, c in EXIT.findall(text)}
        result["codes"] = codes
        if text.count("got TERM") < 3:
            failures.append("Slurm's SIGTERM did not reach the workers after ddprun's own "
                            "(srun --kill-on-bad-exit)")
        for node in (0, 1):
            if codes.get(node) != 255:
                failures.append(f"node {node}'s ddprun exited {codes.get(node)}, not 255 "
                                "(node 2's, the root cause)")
        if codes.get(2) != 137:
            failures.append(f"node 2's ddprun exited {codes.get(2)}, not 137 (SIGKILL)")
        if "node 2" not in text or "restarting all workers" in text:
            failures.append("node 0 did not name node 2, or restarted")
        if "stopped by SIGTERM after the round failed; exit 255, the failure's" not in text:
            failures.append("node 0 did not say that SIGTERM came after the failure")
        check_leftovers(cluster, marker, failures)

    return run_on_cluster(3, body, sshd=False)


if __name__ == "__main__":
    sys.exit(main())
