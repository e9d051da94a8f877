#!/usr/bin/python3
"""One ddprun per node that agree on every round (3 simulated nodes): with --max-restarts 1,
a worker on node2 fails in round 0; every node's ddprun must end round 0 and start round 1
together, through node 0's rendezvous, with Python workers (gloo all-reduce). Every ddprun
exits 0, every rank of the last round is unique, saw restart count 1 and the right sum, and
nothing is left on any node. While the nodes meet, hostile clients reach node 0's port
(random bytes, another run's join, a client that never sends) while node 0 waits for the
last node, which starts 2 s late: node 0 names and drops each, counts them in its round's
summary, and the job goes on. By hand, each other node's `ddprun --status` in round 1 counts
the restart (1 of 1). By hand the nodes share a home folder: node 0 makes the
token file there, the others read it, and no worker sees the secret in its environment.

  --case byhand  ddprun --nnodes 3 --node-rank I --master-addr node1 --master-port P
  --case srun    srun --ntasks-per-node=1 ddprun ... inside a Slurm job
  --case mpirun  mpirun --hostfile H -npernode 1 ddprun --hostfile H ... over ssh

  PYTHONPATH=tests tests/multinode/test_rendezvous.py --ddprun BIN --case byhand|srun|mpirun
Exit 77: skipped (not root, no namespaces, no Slurm); under CI=true that is a failure.
"""
import argparse
import os
import re
import subprocess
import sys
import time
import uuid

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from simcluster.jobs import (  # noqa: E402 (tests/ on PYTHONPATH)
    check_leftovers, job_env, run_on_cluster, sbatch, wait_for_nodes)

NPROC = 2
PORT = 29533
WORKER_PY = r"""
import os, socket, sys
restart = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
host = socket.gethostname()
token_file = os.path.join(os.environ.get("HOME", "/nonexistent"), ".ddprun", "rdzv-token")
if os.path.exists(token_file):
    secret = open(token_file).read().strip()
    if "DDPRUN_RDZV_TOKEN" in os.environ or any(secret in v for v in os.environ.values()):
        print("the rendezvous secret is in a worker's environment", flush=True)
if restart == 0 and host == "node2" and os.environ["LOCAL_RANK"] == "0":
    print(f"injected failure on {host}", flush=True)
    sys.exit(3)
if restart == 1 and "STATUS_DDPRUN" in os.environ and os.environ["GROUP_RANK"] != "0" \
        and os.environ["LOCAL_RANK"] == "0":
    import subprocess
    status = subprocess.run([os.environ["STATUS_DDPRUN"], "--status",
                             os.environ["TORCHELASTIC_RUN_ID"]],
                            capture_output=True, text=True, timeout=30)
    print(f"status on {host}: {(status.stdout or status.stderr).splitlines()[:1]}", flush=True)
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
value = torch.tensor([float(rank + 1)])
dist.all_reduce(value)
print(f"round {restart} rank {rank} of {world} on {host} sum {value.item():g}", flush=True)
dist.destroy_process_group()
"""
LINE = re.compile(r"round (\d+) rank (\d+) of (\d+) on (\S+) sum (\S+)")

HOSTILE_PY = r"""
import os, socket, sys, time
host, port = sys.argv[1], int(sys.argv[2])
def conn():
    for _ in range(200):
        try:
            return socket.create_connection((host, port), timeout=2)
        except OSError:
            time.sleep(0.05)
    return None
s = conn()
if s: s.sendall(os.urandom(8192)); s.close()
s = conn()
if s:
    s.recv(4096)  # node 0's greeting
    s.sendall(b'{"ddprun_join": 1, "run": "another-job", "node": 1, "round": 0, "nproc": 2, "host": "x", "nnodes": 3, "nonce": "00"}\n')
silent = conn()      # never sends: the host must not wait for it
time.sleep(8)
print("hostile client done", flush=True)
"""


def check_output(outputs, world, failures, result):
    seen = {}
    for node, out in outputs.items():
        for m in LINE.finditer(out):
            restart, rank, size, host, total = m.groups()
            if int(restart) != 1:
                failures.append(f"rank {rank} on {host} ran in round {restart}, not 1")
            if int(rank) in seen:
                failures.append(f"rank {rank} twice")
            seen[int(rank)] = host
            if int(size) != world:
                failures.append(f"rank {rank} saw a world of {size}")
            if float(total) != world * (world + 1) / 2:
                failures.append(f"rank {rank}'s all-reduce gave {total}")
    if sorted(seen) != list(range(world)):
        failures.append(f"ranks {sorted(seen)} in the last round, not 0-{world - 1}")
    text = "".join(outputs.values())
    if "injected failure on node2" not in text:
        failures.append("the failure was not injected")
    result["ranks"] = len(seen)


