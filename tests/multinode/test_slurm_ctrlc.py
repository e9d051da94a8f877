#!/usr/bin/python3
"""Ctrl-C reaches the workers when srun is the launcher (2 simulated nodes under Slurm): a
batch script runs the head ddprun, which starts its agents with srun; one SIGINT to the
head must reach the worker on every node as SIGINT (srun alone forwards SIGINT only when
it comes twice within a second, and turns SIGTERM into a kill of the step), the workers'
own handlers must run, and the head must exit 130 with nothing left on any node.

  PYTHONPATH=tests tests/multinode/test_slurm_ctrlc.py --ddprun BIN
Exit 77: skipped (not root, no namespaces, no Slurm); under CI=true that is a failure.
"""
import argparse
import os
import signal
import sys
import time
import uuid

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from simcluster.jobs import check_leftovers, run_on_cluster, sbatch  # noqa: E402

# The host name is read once: a $(hostname) inside a trap is a child that Slurm's SIGTERM
# to the step (after the INT) can kill first, printing "worker on  got INT".
WORKER_SH = r"""#!/bin/sh
me=$(hostname)
trap 'echo "worker on $me got INT"; exit 130' INT
trap 'echo "worker on $me got TERM"; exit 143' TERM
echo "worker on $me ready"
while true; do sleep 0.1; done
"""


def wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ddprun", required=True)
    a = ap.parse_args()

    def body(cluster, result, failures):
        cluster.start_slurm()
        d = cluster.dir
        worker = os.path.join(d, "worker.sh")
        with open(worker, "w") as f:
            f.write(WORKER_SH)
        os.chmod(worker, 0o755)
        marker = f"ddpc{uuid.uuid4().hex[:12]}"
        pidfile = os.path.join(d, "ddprun.pid")
        script = os.path.join(d, "job.sh")
        with open(script, "w") as f:
            f.write(f"""#!/bin/sh
export DDPC_MARK={marker}
{os.path.abspath(a.ddprun)} --launcher srun --nproc-per-node 1 --shutdown-timeout 10 \\
  --tag-output --env DDPC_MARK -- {worker} &
echo $! > {pidfile}
wait $!
echo "ddprun exit $?"
""")
        os.chmod(script, 0o755)
        out = os.path.join(d, "out.txt")
        job_id = sbatch(cluster, len(cluster.nodes), script, out)

        def text():
            return open(out).read() if os.path.exists(out) else ""
        try:
            wait_for(lambda: text().count(" ready") >= 2 and os.path.exists(pidfile), 60,
                     "the workers never started")
            os.kill(int(open(pidfile).read()), signal.SIGINT)  # Ctrl-C, once
            t0 = time.monotonic()
            state, code = cluster.slurm_wait(job_id, timeout=60)
            result["stop_s"] = round(time.monotonic() - t0, 2)
        except TimeoutError as e:
            failures.append(str(e))
            state, code = "?", "?"
        output = text()
        print(f"--- job {job_id}: {state} {code}\n{output}")
        for node in cluster.nodes:
            if f"worker on {node} got INT" not in output:
                failures.append(f"the worker on {node} never got SIGINT")
        if "ddprun exit 130" not in output:
            failures.append("the head did not exit 130")
        if result.get("stop_s", 99) > 10:
            failures.append(f"the job took {result['stop_s']} s to stop, more than the grace")
        check_leftovers(cluster, marker, failures)

    return run_on_cluster(2, body, sshd=False)


if __name__ == "__main__":
    sys.exit(main())
