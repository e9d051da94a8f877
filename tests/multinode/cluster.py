#!/usr/bin/python3
"""A cluster of simulated nodes on one Linux machine, for ddprun's multi-node tests.

Each node is a set of namespaces held open by one "holder" process:
  - a network namespace with one veth (eth0) on a bridge in the root namespace, its own
    address on a private /24, loopback up, and no default route (nothing leaves the machine);
  - a UTS namespace with its own host name (node1, node2, ...);
  - a mount namespace (private propagation) where /etc/hosts is bind-mounted to a file
    that maps every node's name to its namespace address.
Commands run "on" a node with nsenter into those three namespaces (see Cluster.run).
Optional services: sshd per node (Cluster.start_sshd), a Slurm cluster (start_slurm), a
Grid Engine cell (start_sge).

Everything lives in one per-run folder; teardown kills every process in the nodes'
network namespaces and every daemon by PID, deletes the bridge and the folder. It runs from
`with Cluster(...)`, atexit and SIGTERM/SIGINT/SIGHUP. A state file under /run records what
a run created so the next run removes it after a crash (Cluster.clean_stale).

Usage as a program (for manual experiments):
  /usr/bin/python3 tests/multinode/cluster.py up -n 4 [--ssh] [--slurm] [--sge]   # Ctrl-C tears down
  /usr/bin/python3 tests/multinode/cluster.py clean                      # remove stale state
Needs root (or CAP_SYS_ADMIN + CAP_NET_ADMIN), iproute2, util-linux; sshd for --ssh;
slurmctld, slurmd and munge for --slurm; gridengine-master/-exec/-client for --sge.
"""

import argparse
import atexit
import fcntl
import json
import re
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

STATE_DIR = "/run/ddpcluster"
ENV_MARK = "DDPCLUSTER_HOLDER"


class SkipTest(Exception):
    """The machine cannot host the cluster (not root, no namespaces, missing tools)."""


def _sh(args, check=True, **kw):
    return subprocess.run(args, check=check, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, **kw)


def _ns_inode(pid, kind):
    try:
        return os.readlink(f"/proc/{pid}/ns/{kind}")
    except OSError:
        return None


def _pids():
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            yield int(entry)


