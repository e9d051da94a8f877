#!/usr/bin/python3
"""Real multi-node DDP runs of ddp-train under ddprun (per-node mode) on simulated nodes.

  PYTHONPATH=tests tests/multinode/test_multinode.py --case CASE -n N --ddprun BIN \
      --ddp-train BIN --config JSON --source DIR

CASE: mpirun | ssh | slurm | sge | pbs (emulated by Slurm). Each case runs twice on one cluster: (1) training succeeds on
all ranks; (2) one rank's worker exits 3 mid-training, and the job must end on every node
with a non-zero exit and no process of the run left anywhere (scanned in /proc by a
marker). Prints one `RESULT` JSON line with the measured times. Exit 77: skipped (under
CI=true: a failure, exit 1).
"""

import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time
import uuid

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from simcluster import Cluster, SkipTest, kill_and_wait, skip_exit_code, pbs  # noqa: E402 (tests/ on PYTHONPATH)
from simcluster.procs import parent_pid  # noqa: E402


# The worker every rank runs. The rank named by DDPC_FAIL_RANK trains too, then exits 3
# after DDPC_FAIL_AFTER seconds (ddprun kills its ddp-train with the process group) and
# records when it failed.
WORKER_SH = r"""#!/bin/sh
if [ -n "$DDPC_FAIL_RANK" ] && [ "$RANK" = "$DDPC_FAIL_RANK" ]; then
  "$DDPC_TRAIN" "$@" &
  sleep "$DDPC_FAIL_AFTER"
  date +%s.%N > "$DDPC_DIR/failed_at"
  echo "injected failure: rank $RANK on $(hostname) exits 3" >&2
  exit 3
fi
exec "$DDPC_TRAIN" "$@"
"""