def run_byhand(cluster, a, worker, marker, failures, result):
    home = os.path.join(cluster.dir, "home")  # every node's (simulated nodes share /tmp)
    os.makedirs(home, mode=0o700, exist_ok=True)
    # Each other node's rank 0 asks its own ddprun for --status in round 1.
    env = job_env(marker, HOME=home, STATUS_DDPRUN=os.path.abspath(a.ddprun))
    procs = {}
    hostile = None
    for i, node in enumerate(cluster.nodes):
        if i == len(cluster.nodes) - 1:
            # Node 0 now waits for this node: the hostile clients come meanwhile.
            hostile = cluster.popen(cluster.nodes[2], ["/usr/bin/python3", "-c", HOSTILE_PY,
                                                       cluster.nodes[0], str(PORT)],
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            time.sleep(2)
        argv = [os.path.abspath(a.ddprun), "--nnodes", str(len(cluster.nodes)), "--node-rank",
                str(i), "--master-addr", cluster.nodes[0], "--master-port", str(PORT),
                "--nproc-per-node", str(NPROC), "--max-restarts", "1", "--shutdown-timeout", "5",
                "--", "/usr/bin/python3", worker]
        # A runtime folder per node, as real nodes have (simulated ones share /tmp): each
        # worker's --status reaches its own node's ddprun.
        runtime = os.path.join(cluster.dir, f"runtime{i}")
        os.makedirs(runtime, mode=0o700, exist_ok=True)
        procs[node] = cluster.popen(node, argv, env=dict(env, XDG_RUNTIME_DIR=runtime),
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    outputs = wait_for_nodes(procs, failures)
    for node, out in outputs.items():
        if node != cluster.nodes[0] and not re.search(
                r"status on \S+: \['ddprun: run .*\), restarts 1 of 1", out):
            failures.append(f"{node}'s --status in round 1 did not count 1 restart of 1")
    hostile.communicate(timeout=30)
    for what in ("refused a connection: not a ddprun join",
                 "refused a connection: a join for run 'another-job', not this one",
                 "refused connection(s)"):
        if what not in outputs[cluster.nodes[0]]:
            failures.append(f"node 0 did not say '{what}'")
    token = os.path.join(home, ".ddprun", "rdzv-token")
    if not os.path.isfile(token) or os.stat(token).st_mode & 0o777 != 0o600:
        failures.append(f"node 0 made no token file {token} of mode 0600")
    for node, out in outputs.items():
        if "no shared secret" in out:
            failures.append(f"{node}'s ddprun had no secret with a shared home folder")
        if "the rendezvous secret is in a worker's environment" in out:
            failures.append(f"a worker on {node} had the rendezvous secret in its environment")
    return outputs


def run_srun(cluster, a, worker, marker, failures, result):
    cluster.start_slurm()
    d = cluster.dir
    out = os.path.join(d, "out.txt")
    script = os.path.join(d, "job.sh")
    with open(script, "w") as f:
        f.write(f"""#!/bin/sh
export DDPC_MARK={marker} OMP_NUM_THREADS=1
srun --ntasks-per-node=1 --wait=60 {os.path.abspath(a.ddprun)} --nproc-per-node {NPROC} \\
  --master-port {PORT} --max-restarts 1 --shutdown-timeout 5 --tag-output \\
  -- /usr/bin/python3 {worker}
echo "srun exit $?"
""")
    os.chmod(script, 0o755)
    state, code = cluster.slurm_wait(sbatch(cluster, len(cluster.nodes), script, out), timeout=150)
    text = open(out).read() if os.path.exists(out) else ""
    print(f"--- job: {state} {code}\n{text}")
    if state != "COMPLETED" or "srun exit 0" not in text:
        failures.append(f"the job ended {state} {code}, not COMPLETED with srun exit 0")
    return {"job": text}


def run_mpirun(cluster, a, worker, marker, failures, result):
    subnet = f"{cluster.subnet}.0/24"
    argv = ["mpirun", "--allow-run-as-root", "--hostfile", cluster.hostfile, "-npernode", "1",
            "--mca", "plm_rsh_args", f"-F {cluster.ssh_config}", "--mca", "oob_tcp_if_include",
            subnet, "--mca", "btl_tcp_if_include", subnet, "--mca", "btl", "self,tcp",
            "-x", "DDPC_MARK", "-x", "OMP_NUM_THREADS", "-x", "HOME",
            os.path.abspath(a.ddprun), "--hostfile", cluster.hostfile, "--master-port", str(PORT),
            "--nproc-per-node", str(NPROC), "--max-restarts", "1", "--shutdown-timeout", "5",
            "--tag-output", "--", "/usr/bin/python3", worker]
    # One home folder for every node, as a cluster's users have (ssh would give the remote
    # nodes root's, and node 0, started here, none): node 0 makes the token file there.
    home = os.path.join(cluster.dir, "home")
    os.makedirs(home, mode=0o700, exist_ok=True)
    r = cluster.run(cluster.nodes[0], argv, env=job_env(marker, HOME=home), timeout=150,
                    stderr=subprocess.STDOUT)
    print(f"--- mpirun: exit {r.returncode}\n{r.stdout}")
    if r.returncode != 0:
        failures.append(f"mpirun exited {r.returncode}, not 0")
    return {"mpirun": r.stdout}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ddprun", required=True)
    ap.add_argument("--case", choices=["byhand", "srun", "mpirun"], required=True)
    a = ap.parse_args()

    def body(cluster, result, failures):
        worker = os.path.join(cluster.dir, "worker.py")
        with open(worker, "w") as f:
            f.write(WORKER_PY)
        marker = f"ddpc{uuid.uuid4().hex[:12]}"
        t0 = time.monotonic()
        run = {"byhand": run_byhand, "srun": run_srun, "mpirun": run_mpirun}[a.case]
        outputs = run(cluster, a, worker, marker, failures, result)
        result["run_s"] = round(time.monotonic() - t0, 2)
        check_output(outputs, len(cluster.nodes) * NPROC, failures, result)
        check_leftovers(cluster, marker, failures)

    return run_on_cluster(3, body, {"case": a.case, "nodes": 3}, sshd=a.case == "mpirun")


if __name__ == "__main__":
    sys.exit(main())