def _read_environ(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return []


def _cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def processes_with_marker(marker):
    """(pid, cmdline) of every process whose environment or command line contains marker."""
    mark = marker.encode()
    found = []
    me = os.getpid()
    for pid in _pids():
        if pid == me:
            continue
        cmd = _cmdline(pid)
        if marker in cmd or any(mark in e for e in _read_environ(pid)):
            found.append((pid, cmd))
    return found


def kill_and_wait(pids, timeout=5.0):
    """SIGKILL every pid, then wait until none is left (reaps our own children)."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    left = list(pids)
    while left and time.monotonic() < deadline:
        nxt = []
        for pid in left:
            try:
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    continue
            except ChildProcessError:
                pass
            if os.path.exists(f"/proc/{pid}") and not _is_zombie(pid):
                nxt.append(pid)
        left = nxt
        if left:
            time.sleep(0.02)
    return left


def _is_zombie(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def _delete_links(prefix):
    """Deletes the bridge and the root ends of the veth pairs. The kernel frees a dead
    namespace (and so the veth pairs) asynchronously, seconds later under load: a next
    run must not find them, so they are deleted explicitly."""
    names = [n for n in os.listdir("/sys/class/net")
             if n == f"{prefix}br" or (n.startswith(f"{prefix}v") and n[len(prefix) + 1:].isdigit())]
    for name in names:
        _sh(["ip", "link", "del", name], check=False)
    return names


class Cluster:
    """N simulated nodes. Attributes after start(): nodes (names), addrs (name -> address),
    dir (run folder), hosts_file (/etc/hosts of every node), hostfile (node names, one a
    line), and after start_sshd(): ssh_config, ssh_key; after start_slurm(): slurm_env."""

    def __init__(self, n, prefix=None, subnet=None, base_dir=None, keep=False):
        if n < 1 or n > 200:
            raise ValueError("n must be 1..200")
        self.n = n
        self.prefix = prefix or os.environ.get("DDPCLUSTER_PREFIX", "ddpc")
        if len(self.prefix) > 8 or not self.prefix.isalnum():
            raise ValueError("prefix: up to 8 letters or digits (interface names are short)")
        self.subnet = subnet or os.environ.get("DDPCLUSTER_SUBNET", "10.213.77")
        self.base_dir = base_dir
        self.keep = keep
        self.nodes = [f"node{i}" for i in range(1, n + 1)]
        self.addrs = {name: f"{self.subnet}.{i}" for i, name in enumerate(self.nodes, 1)}
        self.bridge_addr = f"{self.subnet}.254"
        self.bridge = f"{self.prefix}br"
        self.holders = {}      # node -> Popen of its holder
        self.daemons = []      # (what, Popen or pid)
        self.dir = None
        self._lock = None
        self._stopped = True
        self.timings = {}
        self.ssh_config = None
        self.slurm_env = None

    # -------------------------------------------------------------------- lifecycle
    @staticmethod
    def check_possible():
        """Raises SkipTest with a reason when this machine cannot host a cluster."""
        if os.geteuid() != 0:
            raise SkipTest("needs root (network, UTS and mount namespaces, a bridge)")
        for tool in ("ip", "unshare", "nsenter", "mount"):
            if not shutil.which(tool):
                raise SkipTest(f"'{tool}' not found")
        r = subprocess.run(["unshare", "--net", "--uts", "--mount", "true"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if r.returncode != 0:
            raise SkipTest(f"cannot create namespaces: {r.stderr.strip()}")

    def state_file(self):
        return os.path.join(STATE_DIR, f"{self.prefix}.json")

    def start(self):
        t0 = time.monotonic()
        self.check_possible()
        os.makedirs(STATE_DIR, exist_ok=True)
        # One cluster per prefix at a time: a second run waits for the first.
        self._lock = open(os.path.join(STATE_DIR, f"{self.prefix}.lock"), "w")
        fcntl.flock(self._lock, fcntl.LOCK_EX)
        self.clean_stale(self.prefix)
        self.dir = tempfile.mkdtemp(prefix=f"{self.prefix}-cluster-", dir=self.base_dir)
        os.chmod(self.dir, 0o755)  # daemons (munge) check the path is not group/world writable
        self._stopped = False
        self._write_state()
        atexit.register(self.stop)
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            if signal.getsignal(sig) in (signal.SIG_DFL, signal.default_int_handler):
                signal.signal(sig, self._on_signal)
        try:
            self._bring_up_network()
        except BaseException:
            self.stop()
            raise
        self.timings["bring_up_nodes_s"] = time.monotonic() - t0
        return self

    def _on_signal(self, sig, _frame):
        self.stop()
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def _write_state(self):
        state = {"dir": self.dir, "bridge": self.bridge,
                 "holders": {k: p.pid for k, p in self.holders.items()},
                 "daemons": [p if isinstance(p, int) else p.pid for _, p in self.daemons],
                 "keep": self.keep}
        tmp = self.state_file() + ".tmp"
        with open(tmp, "w") as f:
            json.dump(state, f)
        os.replace(tmp, self.state_file())

    def _bring_up_network(self):
        self.hosts_file = os.path.join(self.dir, "hosts")
        with open(self.hosts_file, "w") as f:
            f.write("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")
            f.write(f"{self.bridge_addr}\t{self.prefix}-head\n")
            for name in self.nodes:
                f.write(f"{self.addrs[name]}\t{name}\n")
        self.hostfile = os.path.join(self.dir, "hostfile")
        with open(self.hostfile, "w") as f:
            f.write("".join(name + "\n" for name in self.nodes))
        _sh(["ip", "link", "add", self.bridge, "type", "bridge"])
        _sh(["ip", "addr", "add", f"{self.bridge_addr}/24", "dev", self.bridge])
        _sh(["ip", "link", "set", self.bridge, "up"])
        env = dict(os.environ)
        for i, name in enumerate(self.nodes, 1):
            env[ENV_MARK] = f"{self.prefix}:{name}"
            script = (f"set -e; ip link set lo up; hostname {name}; "
                      f"mount --bind {self.hosts_file} /etc/hosts; "
                      f"echo ready; exec sleep infinity")
            p = subprocess.Popen(["unshare", "--net", "--uts", "--mount", "--propagation",
                                  "private", "sh", "-c", script], env=env,
                                 stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
            self.holders[name] = p
            self._write_state()
            if p.stdout.readline().strip() != b"ready":
                raise RuntimeError(f"{name}: namespace holder failed")
            p.stdout.close()
            host_if, peer = f"{self.prefix}v{i}", f"{self.prefix}p{i}"
            _sh(["ip", "link", "add", host_if, "type", "veth", "peer", "name", peer])
            _sh(["ip", "link", "set", host_if, "master", self.bridge, "up"])
            _sh(["ip", "link", "set", peer, "netns", str(p.pid)])
            self._on(name, f"ip link set {peer} name eth0 && "
                           f"ip addr add {self.addrs[name]}/24 dev eth0 && ip link set eth0 up")
        self.net_inodes = {_ns_inode(p.pid, "net") for p in self.holders.values()}

    def _on(self, node, script):
        return _sh(self.command(node, ["sh", "-c", script]))

    def stop(self):
        """Stops every daemon and process on the nodes, removes the bridge and the folder.
        Idempotent; safe from atexit and signal handlers."""
        if self._stopped:
            return
        self._stopped = True
        t0 = time.monotonic()
        for what, p in reversed(self.daemons):
            pid = p if isinstance(p, int) else p.pid
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        # Give daemons a moment to exit by themselves (slurmctld saves state), then kill.
        deadline = time.monotonic() + 2.0
        for what, p in self.daemons:
            pid = p if isinstance(p, int) else p.pid
            while time.monotonic() < deadline and os.path.exists(f"/proc/{pid}"):
                try:
                    if os.waitpid(pid, os.WNOHANG)[0] == pid:
                        break
                except ChildProcessError:
                    pass
                time.sleep(0.02)
        kill_and_wait([p if isinstance(p, int) else p.pid for _, p in self.daemons])
        self._kill_everything_in_nodes()
        _delete_links(self.prefix)
        if self.dir and not self.keep:
            shutil.rmtree(self.dir, ignore_errors=True)
        try:
            os.unlink(self.state_file())
        except OSError:
            pass
        if self._lock:
            self._lock.close()
            self._lock = None
        self.timings["teardown_s"] = time.monotonic() - t0

    def _kill_everything_in_nodes(self):
        inodes = {_ns_inode(p.pid, "net") for p in self.holders.values()} - {None}
        inodes |= getattr(self, "net_inodes", set()) - {None}
        for _ in range(5):
            victims = [pid for pid in _pids() if pid != os.getpid()
                       and _ns_inode(pid, "net") in inodes]
            victims += [p.pid for p in self.holders.values() if p.poll() is None]
            if not victims:
                break
            kill_and_wait(sorted(set(victims)))
        for p in self.holders.values():
            try:
                p.wait(timeout=2)
            except subprocess.TimeoutExpired:
                pass

    @staticmethod
    def clean_stale(prefix="ddpc"):
        """Removes what a crashed run with this prefix left: processes in its nodes'
        namespaces, its daemons, its bridge, its folder. Returns what it removed."""
        removed = []
        path = os.path.join(STATE_DIR, f"{prefix}.json")
        state = {}
        try:
            with open(path) as f:
                state = json.load(f)
        except (OSError, ValueError):
            pass
        holders = [pid for pid in _pids()
                   if any(e.startswith(f"{ENV_MARK}={prefix}:".encode())
                          for e in _read_environ(pid))]
        inodes = {_ns_inode(pid, "net") for pid in holders} - {None}
        own = _ns_inode(os.getpid(), "net")
        inodes.discard(own)
        victims = [pid for pid in _pids() if _ns_inode(pid, "net") in inodes]
        victims += [pid for pid in state.get("daemons", []) if os.path.exists(f"/proc/{pid}")
                    and _ns_inode(pid, "net") is not None]
        victims = sorted(set(victims) - {os.getpid()})
        if victims:
            removed.append(f"{len(victims)} processes")
            kill_and_wait(victims)
        links = _delete_links(prefix)
        if links:
            removed.append("links " + " ".join(links))
        d = state.get("dir")
        if d and os.path.isdir(d) and not state.get("keep"):
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
        if os.path.exists(path):
            os.unlink(path)
        if removed:
            print(f"cluster: removed stale state of a previous run: {', '.join(removed)}",
                  file=sys.stderr)
        return removed

    # ------------------------------------------------------------------ run on nodes
    def command(self, node, argv, cwd=None):
        """The argv that runs argv on node (net + uts + mount namespaces, working dir cwd)."""
        pid = self.holders[node].pid
        return ["nsenter", "-t", str(pid), "--net", "--uts", "--mount",
                f"--wd={cwd or os.getcwd()}", "--"] + list(argv)

    def popen(self, node, argv, env=None, cwd=None, **kw):
        """Starts argv on node (env: the whole environment; default ours)."""
        return subprocess.Popen(self.command(node, argv, cwd), env=env, **kw)

    def run(self, node, argv, env=None, cwd=None, timeout=None, check=False, **kw):
        """Runs argv on node, waits; output captured as text unless stdout/stderr given."""
        kw.setdefault("stdout", subprocess.PIPE)
        kw.setdefault("stderr", subprocess.PIPE)
        return subprocess.run(self.command(node, argv, cwd), env=env, timeout=timeout,
                              check=check, text=True, **kw)

    def leftovers(self, marker):
        """Processes anywhere on the machine carrying marker (env or command line)."""
        return processes_with_marker(marker)

    def _daemon(self, what, node, argv, env=None, log=None):
        out = open(log, "ab") if log else subprocess.DEVNULL
        if node is None:
            p = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, start_new_session=True)
        else:
            p = self.popen(node, argv, env=env, cwd=self.dir, stdout=out,
                           stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                           start_new_session=True)
        if log:
            out.close()
        self.daemons.append((what, p))
        self._write_state()
        return p

    # ------------------------------------------------------------------------ sshd
    def start_sshd(self):
        """sshd on every node (port 22 of its address, root login with a generated key).
        Writes ssh_config (use `ssh -F cluster.ssh_config nodeK`)."""
        t0 = time.monotonic()
        sshd = shutil.which("sshd") or "/usr/sbin/sshd"
        if not os.path.exists(sshd) or not shutil.which("ssh"):
            raise SkipTest("sshd or ssh not found (Debian: openssh-server, openssh-client)")
        d = os.path.join(self.dir, "ssh")
        os.makedirs(d, mode=0o700)
        self.ssh_key = os.path.join(d, "id_ed25519")
        _sh(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", self.ssh_key])
        host_key = os.path.join(d, "host_ed25519")
        _sh(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", host_key])
        shutil.copy(self.ssh_key + ".pub", os.path.join(d, "authorized_keys"))
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # privilege separation dir
        self.ssh_config = os.path.join(d, "ssh_config")
        with open(self.ssh_config, "w") as f:
            for name in self.nodes:
                f.write(f"Host {name}\n  HostName {self.addrs[name]}\n")
            f.write(f"Host *\n  User root\n  IdentityFile {self.ssh_key}\n"
                    "  IdentitiesOnly yes\n  StrictHostKeyChecking no\n"
                    "  UserKnownHostsFile /dev/null\n  BatchMode yes\n  LogLevel ERROR\n"
                    "  ConnectTimeout 10\n")
        for name in self.nodes:
            cfg = os.path.join(d, f"sshd_config.{name}")
            with open(cfg, "w") as f:
                f.write(f"ListenAddress {self.addrs[name]}\nPort 22\nHostKey {host_key}\n"
                        f"AuthorizedKeysFile {d}/authorized_keys\nPermitRootLogin yes\n"
                        "PasswordAuthentication no\nKbdInteractiveAuthentication no\n"
                        "UsePAM no\nStrictModes no\nPrintMotd no\nUseDNS no\n"
                        f"PidFile {d}/sshd.{name}.pid\nMaxStartups 100\nMaxSessions 100\n"
                        "AcceptEnv DDP* OMPI_* MASTER_*\n"
                        # bash sources ~/.bashrc under sshd only as a top-level shell: the
                        # nodes must not wait on the host user's shell setup (a slow
                        # ~/.bashrc made every ssh session here take a minute)
                        "SetEnv SHLVL=1\n")
            self._daemon(f"sshd {name}", name, [sshd, "-D", "-e", "-f", cfg],
                         log=os.path.join(d, f"sshd.{name}.log"))
        deadline = time.monotonic() + 10
        for name in self.nodes:  # every sshd listens (the root namespace reaches the bridge)
            while True:
                try:
                    socket.create_connection((self.addrs[name], 22), timeout=1).close()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.02)
        deadline = time.monotonic() + 10
        pending = list(self.nodes)
        while pending:  # and accepts the key (all nodes checked at once)
            checks = {name: subprocess.Popen(["ssh", "-F", self.ssh_config, name, "hostname"],
                                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                             text=True) for name in pending}
            pending = []
            for name, p in checks.items():
                out, err = p.communicate(timeout=15)
                if p.returncode != 0 or out.strip() != name:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"sshd on {name} not reachable: {err.strip()}")
                    pending.append(name)
            if pending:
                time.sleep(0.1)
        self.timings["bring_up_sshd_s"] = time.monotonic() - t0

    def ssh(self, node, remote_command, from_node=None, timeout=None, **kw):
        """Runs remote_command (a shell string) on node over ssh, from from_node (default:
        the root namespace)."""
        argv = ["ssh", "-F", self.ssh_config, node, remote_command]
        kw.setdefault("stdout", subprocess.PIPE)
        kw.setdefault("stderr", subprocess.PIPE)
        if from_node:
            return self.run(from_node, argv, timeout=timeout, **kw)
        return subprocess.run(argv, timeout=timeout, text=True, **kw)

    # ----------------------------------------------------------------------- Slurm
    def start_slurm(self, cpus_per_node=1, port_base=None):
        """munged + slurmctld (root namespace, on the bridge address) + slurmd -N nodeK on
        each node, in a private SLURM_CONF folder. The TaskProlog exports PBS_NODEFILE,
        PBS_JOBID, PBS_NUM_NODES, PBS_O_WORKDIR so a job step also looks like PBS.
        Sets slurm_env: the environment for sbatch/squeue/scontrol."""
        t0 = time.monotonic()
        for tool in ("slurmctld", "slurmd", "munged", "sbatch"):
            if not shutil.which(tool) and not os.path.exists(f"/usr/sbin/{tool}"):
                raise SkipTest(f"'{tool}' not found (Debian: slurmctld slurmd slurm-client munge)")
        d = os.path.join(self.dir, "slurm")
        os.makedirs(d, mode=0o755)
        port = port_base or int(os.environ.get("DDPCLUSTER_SLURM_PORT", "16817"))
        key = os.path.join(d, "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o400)
        sock = os.path.join(d, "munge", "munge.socket")
        os.makedirs(os.path.dirname(sock), mode=0o755)
        self._daemon("munged", None,
                     ["/usr/sbin/munged", "-F", "--force", f"--socket={sock}",
                      f"--key-file={key}", f"--pid-file={d}/munge/munged.pid",
                      f"--log-file={d}/munge/munged.log", f"--seed-file={d}/munge/seed"],
                     log=os.path.join(d, "munged.out"))
        prolog = os.path.join(d, "task_prolog.sh")
        with open(prolog, "w") as f:
            f.write("#!/bin/sh\n# Emulates PBS's job environment in every Slurm task.\n"
                    "f=\"$SLURM_TMPDIR_FOR_PBS/pbs_nodefile.$SLURM_JOB_ID.$(hostname)\"\n"
                    "scontrol show hostnames \"$SLURM_JOB_NODELIST\" > \"$f\"\n"
                    "echo \"export PBS_NODEFILE=$f\"\n"
                    "echo \"export PBS_JOBID=$SLURM_JOB_ID.pbs-emulated\"\n"
                    "echo \"export PBS_NUM_NODES=$SLURM_JOB_NUM_NODES\"\n"
                    "echo \"export PBS_O_WORKDIR=$SLURM_SUBMIT_DIR\"\n")
        os.chmod(prolog, 0o755)
        head = _sh(["hostname"]).stdout.strip()
        conf = os.path.join(d, "slurm.conf")
        lines = [
            f"ClusterName={self.prefix}", f"SlurmctldHost={head}({self.bridge_addr})",
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
        for name in self.nodes:
            lines.append(f"NodeName={name} NodeAddr={self.addrs[name]} NodeHostname={name} "
                         f"CPUs={cpus_per_node} State=UNKNOWN")
        lines.append(f"PartitionName=debug Nodes={','.join(self.nodes)} Default=YES "
                     "MaxTime=INFINITE State=UP OverSubscribe=NO")
        with open(conf, "w") as f:
            f.write("\n".join(lines) + "\n")
        for name in self.nodes:
            os.makedirs(f"{d}/tmp-{name}", exist_ok=True)
        os.makedirs(f"{d}/state")
        env = dict(os.environ, SLURM_CONF=conf, SLURM_TMPDIR_FOR_PBS=d)
        self.slurm_env = env
        self.slurm_dir = d
        self._daemon("slurmctld", None, ["/usr/sbin/slurmctld", "-D", "-c", "-i"], env=env,
                     log=os.path.join(d, "slurmctld.out"))
        for name in self.nodes:
            self._daemon(f"slurmd {name}", name, ["/usr/sbin/slurmd", "-D", "-N", name],
                         env=env, log=os.path.join(d, f"slurmd-{name}.out"))
        deadline = time.monotonic() + 30
        while True:
            r = _sh(["sinfo", "-h", "-o", "%T %D"], check=False, env=env)
            states = r.stdout.split()
            if r.returncode == 0 and states[:1] == ["idle"] and states[1:2] == [str(self.n)]:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"Slurm nodes not idle after 30 s: {r.stdout}{r.stderr}"
                                   f" (logs in {d})")
            time.sleep(0.2)
        self.timings["bring_up_slurm_s"] = time.monotonic() - t0

    # ---------------------------------------------------------------- Grid Engine
    def start_sge(self, pe="mpi"):
        """A private Grid Engine cell: sge_qmaster on node1, sge_execd on every node, queue
        all.q (1 slot per node, per-host tmpdir), parallel environment `pe` (1 slot per
        host, control_slaves) and a 1 s scheduling interval. Client commands must run on a
        node (qmaster rejects the root namespace's name): use sge_run(). Sets sge_env."""
        t0 = time.monotonic()
        lib = "/var/lib/gridengine"
        if not os.path.exists("/usr/sbin/sge_qmaster") or not os.path.isdir(lib):
            raise SkipTest("Grid Engine not found (Debian: gridengine-master gridengine-exec "
                           "gridengine-client)")
        d = os.path.join(self.dir, "sge")
        root = os.path.join(d, "root")
        cell = "ddpc"
        common = os.path.join(root, cell, "common")
        os.makedirs(common)
        for entry in os.listdir(lib):
            if entry != "default":
                os.symlink(os.path.join(lib, entry), os.path.join(root, entry))
        spool = os.path.join(d, "spool")
        os.makedirs(os.path.join(spool, "qmaster"))
        os.makedirs(os.path.join(spool, "execd"))
        with open(os.path.join(common, "bootstrap"), "w") as f:
            f.write("admin_user root\ndefault_domain none\nignore_fqdn true\n"
                    "spooling_method classic\nspooling_lib libspoolc\n"
                    f"spooling_params {common};{spool}/qmaster\nbinary_path /usr/sbin\n"
                    f"qmaster_spool_dir {spool}/qmaster\nsecurity_mode none\n"
                    "listener_threads 2\nworker_threads 2\nscheduler_threads 1\n")
        with open(os.path.join(common, "act_qmaster"), "w") as f:
            f.write(self.nodes[0] + "\n")
        with open("/usr/share/gridengine/default-configuration") as f:
            conf = f.read()
        conf = re.sub(r"(?m)^execd_spool_dir.*$", f"execd_spool_dir {spool}/execd", conf)
        conf = re.sub(r"(?m)^min_uid.*$", "min_uid 0", conf)
        conf = re.sub(r"(?m)^min_gid.*$", "min_gid 0", conf)
        conf = re.sub(r"(?m)^load_report_time.*$", "load_report_time 00:00:05", conf)
        conf_file = os.path.join(d, "global-configuration")
        with open(conf_file, "w") as f:
            f.write(conf)
        env = dict(os.environ, SGE_ROOT=root, SGE_CELL=cell, SGE_QMASTER_PORT="6444",
                   SGE_EXECD_PORT="6445", SGE_ND="1",
                   PATH=f"/usr/lib/gridengine:{os.environ.get('PATH', '/usr/bin:/bin')}")
        env.pop("SGE_ND")
        ul = "/usr/lib/gridengine"
        res = "/usr/share/gridengine/util/resources"
        for argv in ([f"{ul}/spoolinit", "classic", "libspoolc", f"{common};{spool}/qmaster",
                      "init"],
                     [f"{ul}/spooldefaults", "configuration", conf_file],
                     [f"{ul}/spooldefaults", "complexes", f"{res}/centry"],
                     [f"{ul}/spooldefaults", "usersets", f"{res}/usersets"],
                     [f"{ul}/spooldefaults", "managers", "root"],
                     [f"{ul}/spooldefaults", "adminhosts", *self.nodes]):
            r = _sh(argv, check=False, env=env)
            if r.returncode != 0:
                raise RuntimeError(f"{' '.join(argv)}: {r.stdout}{r.stderr}")
        self.sge_env = env
        self.sge_dir = d
        self._daemon("sge_qmaster", self.nodes[0], ["/usr/sbin/sge_qmaster"],
                     env=dict(env, SGE_ND="1"), log=os.path.join(d, "qmaster.out"))
        deadline = time.monotonic() + 30
        while self.sge_run(["qconf", "-sh"]).returncode != 0:
            if time.monotonic() > deadline:
                raise RuntimeError(f"sge_qmaster not up (logs in {spool}/qmaster)")
            time.sleep(0.2)
        tmp = os.path.join(d, "tmp")
        files = {
            "sched": "algorithm default\nschedule_interval 0:0:1\nmaxujobs 0\n"
                     "queue_sort_method load\njob_load_adjustments NONE\n"
                     "load_adjustment_decay_time 0:0:0\nload_formula np_load_avg\n"
                     "schedd_job_info true\nflush_submit_sec 1\nflush_finish_sec 1\n"
                     "params none\nreprioritize_interval 0:0:0\nhalftime 168\n"
                     "usage_weight_list cpu=1.000000,mem=0.000000,io=0.000000\n"
                     "compensation_factor 5.000000\nweight_user 0.250000\n"
                     "weight_project 0.250000\nweight_department 0.250000\n"
                     "weight_job 0.250000\nweight_tickets_functional 0\n"
                     "weight_tickets_share 0\nshare_override_tickets TRUE\n"
                     "share_functional_shares TRUE\nmax_functional_jobs_to_schedule 200\n"
                     "report_pjob_tickets TRUE\nmax_pending_tasks_per_job 50\n"
                     "halflife_decay_list none\npolicy_hierarchy OFS\nweight_ticket 0.5\n"
                     "weight_waiting_time 0.278\nweight_deadline 3600000.0\n"
                     "weight_urgency 0.5\nweight_priority 0.0\nmax_reservation 0\n"
                     "default_duration INFINITY\n",
            "pe": f"pe_name {pe}\nslots 9999\nuser_lists NONE\nxuser_lists NONE\n"
                  "start_proc_args NONE\nstop_proc_args NONE\nallocation_rule 1\n"
                  "control_slaves TRUE\njob_is_first_task FALSE\nurgency_slots min\n"
                  "accounting_summary FALSE\nqsort_args NONE\n",
            "hostgroup": f"group_name @allhosts\nhostlist {' '.join(self.nodes)}\n",
            "queue": ("qname all.q\nhostlist @allhosts\nseq_no 0\nload_thresholds NONE\n"
                      "suspend_thresholds NONE\nnsuspend 1\nsuspend_interval 00:05:00\n"
                      "priority 0\nmin_cpu_interval 00:05:00\nprocessors UNDEFINED\n"
                      "qtype BATCH INTERACTIVE\nckpt_list NONE\n"
                      f"pe_list {pe}\nrerun FALSE\nslots 1\n"
                      "tmpdir " + ",".join([f"{tmp}/default"] +
                                           [f"[{n}={tmp}/{n}]" for n in self.nodes]) + "\n"
                      "shell /bin/sh\nprolog NONE\nepilog NONE\n"
                      "shell_start_mode unix_behavior\nstarter_method NONE\n"
                      "suspend_method NONE\nresume_method NONE\nterminate_method NONE\n"
                      "notify 00:00:60\nowner_list NONE\nuser_lists NONE\n"
                      "xuser_lists NONE\nsubordinate_list NONE\ncomplex_values NONE\n"
                      "projects NONE\nxprojects NONE\ncalendar NONE\n"
                      "initial_state default\ns_rt INFINITY\nh_rt INFINITY\n"
                      "s_cpu INFINITY\nh_cpu INFINITY\ns_fsize INFINITY\nh_fsize INFINITY\n"
                      "s_data INFINITY\nh_data INFINITY\ns_stack INFINITY\n"
                      "h_stack INFINITY\ns_core INFINITY\nh_core INFINITY\n"
                      "s_rss INFINITY\nh_rss INFINITY\ns_vmem INFINITY\nh_vmem INFINITY\n"),
        }
        for name in self.nodes:
            os.makedirs(os.path.join(tmp, name))
        os.makedirs(os.path.join(tmp, "default"))
        for key, text in files.items():
            path = os.path.join(d, f"{key}.conf")
            with open(path, "w") as f:
                f.write(text)
            files[key] = path
        for argv in (["qconf", "-Msconf", files["sched"]], ["qconf", "-Ap", files["pe"]],
                     ["qconf", "-Ahgrp", files["hostgroup"]], ["qconf", "-Aq", files["queue"]],
                     ["qconf", "-as", ",".join(self.nodes)]):
            r = self.sge_run(argv)
            if r.returncode != 0:
                raise RuntimeError(f"{' '.join(argv)}: {r.stdout}{r.stderr}")
        for name in self.nodes:
            self._daemon(f"sge_execd {name}", name, ["/usr/sbin/sge_execd"],
                         env=dict(env, SGE_ND="1"), log=os.path.join(d, f"execd-{name}.out"))
        deadline = time.monotonic() + 60
        while True:
            r = self.sge_run(["qstat", "-f", "-q", "all.q"])
            up = [line for line in r.stdout.splitlines() if line.startswith("all.q@")
                  and len(line.split()) >= 5 and line.split()[3] != "-NA-"
                  and (len(line.split()) < 6 or not any(c in line.split()[5] for c in "au"))]
            if len(up) == self.n:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"SGE execds not up: {r.stdout}{r.stderr}")
            time.sleep(0.3)
        self.timings["bring_up_sge_s"] = time.monotonic() - t0

    def sge_run(self, argv, node=None, timeout=60, env=None, **kw):
        """Runs a Grid Engine client command (qsub, qstat, qconf...) on node (default node1)."""
        return self.run(node or self.nodes[0], argv, env=env or self.sge_env, timeout=timeout,
                        cwd=kw.pop("cwd", self.dir), **kw)

    def sge_wait(self, job_id, timeout=120, records=1):
        """Waits until the job left qstat; returns the highest exit status of its `records`
        accounting records (qacct), or None."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            r = self.sge_run(["qstat", "-j", str(job_id)])
            if r.returncode != 0:
                break
            time.sleep(0.2)
        else:
            self.sge_run(["qdel", "-f", str(job_id)])
            return None
        # With control_slaves, qacct has one record per host (the master's and one per
        # `qrsh -inherit`), written in no fixed order: wait for all, report the worst.
        statuses = []
        for _ in range(100):
            r = self.sge_run(["qacct", "-j", str(job_id)])
            statuses = [int(x) for x in re.findall(r"(?m)^exit_status\s+(\d+)", r.stdout)]
            if len(statuses) >= records:
                break
            time.sleep(0.1)
        return max(statuses) if statuses else None

    def slurm_wait(self, job_id, timeout=120):
        """Polls `scontrol show job` until the job ends; returns (state, exit code text)."""
        deadline = time.monotonic() + timeout
        while True:
            r = _sh(["scontrol", "show", "job", "-o", str(job_id)], check=False,
                    env=self.slurm_env)
            fields = dict(kv.split("=", 1) for kv in r.stdout.split() if "=" in kv)
            state = fields.get("JobState", "")
            if state and state not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING"):
                return state, fields.get("ExitCode", "")
            if time.monotonic() > deadline:
                _sh(["scancel", str(job_id)], check=False, env=self.slurm_env)
                return "TIMEOUT(test)", fields.get("ExitCode", "")
            time.sleep(0.1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="bring a cluster up and keep it until Ctrl-C")
    up.add_argument("-n", type=int, default=2)
    up.add_argument("--ssh", action="store_true")
    up.add_argument("--slurm", action="store_true")
    up.add_argument("--sge", action="store_true")
    clean = sub.add_parser("clean", help="remove what a crashed run left")
    for p in (up, clean):
        p.add_argument("--prefix", default=os.environ.get("DDPCLUSTER_PREFIX", "ddpc"))
    args = ap.parse_args()
    if args.cmd == "clean":
        Cluster.clean_stale(args.prefix)
        return 0
    try:
        c = Cluster(args.n, prefix=args.prefix).start()
        if args.ssh:
            c.start_sshd()
        if args.slurm:
            c.start_slurm()
        if args.sge:
            c.start_sge()
    except SkipTest as e:
        print(f"cluster: cannot run here: {e}", file=sys.stderr)
        return 77
    print(json.dumps({"dir": c.dir, "nodes": c.addrs, "hostfile": c.hostfile,
                      "ssh_config": c.ssh_config, "holders": {k: p.pid for k, p in c.holders.items()},
                      "slurm_conf": (c.slurm_env or {}).get("SLURM_CONF"),
                      "sge_root": getattr(c, "sge_env", {}).get("SGE_ROOT"),
                      "timings": c.timings}, indent=1), flush=True)
    print("run on a node: nsenter -t HOLDER_PID --net --uts --mount --wd=$PWD -- CMD",
          file=sys.stderr)
    try:
        signal.pause()
    finally:
        c.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