class Case:
    def __init__(self, args, cluster):
        self.a = args
        self.c = cluster
        self.dir = os.path.join(cluster.dir, "job")
        os.makedirs(self.dir, exist_ok=True)
        self.worker = os.path.join(self.dir, "worker.sh")
        with open(self.worker, "w") as f:
            f.write(WORKER_SH)
        os.chmod(self.worker, 0o755)
        with open(args.config) as f:
            cfg = json.load(f)
        cfg.setdefault("runtime", {})["timeout_s"] = 30
        cfg["runtime"]["threads"] = 1
        self.config = os.path.join(self.dir, "config.json")
        with open(self.config, "w") as f:
            json.dump(cfg, f)
        self.port = 29400 + os.getpid() % 500

    def env(self, marker, fail):
        e = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "DDPC_MARK": marker, "DDPC_TRAIN": self.a.ddp_train, "DDPC_DIR": self.dir,
            "DDPC_FAIL_RANK": "1" if fail is True else "", "DDPC_FAIL_AFTER": "3",
            "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
            "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
        }
        return e

    def train_args(self, fail):
        # Success: a short run. Failure: long enough that only propagation can end it.
        # file-store: a short run that meets in a FileStore in the folder every node sees
        # (init_method file://), not in rank 0's TCP store on the master port.
        steps = ["--epochs", "1000"] if fail is True or fail == "kill-agent" else \
            ["--epochs", "1", "--max-steps", "30"]
        if fail == "file-store":
            store = os.path.join(self.dir, "filestore")
            if os.path.exists(store):
                os.unlink(store)
            steps += ["--init-method", "file://" + store]
        return [self.worker, "--config", self.config] + steps

    def ddprun_args(self, marker, fail, hostfile=True):
        args = [self.a.ddprun, "--nproc-per-node", str(self.a.nproc), "--tag-output",
                "--shutdown-timeout", "3", "--run-id", marker]
        if hostfile:
            args += ["--hostfile", self.c.hostfile, "--master-port", str(self.port)]
        return args + ["--"] + self.train_args(fail)

    # Each launcher returns (list of exit codes, combined output).
    def launch_mpirun(self, marker, fail):
        subnet = f"{self.c.subnet}.0/24"
        argv = ["mpirun", "--allow-run-as-root", "--hostfile", self.c.hostfile,
                "-npernode", "1", "--mca", "plm_rsh_args", f"-F {self.c.ssh_config}",
                "--mca", "oob_tcp_if_include", subnet, "--mca", "btl_tcp_if_include", subnet,
                "--mca", "btl", "self,tcp"]
        for k in ("DDPC_MARK", "DDPC_TRAIN", "DDPC_DIR", "DDPC_FAIL_RANK", "DDPC_FAIL_AFTER",
                  "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            argv += ["-x", k]
        argv += self.ddprun_args(marker, fail)
        r = self.c.run(self.c.nodes[0], argv, env=self.env(marker, fail), cwd=self.a.source,
                       timeout=150, stderr=subprocess.STDOUT)
        return [r.returncode], r.stdout

    def launch_mpirun_head(self, marker, fail):
        # One ddprun on node1 that starts the agents with mpirun (--launcher mpirun); Open
        # MPI's own settings come from its OMPI_MCA_* variables.
        subnet = f"{self.c.subnet}.0/24"
        names = ["DDPC_MARK", "DDPC_TRAIN", "DDPC_DIR", "DDPC_FAIL_RANK", "DDPC_FAIL_AFTER"]
        env = dict(self.env(marker, fail), OMPI_MCA_plm_rsh_args=f"-F {self.c.ssh_config}",
                   OMPI_MCA_oob_tcp_if_include=subnet, OMPI_MCA_btl_tcp_if_include=subnet,
                   OMPI_MCA_btl="self,tcp")
        args = self.ddprun_args(marker, fail)
        extra = ["--launcher", "mpirun"] + [x for name in names for x in ("--env", name)]
        argv = args[:1] + extra + args[1:]
        r = self.c.run(self.c.nodes[0], argv, env=env, cwd=self.a.source, timeout=150,
                       stderr=subprocess.STDOUT)
        return [r.returncode], r.stdout

    def launch_ssh(self, marker, fail):
        # scripts/jobs/hostfile-ssh.sh from node1: one ddprun per node over ssh, same
        # hostfile and port; the script stops the other nodes when one fails.
        env = dict(self.env(marker, fail), SSH_CONFIG=self.c.ssh_config,
                   DDPRUN=self.a.ddprun, MASTER_PORT=str(self.port),
                   FORWARD_ENV="DDPC_MARK DDPC_TRAIN DDPC_DIR DDPC_FAIL_RANK DDPC_FAIL_AFTER "
                               "OMP_NUM_THREADS OPENBLAS_NUM_THREADS")
        argv = [os.path.join(self.a.source, "scripts", "jobs", "hostfile-ssh.sh"),
                self.c.hostfile] + self.ddprun_args(marker, fail, hostfile=False)[1:]
        if fail == "kill-agent":
            return self.kill_remote_agent(argv, env, marker)
        r = self.c.run(self.c.nodes[0], argv, env=env, cwd=self.a.source, timeout=150,
                       stderr=subprocess.STDOUT)
        return [r.returncode], r.stdout.replace("\r\n", "\n")

    def kill_remote_agent(self, argv, env, marker):
        """The head's ssh launch with the last node's agent killed by SIGKILL once all its
        workers run: the head must notice and stop every node."""
        proc = self.c.popen(self.c.nodes[0], argv, env=env, cwd=self.a.source,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        last = str(self.c.n - 1)
        agent = None
        deadline = time.monotonic() + 60
        while agent is None and time.monotonic() < deadline and proc.poll() is None:
            procs = self.c.leftovers(marker)
            # The agent itself: not the ssh client on node1 (whose remote command names it
            # too) and not the agent's guardian (a fork of it, with the same command line).
            named = {pid for pid, cmd in procs if cmd.startswith(self.a.ddprun) and
                     "--agent" in cmd and f"--node-rank {last} " in cmd + " "}
            agents = [pid for pid in named if parent_pid(pid) not in named]
            trainers = [pid for pid, cmd in procs if "ddp-train" in cmd or "worker.sh" in cmd]
            if agents and len(trainers) >= self.c.n * self.a.nproc:
                agent = agents[0]
            else:
                time.sleep(0.05)
        if agent is None:
            proc.kill()
            return [-1], "the remote agent never started\n" + proc.communicate()[0]
        with open(os.path.join(self.dir, "failed_at"), "w") as f:
            f.write(f"{time.time():.6f}\n")
        os.kill(agent, 9)
        out = proc.communicate(timeout=150)[0]
        return [proc.returncode], out.replace("\r\n", "\n")

    def launch_slurm_head(self, marker, fail):
        return self.launch_slurm(marker, fail, head=True)

    def launch_slurm(self, marker, fail, head=False):
        # The user's job script with its resource lines adapted to this cluster.
        with open(os.path.join(self.a.source, "scripts", "jobs", "slurm.sbatch")) as f:
            text = f.read()
        if head:
            # ddprun called directly in the batch script: it starts the agents with srun.
            text = text.replace("srun --ntasks-per-node=1 --wait=60 \\\n  ", "")
        text = re.sub(r"(?m)^#SBATCH --nodes=.*$", f"#SBATCH --nodes={self.c.n}", text)
        text = re.sub(r"(?m)^#SBATCH --gpus-per-node=.*\n", "", text)
        text = re.sub(r"(?m)^#SBATCH --time=.*$", "#SBATCH --time=00:05:00", text)
        script = os.path.join(self.dir, f"job-{marker}.sbatch")
        with open(script, "w") as f:
            f.write(text)
        env = dict(self.c.slurm_env, **self.env(marker, fail), DDPRUN=self.a.ddprun,
                   WORKER=self.worker, CONFIG=self.config, NPROC_PER_NODE=str(self.a.nproc),
                   DDPRUN_ARGS=f"--tag-output --shutdown-timeout 3 --run-id {marker}",
                   WORKER_ARGS=" ".join(self.train_args(fail)[3:]))
        out = os.path.join(self.dir, f"slurm-{marker}.out")
        return self.sbatch(["-D", self.a.source, "-o", out, script], env, out)


    def launch_sge(self, marker, fail):
        # ABCI's job script; rt_F and h_rt do not exist here: the test asks for the
        # parallel environment instead (qsub -pe mpi N), and the job derives its hostfile
        # from PE_HOSTFILE; mpirun inside the job starts ddprun with qrsh -inherit.
        with open(os.path.join(self.a.source, "scripts", "jobs", "abci-sge.sh")) as f:
            text = f.read()
        text = re.sub(r"(?m)^#\$ -l .*\n", "", text)
        script = os.path.join(self.dir, f"job-{marker}.sh")
        with open(script, "w") as f:
            f.write(text)
        subnet = f"{self.c.subnet}.0/24"
        env = dict(self.c.sge_env, **self.env(marker, fail), DDPRUN=self.a.ddprun,
                   WORKER=self.worker, CONFIG=self.config, NPROC_PER_NODE=str(self.a.nproc),
                   DDPRUN_ARGS=f"--tag-output --shutdown-timeout 3 --run-id {marker}",
                   WORKER_ARGS=" ".join(self.train_args(fail)[3:]),
                   MPIRUN_ARGS=(f"--allow-run-as-root --mca oob_tcp_if_include {subnet} "
                                f"--mca btl_tcp_if_include {subnet} --mca btl self,tcp "
                                "-x DDPC_MARK -x DDPC_TRAIN -x DDPC_DIR -x DDPC_FAIL_RANK "
                                "-x DDPC_FAIL_AFTER -x OMP_NUM_THREADS -x OPENBLAS_NUM_THREADS"))
        out = os.path.join(self.dir, f"sge-{marker}.out")
        r = self.c.sge_run(["qsub", "-terse", "-V", "-S", "/bin/bash", "-pe", "mpi",
                            str(self.c.n), "-o", out, "-j", "y", script], env=env,
                           cwd=self.a.source)
        if r.returncode != 0:
            raise RuntimeError(f"qsub failed: {r.stdout}{r.stderr}")
        job = r.stdout.strip().split(".")[0]
        status = self.c.sge_wait(job, timeout=150, records=self.c.n)
        if os.environ.get("DDPC_DEBUG"):
            print(self.c.sge_run(["qacct", "-j", job]).stdout)
        try:
            with open(out) as f:
                text = f.read()
        except OSError:
            text = ""
        return [1 if status is None else status], f"job {job}: exit_status {status}\n{text}"


    def launch_pbs(self, marker, fail):
        # ABCI 3.0's PBS script inside a Slurm job whose TaskProlog emulates PBS
        # (PBS_NODEFILE, PBS_JOBID, PBS_O_WORKDIR); its mpirun starts ddprun over ssh.
        with open(os.path.join(self.a.source, "scripts", "jobs", "abci3-pbs.sh")) as f:
            text = f.read()
        script = os.path.join(self.dir, f"job-{marker}.sh")
        with open(script, "w") as f:
            f.write(text)
        subnet = f"{self.c.subnet}.0/24"
        env = dict(self.c.slurm_env, **self.env(marker, fail), DDPRUN=self.a.ddprun,
                   WORKER=self.worker, CONFIG=self.config, NPROC_PER_NODE=str(self.a.nproc),
                   DDPRUN_ARGS=f"--tag-output --shutdown-timeout 3 --run-id {marker}",
                   WORKER_ARGS=" ".join(self.train_args(fail)[3:]),
                   MPIRUN_ARGS=(f"--allow-run-as-root {pbs.MPIRUN_ARGS} "
                                f"--mca plm_rsh_args -F{self.c.ssh_config} "
                                f"--mca oob_tcp_if_include {subnet} "
                                f"--mca btl_tcp_if_include {subnet} --mca btl self,tcp "
                                "-x DDPC_MARK -x DDPC_TRAIN -x DDPC_DIR -x DDPC_FAIL_RANK "
                                "-x DDPC_FAIL_AFTER -x OMP_NUM_THREADS -x OPENBLAS_NUM_THREADS"))
        out = os.path.join(self.dir, f"pbs-{marker}.out")
        return self.sbatch(pbs.sbatch_args(script, self.c.n, self.a.source, out), env, out)

    def sbatch(self, args, env, out):
        """Submits with sbatch, waits for the job, returns ([exit code], its output)."""
        r = subprocess.run(["sbatch", "--parsable"] + args,
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"sbatch failed: {r.stderr}")
        job = r.stdout.strip().split(";")[0]
        state, code = self.c.slurm_wait(job, timeout=150)
        try:
            with open(out) as f:
                text = f.read()
        except OSError:
            text = ""
        rc = int(code.split(":")[0]) if code else -1
        return [0 if state == "COMPLETED" and rc == 0 else (rc or 1)], \
            f"job {job}: {state} ExitCode={code}\n{text}"


class Watcher(threading.Thread):
    """From the injected failure on, polls /proc for the run's processes and records when
    the last one is gone (so the time does not include the scheduler's own bookkeeping)."""

    def __init__(self, cluster, marker, failed_at_file):
        super().__init__(daemon=True)
        self.c, self.marker, self.file = cluster, marker, failed_at_file
        self.gone_at = None
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set() and not os.path.exists(self.file):
            time.sleep(0.05)
        while not self.stop.is_set():
            if not self.c.leftovers(self.marker):
                self.gone_at = time.time()
                return
            time.sleep(0.05)


class PortWatcher(threading.Thread):
    """Polls node1's TCP tables (its network namespace's /proc/PID/net/tcp{,6}) for a
    listener on `port` until stopped: whether rank 0's TCP store ever listened there."""

    def __init__(self, cluster, port):
        super().__init__(daemon=True)
        self.tables = [f"/proc/{cluster.holders[cluster.nodes[0]].pid}/net/{t}"
                       for t in ("tcp", "tcp6")]
        self.local = f":{port:04X}"
        self.seen = False
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set() and not self.seen:
            for table in self.tables:
                with open(table) as f:
                    next(f)  # the header
                    for row in f:
                        fields = row.split()
                        if fields[1].endswith(self.local) and fields[3] == "0A":  # LISTEN
                            self.seen = True
            self.stop.wait(0.02)


def scan_until_gone(cluster, marker, timeout):
    deadline = time.monotonic() + timeout
    while True:
        left = cluster.leftovers(marker)
        if not left or time.monotonic() > deadline:
            return left, time.time()
        time.sleep(0.05)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", required=True,
                    choices=["mpirun", "ssh", "slurm", "sge", "pbs", "mpirun_head", "slurm_head"])
    ap.add_argument("-n", type=int, default=2)
    ap.add_argument("--nproc", type=int, default=1)
    ap.add_argument("--ddprun", required=True)
    ap.add_argument("--ddp-train", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--source", required=True, help="repository root (job scripts)")
    ap.add_argument("--keep", action="store_true", help="keep the run folder")
    a = ap.parse_args()
    for p in ("ddprun", "ddp_train", "config", "source"):
        setattr(a, p, os.path.abspath(getattr(a, p)))
    try:
        Cluster.check_possible()
    except SkipTest as e:
        return skip_exit_code(e)
    result = {"case": a.case, "nodes": a.n, "nproc_per_node": a.nproc}
    failures = []
    cluster = Cluster(a.n, keep=a.keep)
    try:
        cluster.start()
        if a.case in ("mpirun", "ssh", "pbs", "mpirun_head"):
            cluster.start_sshd()
        if a.case in ("slurm", "pbs", "slurm_head"):
            cluster.start_slurm()
        if a.case == "sge":
            cluster.start_sge()
        case = Case(a, cluster)
        launch = getattr(case, f"launch_{a.case}")
        # The head's ssh launch also loses a node's agent to SIGKILL; the head's mpirun
        # launch also trains once with a FileStore instead of the TCP store (issue 18).
        extra = {"ssh": ("kill-agent",), "mpirun_head": ("file-store",)}.get(a.case, ())
        for fail in (False, True) + extra:
            marker = f"ddpc{uuid.uuid4().hex[:12]}"
            watcher = Watcher(cluster, marker, os.path.join(case.dir, "failed_at"))
            watcher.start()
            store_port = PortWatcher(cluster, case.port)
            store_port.start()
            t0 = time.time()
            codes, out = launch(marker, fail)
            t_end = time.time()
            store_port.stop.set()
            store_port.join()
            left, t_gone = scan_until_gone(cluster, marker, timeout=10)
            watcher.stop.set()
            watcher.join()
            if watcher.gone_at:
                t_gone = min(t_gone, watcher.gone_at)
            tail = "\n".join(out.splitlines()[-40:])
            what = {False: "success", True: "failure", "kill-agent": "agent_killed",
                    "file-store": "file_store"}[fail]
            print(f"--- {a.case} {what}: exit codes {codes}, {t_end - t0:.1f} s\n{tail}\n")
            if left:
                failures.append(f"{what}: processes left: {left}")
                kill_and_wait([pid for pid, _ in left])
            if fail in (False, "file-store"):
                result[what + "_run_s"] = round(t_end - t0, 2)
                if any(codes):
                    failures.append(f"{what} run: exit codes {codes}")
                # The TCP store listens on the master port with env://, never with file://
                # (the env:// run shows that the watcher sees it when it is there).
                if a.case == "mpirun_head" and store_port.seen != (fail is False):
                    failures.append(f"{what} run: a listener on master port {case.port} was "
                                    f"{'seen' if store_port.seen else 'never seen'}")
                # ddprun's end table: one row per rank with its exit status.
                ranks = set(re.findall(r"(?m)^ddprun:\s+(\d+)\s+\d+\s+\d+\s+exit code 0\b", out))
                want = {str(r) for r in range(a.n * a.nproc)}
                if want != ranks:
                    failures.append(f"{what} run: ranks that ended with 0: {sorted(ranks)}")
            else:
                key = "" if fail is True else what + "_"
                result[key + "failure_run_s"] = round(t_end - t0, 2)
                if not all(codes):
                    failures.append(f"failure run: some launcher exited 0: {codes}")
                try:
                    with open(os.path.join(case.dir, "failed_at")) as f:
                        t_fail = float(f.read())
                    result[key + "failure_to_exit_s"] = round(t_end - t_fail, 2)
                    result[key + "failure_to_last_process_gone_s"] = round(t_gone - t_fail, 2)
                    os.unlink(os.path.join(case.dir, "failed_at"))
                except OSError:
                    failures.append("failure run: the injected failure never happened")
    except SkipTest as e:
        cluster.stop()
        return skip_exit_code(e)
    finally:
        cluster.stop()
    result.update({k: round(v, 2) for k, v in cluster.timings.items()})
    result["ok"] = not failures
    print("RESULT " + json.dumps(result))
    for f in failures:
        print(f"FAIL: {f}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
