"""Process helpers: run a tool, read /proc, kill and reap."""

import os
import signal
import subprocess
import time


def sh(args, check=True, **kw):
    """Runs a tool, output captured as text (raises on failure unless check=False)."""
    return subprocess.run(args, check=check, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, **kw)


def ns_inode(pid, kind):
    """The namespace of kind (net, uts, mnt...) that pid is in, as "net:[INODE]"; None when
    pid is gone."""
    try:
        return os.readlink(f"/proc/{pid}/ns/{kind}")
    except OSError:
        return None


def all_pids():
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            yield int(entry)


def read_environ(pid):
    """pid's environment as a list of b"NAME=VALUE" ([] when unreadable)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return []


def cmdline(pid):
    """pid's command line, arguments joined by spaces ("" when unreadable)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def parent_pid(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def is_zombie(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def processes_with_marker(marker):
    """(pid, cmdline) of every process whose environment or command line contains marker."""
    mark = marker.encode()
    found = []
    me = os.getpid()
    for pid in all_pids():
        if pid == me:
            continue
        cmd = cmdline(pid)
        if marker in cmd or any(mark in e for e in read_environ(pid)):
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
            if os.path.exists(f"/proc/{pid}") and not is_zombie(pid):
                nxt.append(pid)
        left = nxt
        if left:
            time.sleep(0.02)
    return left
