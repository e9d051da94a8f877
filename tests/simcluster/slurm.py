"""A private Slurm cluster: munged and slurmctld in the root namespace, slurmd per node.

start() and wait() take the cluster first: Cluster uses them as its methods start_slurm
and slurm_wait."""

import os
import shutil
import time

from . import pbs
from .namespaces import SkipTest
from .procs import sh


def start(cluster, cpus_per_node=1, port_base=None):
    """munged + slurmctld (root namespace, on the bridge address) + slurmd -N nodeK on
    each node, in a private SLURM_CONF folder. The TaskProlog exports PBS_NODEFILE,
    PBS_JOBID, PBS_NUM_NODES, PBS_O_WORKDIR so a job step also looks like PBS (pbs.py).
    Sets cluster.slurm_env: the environment for sbatch/squeue/scontrol."""
    t0 = time.monotonic()
    for tool in ("slurmctld", "slurmd", "munged", "sbatch"):
        if not shutil.which(tool) and not os.path.exists(f"/usr/sbin/{tool}"):
            raise SkipTest(f"'{tool}' not found (Debian: slurmctld slurmd slurm-client munge)")
    d = os.path.join(cluster.dir, "slurm")
    os.makedirs(d, mode=0o755)
    port = port_base or int(os.environ.get("DDPCLUSTER_SLURM_PORT", "16817"))
    key = os.path.join(d, "munge.key")
    with open(key, "wb") as f:
        f.write(os.urandom(1024))
    os.chmod(key, 0o400)
    sock = os.path.join(d, "munge", "munge.socket")
    os.makedirs(os.path.dirname(sock), mode=0o755)
    cluster.start_daemon("munged", None,
                         ["/usr/sbin/munged", "-F", "--force", f"--socket={sock}",
                          f"--key-file={key}", f"--pid-file={d}/munge/munged.pid",
                          f"--log-file={d}/munge/munged.log", f"--seed-file={d}/munge/seed"],
                         log=os.path.join(d, "munged.out"))
    prolog = pbs.write_task_prolog(d)
    head = sh(["hostname"]).stdout.strip()
    conf = os.path.join(d, "slurm.conf")
    lines = [
        f"ClusterName={cluster.prefix}", f"SlurmctldHost={head}({cluster.bridge_addr})",
        f"SlurmctldPort={port}", f"SlurmdPort={port + 1}", "SlurmUser=root",
        "SlurmdUser=root", "AuthType=auth/munge", f"AuthInfo=socket={sock}",
        "CredType=cred/munge",
        f"StateSaveLocation={d}/state", f"SlurmdSpoolDir={d}/spool-%n",
        f"SlurmctldPidFile={d}/slurmctld.pid", f"SlurmdPidFile={d}/slurmd-%n.pid",
        f"SlurmctldLogFile={d}/slurmctld.log", f"SlurmdLogFile={d}/slurmd-%n.log",
        f"TmpFS={d}/tmp-%n", "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
        "SlurmdParameters=config_overrides", "MpiDefault=none", "SwitchType=switch/none",
        "SelectType=select/linear", "SchedulerType=sched/builtin",
        "SchedulerParameters=batch_sched_delay=0", "ReturnToService=2",
        "JobCompType=jobcomp/none", "AccountingStorageType=accounting_storage/none",
        "SlurmctldTimeout=30", "SlurmdTimeout=30", "InactiveLimit=0", "KillWait=5",
        "MinJobAge=300", "MessageTimeout=10", f"TaskProlog={prolog}",
        "SlurmctldDebug=info", "SlurmdDebug=info",
        "PropagateResourceLimitsExcept=ALL", "LaunchParameters=use_interactive_step",
    ]
    for name in cluster.nodes:
        lines.append(f"NodeName={name} NodeAddr={cluster.addrs[name]} NodeHostname={name} "
                     f"CPUs={cpus_per_node} State=UNKNOWN")
    lines.append(f"PartitionName=debug Nodes={','.join(cluster.nodes)} Default=YES "
                 "MaxTime=INFINITE State=UP OverSubscribe=NO")
    with open(conf, "w") as f:
        f.write("\n".join(lines) + "\n")
    for name in cluster.nodes:
        os.makedirs(f"{d}/tmp-{name}", exist_ok=True)
    os.makedirs(f"{d}/state")
    env = dict(os.environ, SLURM_CONF=conf, **{pbs.FOLDER_VAR: d})
    cluster.slurm_env = env
    cluster.slurm_dir = d
    cluster.start_daemon("slurmctld", None, ["/usr/sbin/slurmctld", "-D", "-c", "-i"],
                         env=env, log=os.path.join(d, "slurmctld.out"))
    for name in cluster.nodes:
        cluster.start_daemon(f"slurmd {name}", name, ["/usr/sbin/slurmd", "-D", "-N", name],
                             env=env, log=os.path.join(d, f"slurmd-{name}.out"))
    deadline = time.monotonic() + 30
    while True:
        r = sh(["sinfo", "-h", "-o", "%T %D"], check=False, env=env)
        states = r.stdout.split()
        if r.returncode == 0 and states[:1] == ["idle"] and states[1:2] == [str(cluster.n)]:
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"Slurm nodes not idle after 30 s: {r.stdout}{r.stderr}"
                               f" (logs in {d})")
        time.sleep(0.2)
    cluster.timings["bring_up_slurm_s"] = time.monotonic() - t0


def wait(cluster, job_id, timeout=120):
    """Polls `scontrol show job` until the job ends; returns (state, exit code text)."""
    deadline = time.monotonic() + timeout
    while True:
        r = sh(["scontrol", "show", "job", "-o", str(job_id)], check=False,
               env=cluster.slurm_env)
        fields = dict(kv.split("=", 1) for kv in r.stdout.split() if "=" in kv)
        state = fields.get("JobState", "")
        if state and state not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING"):
            return state, fields.get("ExitCode", "")
        if time.monotonic() > deadline:
            sh(["scancel", str(job_id)], check=False, env=cluster.slurm_env)
            return "TIMEOUT(test)", fields.get("ExitCode", "")
        time.sleep(0.1)
