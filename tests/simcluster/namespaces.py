"""The simulated nodes: namespaces, a bridge, running commands on a node, teardown.

Each node is a set of namespaces held open by one "holder" process:
  - a network namespace with one veth (eth0) on a bridge in the root namespace, its own
    address on a private /24, loopback up, and no default route (nothing leaves the machine);
  - a UTS namespace with its own host name (node1, node2, ...);
  - a mount namespace (private propagation) where /etc/hosts is bind-mounted to a file
    that maps every node's name to its namespace address.
Commands run "on" a node with nsenter into those three namespaces (Nodes.run).

Everything lives in one per-run folder; teardown kills every process in the nodes'
network namespaces and every daemon by PID, deletes the bridge and the folder. It runs from
`with`, atexit and SIGTERM/SIGINT/SIGHUP. A state file under /run records what a run
created so the next run removes it after a crash (Nodes.clean_stale).
"""

import atexit
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from .procs import all_pids, kill_and_wait, ns_inode, processes_with_marker, read_environ, sh

STATE_DIR = "/run/ddpcluster"
# Set in every holder's environment ("PREFIX:NODE"): how a later run finds a crashed one's.
ENV_MARK = "DDPCLUSTER_HOLDER"


class SkipTest(Exception):
    """The machine cannot host the cluster (not root, no namespaces, missing tools)."""


def skip_exit_code(reason):
    """What a test that cannot run exits with: 77 (ctest's SKIP_RETURN_CODE), reported as a
    skip; under CI=true a failure, since there a test that cannot run must not pass."""
    if os.environ.get("CI") == "true":
        print(f"FAIL: cannot run, and CI=true: {reason}")
        return 1
    print(f"SKIP: {reason}")
    return 77


def _delete_links(prefix):
    """Deletes the bridge and the root ends of the veth pairs. The kernel frees a dead
    namespace (and so the veth pairs) asynchronously, seconds later under load: a next
    run must not find them, so they are deleted explicitly."""
    names = [n for n in os.listdir("/sys/class/net")
             if n == f"{prefix}br" or (n.startswith(f"{prefix}v") and n[len(prefix) + 1:].isdigit())]
    for name in names:
        sh(["ip", "link", "del", name], check=False)
    return names


class Nodes:
    """N simulated nodes. Attributes after start(): nodes (names), addrs (name -> address),
    dir (run folder), hosts_file (/etc/hosts of every node), hostfile (node names, one a
    line), timings (seconds each bring-up took)."""

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
        self.net_inodes = set()
        self.dir = None
        self.hosts_file = None
        self.hostfile = None
        self._lock = None
        self._stopped = True
        self.timings = {}

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
        sh(["ip", "link", "add", self.bridge, "type", "bridge"])
        sh(["ip", "addr", "add", f"{self.bridge_addr}/24", "dev", self.bridge])
        sh(["ip", "link", "set", self.bridge, "up"])
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
            sh(["ip", "link", "add", host_if, "type", "veth", "peer", "name", peer])
            sh(["ip", "link", "set", host_if, "master", self.bridge, "up"])
            sh(["ip", "link", "set", peer, "netns", str(p.pid)])
            self._on(name, f"ip link set {peer} name eth0 && "
                           f"ip addr add {self.addrs[name]}/24 dev eth0 && ip link set eth0 up")
        self.net_inodes = {ns_inode(p.pid, "net") for p in self.holders.values()}

    def _on(self, node, script):
        return sh(self.command(node, ["sh", "-c", script]))

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
        inodes = {ns_inode(p.pid, "net") for p in self.holders.values()} - {None}
        inodes |= self.net_inodes - {None}
        for _ in range(5):
            victims = [pid for pid in all_pids() if pid != os.getpid()
                       and ns_inode(pid, "net") in inodes]
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
        holders = [pid for pid in all_pids()
                   if any(e.startswith(f"{ENV_MARK}={prefix}:".encode())
                          for e in read_environ(pid))]
        inodes = {ns_inode(pid, "net") for pid in holders} - {None}
        own = ns_inode(os.getpid(), "net")
        inodes.discard(own)
        victims = [pid for pid in all_pids() if ns_inode(pid, "net") in inodes]
        victims += [pid for pid in state.get("daemons", []) if os.path.exists(f"/proc/{pid}")
                    and ns_inode(pid, "net") is not None]
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

    def start_daemon(self, what, node, argv, env=None, log=None):
        """Starts a service's daemon on node (None: the root namespace), output to log, in
        its own session; recorded (and in the state file) so that teardown stops it."""
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
