"""sshd on every node: root login with a generated key, and an ssh_config to reach them.

start() and ssh() take the cluster first: Cluster uses them as its methods start_sshd and
ssh."""

import os
import shutil
import socket
import subprocess
import time

from .namespaces import SkipTest
from .procs import sh


def start(cluster):
    """sshd on every node (port 22 of its address, root login with a generated key).
    Writes ssh_config (use `ssh -F cluster.ssh_config nodeK`); sets cluster.ssh_config and
    cluster.ssh_key."""
    t0 = time.monotonic()
    sshd = shutil.which("sshd") or "/usr/sbin/sshd"
    if not os.path.exists(sshd) or not shutil.which("ssh"):
        raise SkipTest("sshd or ssh not found (Debian: openssh-server, openssh-client)")
    d = os.path.join(cluster.dir, "ssh")
    os.makedirs(d, mode=0o700)
    cluster.ssh_key = os.path.join(d, "id_ed25519")
    sh(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", cluster.ssh_key])
    host_key = os.path.join(d, "host_ed25519")
    sh(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", host_key])
    shutil.copy(cluster.ssh_key + ".pub", os.path.join(d, "authorized_keys"))
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # privilege separation dir
    cluster.ssh_config = os.path.join(d, "ssh_config")
    with open(cluster.ssh_config, "w") as f:
        for name in cluster.nodes:
            f.write(f"Host {name}\n  HostName {cluster.addrs[name]}\n")
        f.write(f"Host *\n  User root\n  IdentityFile {cluster.ssh_key}\n"
                "  IdentitiesOnly yes\n  StrictHostKeyChecking no\n"
                "  UserKnownHostsFile /dev/null\n  BatchMode yes\n  LogLevel ERROR\n"
                "  ConnectTimeout 10\n")
    for name in cluster.nodes:
        cfg = os.path.join(d, f"sshd_config.{name}")
        with open(cfg, "w") as f:
            f.write(f"ListenAddress {cluster.addrs[name]}\nPort 22\nHostKey {host_key}\n"
                    f"AuthorizedKeysFile {d}/authorized_keys\nPermitRootLogin yes\n"
                    "PasswordAuthentication no\nKbdInteractiveAuthentication no\n"
                    "UsePAM no\nStrictModes no\nPrintMotd no\nUseDNS no\n"
                    f"PidFile {d}/sshd.{name}.pid\nMaxStartups 100\nMaxSessions 100\n"
                    "AcceptEnv DDP* OMPI_* MASTER_*\n"
                    # bash sources ~/.bashrc under sshd only as a top-level shell: the
                    # nodes must not wait on the host user's shell setup (a slow
                    # ~/.bashrc made every ssh session here take a minute)
                    "SetEnv SHLVL=1\n")
        cluster.start_daemon(f"sshd {name}", name, [sshd, "-D", "-e", "-f", cfg],
                             log=os.path.join(d, f"sshd.{name}.log"))
    _wait_until_ready(cluster)
    cluster.timings["bring_up_sshd_s"] = time.monotonic() - t0


def _wait_until_ready(cluster):
    deadline = time.monotonic() + 10
    for name in cluster.nodes:  # every sshd listens (the root namespace reaches the bridge)
        while True:
            try:
                socket.create_connection((cluster.addrs[name], 22), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.02)
    deadline = time.monotonic() + 10
    pending = list(cluster.nodes)
    while pending:  # and accepts the key (all nodes checked at once)
        checks = {name: subprocess.Popen(["ssh", "-F", cluster.ssh_config, name, "hostname"],
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


def ssh(cluster, node, remote_command, from_node=None, timeout=None, **kw):
    """Runs remote_command (a shell string) on node over ssh, from from_node (default:
    the root namespace)."""
    argv = ["ssh", "-F", cluster.ssh_config, node, remote_command]
    kw.setdefault("stdout", subprocess.PIPE)
    kw.setdefault("stderr", subprocess.PIPE)
    if from_node:
        return cluster.run(from_node, argv, timeout=timeout, **kw)
    return subprocess.run(argv, timeout=timeout, text=True, **kw)
