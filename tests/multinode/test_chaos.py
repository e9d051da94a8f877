#!/usr/bin/python3
"""Chaos soak (issue 15): real 2-node DDP training in head mode over ssh, disturbed at a
random moment by one fault per trial; every trial must end clean or bit-identical.

  PYTHONPATH=tests tests/multinode/test_chaos.py --ddprun BIN --ddp-train BIN \
      --config configs/toy.json --source DIR [--trials N] [--seed S] [--fault KIND,...]

One ddprun (the head) on node1 starts an agent on node2 over ssh (--hostfile, --launcher
ssh) and trains the config (checkpoints every few steps into a folder both nodes see,
--max-restarts 2, diagnostics.final_params_file). A reference run without faults comes
first. Then each trial starts the same job and, once rank 0 has printed a random step (a
seeded choice, plus a random delay of up to 0.3 s), injects one fault:

  kill_worker        SIGKILL one worker           -> restart, resume, finish bit-identical
  stop_worker_cont   SIGSTOP one worker 0.5-3 s,  -> finish bit-identical
                     then SIGCONT
  stop_worker_hold   SIGSTOP one worker for good  -> the peers' collective timeout names it,
                                                     restart, finish bit-identical
  kill_agent         SIGKILL node2's agent        -> the head names node2, restart, finish
  stop_agent         SIGSTOP node2's agent 1-3 s, -> finish bit-identical
                     then SIGCONT
  stop_agent_hold    SIGSTOP node2's agent for    -> --exit-timeout 5 ends the round naming
                     good                            the node; restart, finish bit-identical
  kill_head          SIGKILL the head             -> every node ends: nothing left anywhere
  stop_head          SIGSTOP the head 1-3 s,      -> finish bit-identical
                     then SIGCONT
  console_stall      the head's stdout (a 4 KiB   -> training goes on: finish bit-identical;
                     pipe) not read for 1-3 s, or    every line comes late, or the head
                     not until the head exits        exits within 10 s of the training's end
  disk_full          --log-dir on node1 is a       -> logs are lost, training is not:
                     256 KiB tmpfs, filled up          finish bit-identical
  port_busy_start    --master-port P, P listened  -> exit 125 before anything starts, the
                     on by another process            error names the port and its holder
  port_busy_restart  --master-port P; a worker is -> no restart round starts: the head
                     killed, P taken before the        names the port and its holder, and fails
                     restart round
  port_busy_restart_free  the same without a     -> the restart round picks another port
                     fixed port                        and finishes bit-identical

After every trial, on every node: no process carrying the trial's marker (its run id and
an environment variable), no new /dev/shm entry, no ddprun temporary folder
($TMPDIR/ddprun-RUNID-*, ddprun-logs-RUNID). Every wait is bounded; problems are `FAIL:`
lines; a known defect (KNOWN_DEFECTS) is a KNOWN line unless --strict. One line per trial
(fault, moment, outcome, seconds), a SUMMARY line with the counts per outcome and one
RESULT JSON line. The default (one trial of each kind, shuffled) takes about a minute on 2
cores; a long soak: --trials 200 (about 15 minutes). --fault KIND and --seed S repeat one.
Exit 77: skipped (not root, no namespaces, no sshd); under CI=true that is a failure.
"""

import argparse
import fcntl
import glob
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
import traceback
import uuid

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from simcluster import Cluster, SkipTest, kill_and_wait, skip_exit_code  # noqa: E402 (tests/ on PYTHONPATH)
from simcluster.procs import ns_inode, parent_pid, read_environ  # noqa: E402

FAULTS = ("kill_worker", "stop_worker_cont", "stop_worker_hold", "kill_agent", "stop_agent",
          "stop_agent_hold", "kill_head", "stop_head", "console_stall", "disk_full", "port_busy_start", "port_busy_restart",
          "port_busy_restart_free")

# Expectations ddprun does not meet yet, by id: a trial that misses one prints a KNOWN line
# instead of a FAIL line, unless --strict. Every other expectation of the trial still fails.
KNOWN_DEFECTS = {}

EPOCHS = 12                # 64 steps an epoch with 2 ranks: 768 steps, about 3 s here
CHECKPOINT_EVERY = 20      # steps
TIMEOUT_S = 5              # runtime.timeout_s: rendezvous and collectives
UNRESPONSIVE_WAIT_S = 2    # runtime.unresponsive_wait_s
SHUTDOWN_TIMEOUT_S = 3     # ddprun --shutdown-timeout
MAX_RESTARTS = 2
EXIT_TIMEOUT_S = 5         # --exit-timeout for stop_agent_hold
TRIAL_TIMEOUT_S = 90       # the whole trial, restarts included
CONSOLE_EXIT_S = 10       # a stalled console may delay the exit after training by this
GONE_TIMEOUT_S = 10        # from the head's exit until nothing of the trial is left

STEP_LINE = re.compile(r"epoch (\d+)/\d+\s+step (\d+)/(\d+)\s+loss")
ROOT_CAUSE = re.compile(r"ddprun: error: (rank (\d+) \(local rank \d+ on (\S+), pid \d+\)|"
                        r"node (\d+) \((\S+), pid \d+\)) failed first: (.*)$")

# Listens on a port on its node (retrying until the port is free, SO_REUSEADDR as the
# store does) and holds it until its stdin closes.
PORT_HOLDER = r"""
import socket, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
deadline = time.monotonic() + float(sys.argv[2])
while True:
    try:
        s.bind(("", int(sys.argv[1])))
        break
    except OSError:
        if time.monotonic() > deadline:
            print("never bound", flush=True)
            sys.exit(1)
        time.sleep(0.001)
s.listen(16)
print("bound", flush=True)
sys.stdin.read()
"""


class Fail(Exception):
    """A trial's expectation not met (printed as a FAIL: line)."""


class Head:
    """The head ddprun on node1, its stdout and stderr one pipe read line by line by a
    thread that can stop reading (a stalled console)."""

    def __init__(self, proc, small_pipe=False):
        self.proc = proc
        if small_pipe:
            fcntl.fcntl(proc.stdout.fileno(), fcntl.F_SETPIPE_SZ, 4096)
        self.lines = []            # (monotonic time, text)
        self.cond = threading.Condition()
        self.reading = threading.Event()
        self.reading.set()
        self.eof = False
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        for raw in iter(self.proc.stdout.readline, b""):
            text = raw.decode(errors="replace").rstrip("\r\n")
            with self.cond:
                self.lines.append((time.monotonic(), text))
                self.cond.notify_all()
            self.reading.wait()
        with self.cond:
            self.eof = True
            self.cond.notify_all()

    def wait_line(self, predicate, timeout):
        """The first value predicate(line) that is not None, waiting up to timeout; None at
        the end of the output or at the timeout."""
        deadline = time.monotonic() + timeout
        seen = 0
        with self.cond:
            while True:
                for _, text in self.lines[seen:]:
                    value = predicate(text)
                    if value is not None:
                        return value
                seen = len(self.lines)
                left = deadline - time.monotonic()
                if self.eof or left <= 0:
                    return None
                self.cond.wait(min(left, 0.5))

    def wait_exit(self, timeout):
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def so_far(self):
        with self.cond:
            return "\n".join(t for _, t in self.lines)

    def text(self, timeout=10):
        """All output, once the pipe is closed (bounded: a leftover writer cannot hang it)."""
        self.reading.set()
        self.thread.join(timeout)
        with self.cond:
            return "\n".join(t for _, t in self.lines)


class Chaos:
    def __init__(self, a, cluster):
        self.a, self.c = a, cluster
        self.dir = os.path.join(cluster.dir, "job")  # the nodes share /tmp: all see it
        os.makedirs(self.dir, exist_ok=True)
        with open(a.config) as f:
            self.base = json.load(f)
        self.base["train"]["epochs"] = EPOCHS
        self.base.setdefault("runtime", {}).update(
            timeout_s=TIMEOUT_S, unresponsive_wait_s=UNRESPONSIVE_WAIT_S, threads=1)
        self.steps_per_epoch = None
        self.total_steps = None
        self.reference = None      # parsed final parameters of the undisturbed run
        self.reference_bytes = None
        self.reference_s = None
        self.port = 29400 + os.getpid() % 500
        self.net_nodes = {ns_inode(p.pid, "net"): name for name, p in cluster.holders.items()}

    # ----------------------------------------------------------------- set-up
    def write_config(self, tdir, log_every):
        cfg = json.loads(json.dumps(self.base))
        cfg["checkpoint"] = {"dir": os.path.join(tdir, "ckpt"),
                             "interval_steps": CHECKPOINT_EVERY}
        cfg.setdefault("diagnostics", {})["final_params_file"] = os.path.join(tdir, "params.json")
        cfg.setdefault("progress", {})["log_every"] = log_every
        path = os.path.join(tdir, "config.json")
        with open(path, "w") as f:
            json.dump(cfg, f)
        return path

    def env(self, marker):
        return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "DDPC_MARK": marker,
                "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}

    def launch(self, marker, tdir, port=None, log_dir=None, log_every=10, small_pipe=False,
               exit_timeout=None):
        config = self.write_config(tdir, log_every)
        argv = [self.a.ddprun, "--hostfile", self.c.hostfile, "--launcher", "ssh",
                "--ssh-config", self.c.ssh_config, "--run-id", marker, "--tag-output",
                "--nproc-per-node", str(self.a.nproc), "--shutdown-timeout",
                str(SHUTDOWN_TIMEOUT_S), "--max-restarts", str(MAX_RESTARTS),
                "--env", "DDPC_MARK"]
        if port:
            argv += ["--master-port", str(port)]
        if log_dir:
            argv += ["--log-dir", log_dir]
        if exit_timeout:
            argv += ["--exit-timeout", str(exit_timeout)]
        argv += ["--", self.a.ddp_train, "--config", config]
        proc = self.c.popen(self.c.nodes[0], argv, env=self.env(marker), cwd=self.a.source,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
        return Head(proc, small_pipe)

    # ----------------------------------------------------------------- processes
    def node_of(self, pid):
        return self.net_nodes.get(ns_inode(pid, "net"), "?")

    def workers(self, marker):
        """[(pid, rank, node)] of the trial's ddp-train processes."""
        found = []
        for pid, cmd in self.c.leftovers(marker):
            if cmd.split(" ", 1)[0] != self.a.ddp_train:
                continue
            rank = [e[5:].decode() for e in read_environ(pid) if e.startswith(b"RANK=")]
            if rank:
                found.append((pid, int(rank[0]), self.node_of(pid)))
        return sorted(found, key=lambda w: w[1])

    def agents(self, marker):
        """Pids of the remote agents themselves (not the ssh clients, not their guardians)."""
        named = {pid for pid, cmd in self.c.leftovers(marker)
                 if cmd.startswith(self.a.ddprun) and " --agent" in cmd}
        return sorted(pid for pid in named if parent_pid(pid) not in named)

    def wait_workers(self, marker, head, timeout=30):
        """The workers once all run; None when the job ended first (a moment late in a
        fast job, read late from a loaded machine: the workers were gone already)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.workers(marker)
            if len(found) == self.c.n * self.a.nproc:
                return found
            if head.proc.poll() is not None:
                return None
            time.sleep(0.05)
        raise Fail(f"the workers never all ran: {self.workers(marker)}")

    def port_holder(self, port, within_s):
        """A process on node1 that listens on port (retrying for within_s); returns it."""
        return self.c.popen(self.c.nodes[0], ["/usr/bin/python3", "-c", PORT_HOLDER, str(port),
                                              str(within_s)],
                            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)

    # ----------------------------------------------------------------- runs
    def run_reference(self):
        marker = f"ddpc{uuid.uuid4().hex[:12]}"
        tdir = os.path.join(self.dir, "reference")
        os.makedirs(tdir)
        t0 = time.monotonic()
        head = self.launch(marker, tdir)
        rc = head.wait_exit(TRIAL_TIMEOUT_S)
        if rc is None:
            head.proc.kill()
        out = head.text()
        self.reference_s = time.monotonic() - t0
        m = re.search(r"ddp-train: done after (\d+) steps", out)
        if rc != 0 or not m:
            print(out[-4000:])
            raise Fail(f"the reference run (no fault) exited {rc}")
        self.total_steps = int(m.group(1))
        self.steps_per_epoch = self.total_steps // EPOCHS
        with open(os.path.join(tdir, "params.json"), "rb") as f:
            self.reference_bytes = f.read()
        self.reference = json.loads(self.reference_bytes)
        self.check_clean(marker, set(os.listdir("/dev/shm")), "reference")
        print(f"reference: {self.total_steps} steps, {self.reference_s:.1f} s, exit 0",
              flush=True)

    def step_of(self, text):
        m = STEP_LINE.search(text)
        if not m:
            return None
        return (int(m.group(1)) - 1) * int(m.group(3)) + int(m.group(2))

    def wait_moment(self, head, target, delay):
        """Waits until rank 0 printed a step >= target, then delay seconds. False when the
        job ended first."""
        step = head.wait_line(lambda t: (lambda s: s if s is not None and s >= target else None)(
            self.step_of(t)), TRIAL_TIMEOUT_S)
        if step is None:
            return False
        time.sleep(delay)  # a random extra delay after the observed event
        return head.proc.poll() is None

    def trial(self, index, kind, rng):
        marker = f"ddpc{uuid.uuid4().hex[:12]}"
        tdir = os.path.join(self.dir, f"trial-{index}")
        os.makedirs(tdir)
        shm_before = set(os.listdir("/dev/shm"))
        # The moment: a step between 10 % and 70 % of the run, plus up to 0.3 s.
        target = rng.randint(self.total_steps // 10, self.total_steps * 7 // 10)
        delay = round(rng.uniform(0.0, 0.3), 2)
        info = {"fault": kind, "moment": f"step>={target}+{delay}s", "marker": marker}
        t0 = time.monotonic()
        cleanup = []
        head = None
        try:
            head = getattr(self, f"fault_{kind}")(marker, tdir, target, delay, rng, info,
                                                  cleanup)
            if head is not None and "rc" not in info:
                rc = head.wait_exit(TRIAL_TIMEOUT_S)
                if rc is None:
                    raise Fail(f"the head had not ended after {TRIAL_TIMEOUT_S} s (hang)")
                info["rc"] = rc
        except Fail as e:
            info.setdefault("problems", []).append(str(e))
        finally:
            for undo in reversed(cleanup):
                undo()
            if head is not None and head.proc.poll() is None:
                head.proc.kill()
                head.proc.wait()
        out = head.text() if head else ""
        info["seconds"] = round(time.monotonic() - t0, 1)
        info["output"] = out
        if "outcome" not in info and "rc" in info:
            self.judge(info, tdir, out)
        info.setdefault("outcome", "failed")
        info.setdefault("problems", []).extend(self.check_clean(marker, shm_before, None))
        return info

    # ----------------------------------------------------------------- verdicts
    def judge(self, info, tdir, out):
        """outcome: finished (exit 0, parameters bit-identical) or failed (root cause
        checked by the fault's own expectation)."""
        rc = info["rc"]
        info["restarts"] = len(re.findall(r"ddprun: restarting all workers", out))
        if rc == 0:
            path = os.path.join(tdir, "params.json")
            try:
                with open(path, "rb") as f:
                    got_bytes = f.read()
                got = json.loads(got_bytes)
            except (OSError, ValueError) as e:
                info["outcome"] = "failed"
                info.setdefault("problems", []).append(f"exit 0 but no final parameters: {e}")
                return
            if got != self.reference:
                diff = max((abs(x - y) for name, p in self.reference["params"].items()
                            for x, y in zip(p["values"], got["params"].get(name, {})
                                            .get("values", []))), default=None)
                info["outcome"] = "failed"
                info.setdefault("problems", []).append(f"exit 0 but the final parameters differ from the "
                                    f"reference's (step {got.get('step')} vs "
                                    f"{self.reference['step']}, max abs diff {diff})")
                return
            info["outcome"] = "finished"
            info["byte_identical"] = got_bytes == self.reference_bytes
        else:
            info["outcome"] = "failed"
            causes = [m.groups() for m in map(ROOT_CAUSE.search, out.splitlines()) if m]
            info["root_causes"] = [(g[0], g[5]) for g in causes]

    def expect(self, info, outcomes, why):
        if info.get("outcome") not in outcomes:
            info.setdefault("problems", []).append(
                f"outcome {info.get('outcome')} (exit {info.get('rc')}), want "
                f"{' or '.join(outcomes)}: {why}")
            return False
        return True

    @staticmethod
    def known(info, defect, text):
        """A problem that is the known defect `defect` (KNOWN_DEFECTS)."""
        info.setdefault("known", []).append((defect, text))

    def check_clean(self, marker, shm_before, what):
        """Nothing of the trial left on any node: processes, /dev/shm entries, temporary
        folders. Returns the problems (and, for `what`, raises)."""
        problems = []
        deadline = time.monotonic() + GONE_TIMEOUT_S
        left = self.c.leftovers(marker)
        while left and time.monotonic() < deadline:
            time.sleep(0.05)
            left = self.c.leftovers(marker)
        if left:
            problems.append(f"processes left {GONE_TIMEOUT_S} s after the head's end: "
                            + "; ".join(f"{pid} on {self.node_of(pid)}: {cmd[:120]}"
                                        for pid, cmd in left))
            kill_and_wait([pid for pid, _ in left])
        # Python's multiprocessing semaphores (sem.mp-*) are other tests' torchrun, running
        # beside this one under ctest -j: nothing a trial starts is Python, and ddprun and
        # ddp-train keep their shared memory anonymous (memfd), never in /dev/shm.
        shm = {entry for entry in set(os.listdir("/dev/shm")) - shm_before
               if not entry.startswith("sem.mp-")}
        if shm:
            problems.append(f"new /dev/shm entries: {sorted(shm)}")
        tmp = os.environ.get("TMPDIR", "/tmp")
        dirs = glob.glob(f"{tmp}/ddprun-{marker}-*") + glob.glob(f"{tmp}/ddprun-logs-{marker}")
        if dirs:
            problems.append(f"ddprun temporary folders left: {dirs}")
        if what and problems:
            raise Fail(f"{what}: " + "; ".join(problems))
        return problems

    def root_cause_named(self, out, rank=None, host=None, cause=None):
        """A root-cause report (a worker's, relayed from its agent, or the head's own)
        naming rank (None: any), host, and a cause matching the regular expression `cause`
        in its "failed first" line or the "its error file says" line after it."""
        lines = out.splitlines()
        for i, line in enumerate(lines):
            m = ROOT_CAUSE.search(line)
            if not m or m.group(2) is None:
                continue
            if rank is not None and int(m.group(2)) != rank:
                continue
            if host is not None and m.group(3) != host:
                continue
            text = m.group(6)
            if i + 1 < len(lines) and "ddprun: its error file says: " in lines[i + 1]:
                text += " " + lines[i + 1].split("ddprun: its error file says: ", 1)[1]
            if cause is None or re.search(cause, text):
                return line.strip()
        return None

    # ----------------------------------------------------------------- faults
    def started(self, marker, tdir, target, delay, info, **launch):
        """Launches the job and waits for the moment; None when the job ended first."""
        head = self.launch(marker, tdir, **launch)
        workers = self.wait_workers(marker, head) if self.wait_moment(head, target, delay) else None
        if workers is None:
            info["outcome"] = "missed"
            info["rc"] = head.wait_exit(TRIAL_TIMEOUT_S)
        return head, workers

    def fault_kill_worker(self, marker, tdir, target, delay, rng, info, cleanup):
        head, workers = self.started(marker, tdir, target, delay, info)
        if workers is None:
            return head
        pid, rank, node = rng.choice(workers)
        info["what"] = f"rank {rank} on {node}"
        os.kill(pid, signal.SIGKILL)
        info["rc"] = head.wait_exit(TRIAL_TIMEOUT_S)
        self.after(head, info, tdir)
        if self.expect(info, ["finished"], "a restart resumes from the last checkpoint"):
            if not info["restarts"]:
                info["problems"].append("finished without a restart round")
            if not self.root_cause_named(info["output_now"], rank, node, r"SIGKILL"):
                info["problems"].append(f"no root-cause line names rank {rank} on {node} "
                                        "killed by SIGKILL")
        return head

    def after(self, head, info, tdir):
        if info["rc"] is None:
            raise Fail(f"the head had not ended after {TRIAL_TIMEOUT_S} s (hang)")
        info["output_now"] = out = head.text()
        self.judge(info, tdir, out)
        info.setdefault("problems", [])

    def pause(self, pid, seconds, cleanup):
        """SIGSTOP `pid` for `seconds` (the fault's own duration), then SIGCONT."""
        os.kill(pid, signal.SIGSTOP)
        cleanup.append(lambda: self.cont(pid))
        time.sleep(seconds)
        os.kill(pid, signal.SIGCONT)

    def fault_stop_worker_cont(self, marker, tdir, target, delay, rng, info, cleanup):
        head, workers = self.started(marker, tdir, target, delay, info)
        if workers is None:
            return head
        pid, rank, node = rng.choice(workers)
        pause = round(rng.uniform(0.5, 3.0), 1)
        info["what"] = f"rank {rank} on {node} for {pause} s"
        self.pause(pid, pause, cleanup)
        info["rc"] = head.wait_exit(TRIAL_TIMEOUT_S)
        self.after(head, info, tdir)
        self.expect(info, ["finished"], f"a {pause} s pause is under runtime.timeout_s "
                                        f"({TIMEOUT_S} s)")
        return head

    @staticmethod
    def cont(pid):
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass

    def fault_stop_worker_hold(self, marker, tdir, target, delay, rng, info, cleanup):
        head, workers = self.started(marker, tdir, target, delay, info)
        if workers is None:
            return head
        pid, rank, node = rng.choice(workers)
        info["what"] = f"rank {rank} on {node}"
        os.kill(pid, signal.SIGSTOP)
        cleanup.append(lambda: self.cont(pid))
        info["rc"] = head.wait_exit(TRIAL_TIMEOUT_S)
        self.after(head, info, tdir)
        out = info["output_now"]
        if self.expect(info, ["finished"], "the collective timeout fails the round, the "
                                           "restart finishes"):
            if not info["restarts"]:
                info["problems"].append("finished without a restart round")
            if not re.search(rf"rank {rank} did not respond|rank\(s\) [\d, ]*\b{rank}\b", out):
                info["problems"].append(f"no error names the stopped rank {rank} as "
                                        "unresponsive")
        return head

    def fault_kill_agent(self, marker, tdir, target, delay, rng, info, cleanup):
        head, workers = self.started(marker, tdir, target, delay, info)
        if workers is None:
            return head
        pid, node = self.remote_agent(marker)
        info["what"] = f"agent pid {pid} on {node}"
        os.kill(pid, signal.SIGKILL)
        info["rc"] = head.wait_exit(TRIAL_TIMEOUT_S)
        self.after(head, info, tdir)
        out = info["output_now"]
        if self.expect(info, ["finished"], "a lost node is a failure a restart can fix"):
            if not info["restarts"]:
                info["problems"].append("finished without a restart round")
            if not re.search(rf"ddprun: error: node \d+ \({node}, pid \d+\) failed first", out):
                info["problems"].append(f"no root-cause line names the lost node {node}")
        return head

    def remote_agent(self, marker):
        agents = self.agents(marker)
        if not agents:
            raise Fail("no remote agent found")
        return agents[0], self.node_of(agents[0])

    def fault_stop_agent(self, marker, tdir, target, delay, rng, info, cleanup):
        head, workers = self.started(marker, tdir, target, delay, info)
        if workers is None:
            return head
        pid, node = self.remote_agent(marker)
        pause = round(rng.uniform(1.0, 3.0), 1)
        info["what"] = f"agent pid {pid} on {node} for {pause} s"
        self.pause(pid, pause, cleanup)
        info["rc"] = head.wait_exit(TRIAL_TIMEOUT_S)
        self.after(head, info, tdir)
        self.expect(info, ["finished"], "an agent paused a few seconds changes nothing")
        return head

    def fault_stop_agent_hold(self, marker, tdir, target, delay, rng, info, cleanup):
        # The node's workers go on and end; their agent never reports. Without
        # --exit-timeout the head waits for it for good (documented); with it, the head
        # must end the round, say which node, and leave nothing behind on that node.
        head, workers = self.started(marker, tdir, target, delay, info,
                                     exit_timeout=EXIT_TIMEOUT_S)
        if workers is None:
            return head
        pid, node = self.remote_agent(marker)
        info["what"] = f"agent pid {pid} on {node}, --exit-timeout {EXIT_TIMEOUT_S}"
        os.kill(pid, signal.SIGSTOP)
        cleanup.append(lambda: self.cont(pid))
        info["rc"] = head.wait_exit(TRIAL_TIMEOUT_S)
        self.after(head, info, tdir)
        out = info["output_now"]
        if self.expect(info, ["finished", "failed"], "the exit timeout ends the round"):
            if not re.search(rf"ddprun: error: .* and node \d+ was still running "
                             rf"{EXIT_TIMEOUT_S:g} s later", out):
                info["problems"].append(f"no report names the node whose agent was stopped "
                                        f"({node}) after --exit-timeout")
        return head

    def fault_kill_head(self, marker, tdir, target, delay, rng, info, cleanup):
        head, workers = self.started(marker, tdir, target, delay, info)
        if workers is None:
            return head
        info["what"] = f"head pid {head.proc.pid}"
        os.kill(head.proc.pid, signal.SIGKILL)
        info["rc"] = head.wait_exit(TRIAL_TIMEOUT_S)
        if info["rc"] is None:
            raise Fail("the head did not die of SIGKILL")
        info["outcome"] = "head_killed"  # failed, by our hand; cleanliness checked after
        return head

    def fault_stop_head(self, marker, tdir, target, delay, rng, info, cleanup):
        head, workers = self.started(marker, tdir, target, delay, info)
        if workers is None:
            return head
        pause = round(rng.uniform(1.0, 3.0), 1)
        info["what"] = f"head pid {head.proc.pid} for {pause} s"
        self.pause(head.proc.pid, pause, cleanup)
        info["rc"] = head.wait_exit(TRIAL_TIMEOUT_S)
        self.after(head, info, tdir)
        self.expect(info, ["finished"], "a head paused a few seconds changes nothing")
        return head

    def fault_console_stall(self, marker, tdir, target, delay, rng, info, cleanup):
        # Every step printed, into a 4 KiB pipe: it is full within a fraction of a second.
        head, workers = self.started(marker, tdir, target, delay, info, log_every=1,
                                     small_pipe=True)
        if workers is None:
            return head
        pause = rng.choice([None, round(rng.uniform(1.0, 3.0), 1)])
        head.reading.clear()
        cleanup.append(head.reading.set)
        if pause is not None:
            # Read again after a while: the job goes on, the console is told what it missed.
            info["what"] = f"stdout not read for {pause} s"
            time.sleep(pause)  # the fault's own duration
            head.reading.set()
            info["rc"] = head.wait_exit(TRIAL_TIMEOUT_S)
            self.after(head, info, tdir)
            out = info["output_now"]
            if self.expect(info, ["finished"], "a console that did not read for a while never "
                                               "holds up the job"):
                if info.get("restarts"):
                    info["problems"].append("a restart round after a console stall")
                # Far less than the 4 MiB ddprun queues: every line must come, in order.
                if "ddp-train: done after" not in out:
                    info["problems"].append("the console never got the last lines "
                                            "('ddp-train: done after ...')")
                steps = [n for n in map(self.step_of, out.splitlines()) if n is not None]
                gaps = [(x, y) for x, y in zip(steps, steps[1:]) if not 0 < y - x <= 2]
                if gaps or re.search(r"ddprun: console not reading", out):
                    info["problems"].append(f"console lines lost or out of order after the "
                                            f"stall: steps {gaps[:5]}")
            return head
        info["what"] = "stdout not read until the head exits"
        params = os.path.join(tdir, "params.json")
        deadline = time.monotonic() + TRIAL_TIMEOUT_S
        while not os.path.exists(params) and head.proc.poll() is None:
            if time.monotonic() > deadline:
                raise Fail(f"training did not end within {TRIAL_TIMEOUT_S} s with the "
                           "console stalled")
            time.sleep(0.05)
        done_at = time.monotonic()
        # ddprun gives up on a console that takes nothing for 2 s at the end of a round.
        info["rc"] = head.wait_exit(CONSOLE_EXIT_S)
        if info["rc"] is None:
            raise Fail(f"the head had not exited {CONSOLE_EXIT_S} s after training ended, its "
                       "console stalled")
        info["exit_after_end_s"] = round(time.monotonic() - done_at, 1)
        head.reading.set()
        self.after(head, info, tdir)
        self.expect(info, ["finished"], "a console that does not read never holds up the job")
        return head

    def fault_disk_full(self, marker, tdir, target, delay, rng, info, cleanup):
        logs = os.path.join(tdir, "logs")
        os.makedirs(logs)
        node = self.c.nodes[0]
        r = self.c.run(node, ["mount", "-t", "tmpfs", "-o", "size=256k", f"ddpc-{marker}", logs],
                       timeout=30)
        if r.returncode != 0:
            raise Fail(f"cannot mount a tmpfs on {node}: {r.stderr.strip()}")
        cleanup.append(lambda: self.c.run(node, ["umount", "-l", logs], timeout=30))
        head, workers = self.started(marker, tdir, target, delay, info, log_dir=logs,
                                     log_every=1)
        if workers is None:
            return head
        r = self.c.run(node, ["dd", "if=/dev/zero", f"of={logs}/filler", "bs=4k"], timeout=30)
        info["what"] = f"256 KiB tmpfs --log-dir on {node}, filled: " + \
            (r.stderr.strip().splitlines() or ["?"])[0].split(": ")[-1]
        info["rc"] = head.wait_exit(TRIAL_TIMEOUT_S)
        self.after(head, info, tdir)
        if self.expect(info, ["finished"], "a full log folder costs log lines, not the training"):
            # The lines are lost; the user must be told (a log that ends early says nothing).
            if not re.search(r"(?m)ddprun: warning: cannot write \S+\.log: No space left on device",
                             info["output_now"]):
                info.setdefault("problems", []).append(
                    "no ddprun line says that writes to the full --log-dir failed")
        return head

    def fault_port_busy_start(self, marker, tdir, target, delay, rng, info, cleanup):
        port = self.port
        holder = self.port_holder(port, 5)
        cleanup.append(lambda: self.end_holder(holder))
        if holder.stdout.readline().strip() != "bound":
            raise Fail(f"could not listen on port {port} on node1")
        info["what"] = f"--master-port {port}, held by pid {holder.pid}"
        info["moment"] = "start"
        head = self.launch(marker, tdir, port=port)
        info["rc"] = head.wait_exit(TRIAL_TIMEOUT_S)
        self.after(head, info, tdir)
        out = info["output_now"]
        if self.expect(info, ["failed"], "the master port is taken"):
            if info["rc"] != 125 or not re.search(
                    rf"ddprun: error: master port {port} is already in use on this host by "
                    r"pid \d+", out):
                info["problems"].append(f"want exit 125 and 'master port {port} is already in "
                                        "use on this host by pid N'")
        return head

    def end_holder(self, holder):
        try:
            holder.stdin.close()
        except OSError:
            pass
        try:
            holder.wait(5)
        except subprocess.TimeoutExpired:
            holder.kill()
            holder.wait()

    def fault_port_busy_restart(self, marker, tdir, target, delay, rng, info, cleanup,
                                fixed=True):
        head, workers = self.started(marker, tdir, target, delay, info,
                                     port=self.port if fixed else None)
        if workers is None:
            return head
        m = re.search(r"master \S+:(\d+)", head.so_far())
        port = int(m.group(1)) if m else self.port
        pid, rank, node = rng.choice(workers)
        # The holder binds the port as soon as the store's listener is gone: before the
        # restart round's rank 0 (which needs about 0.5 s to load LibTorch).
        holder = self.port_holder(port, 20)
        cleanup.append(lambda: self.end_holder(holder))
        os.kill(pid, signal.SIGKILL)
        bound = holder.stdout.readline().strip() == "bound"
        info["what"] = (f"rank {rank} on {node} killed, port {port} "
                        f"{'taken' if bound else 'NOT taken'} for the restart")
        info["rc"] = head.wait_exit(TRIAL_TIMEOUT_S)
        self.after(head, info, tdir)
        out = info["output_now"]
        if not bound:
            raise Fail(f"the port holder never got port {port}")
        if fixed:
            # No round starts into the taken port: the head names it and its holder.
            if self.expect(info, ["failed"], f"the fixed master port {port} is taken"):
                said = re.search(rf"(?m)ddprun: error: cannot restart: master port {port} was "
                                 rf"taken on this host while round \d+ ran, by pid \d+ ", out)
                if not said:
                    info["problems"].append(f"no line names the taken port {port} and its "
                                            "holder before the restart round")
        else:
            if self.expect(info, ["finished"], "without a fixed port a restart picks another"):
                ports = re.findall(r"ddprun: run \S+: .*master \S+:(\d+), restart", out)
                if str(port) in ports:
                    info["problems"].append(f"a restart round reused the taken port {port}")
        return head

    def fault_port_busy_restart_free(self, *args):
        return self.fault_port_busy_restart(*args, fixed=False)


def summary_line(info):
    text = f"{info['fault']}"
    if info.get("what"):
        text += f" ({info['what']})"
    text += f" at {info['moment']}: {info['outcome']}, exit {info.get('rc')}"
    if info.get("restarts"):
        text += f", {info['restarts']} restart(s)"
    if info.get("outcome") == "finished":
        text += ", parameters bit-identical"
    if info.get("exit_after_end_s") is not None:
        text += f", exited {info['exit_after_end_s']} s after training ended"
    causes = info.get("root_causes")
    if info.get("outcome") == "failed" and causes:
        text += f"; root cause: {causes[-1][0]}: {causes[-1][1][:100]}"
    return text + f", {info['seconds']} s"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ddprun", required=True)
    ap.add_argument("--ddp-train", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--source", required=True, help="repository root (working directory)")
    ap.add_argument("--nproc", type=int, default=1, help="workers per node (2 nodes)")
    ap.add_argument("--trials", type=int, default=len(FAULTS),
                    help="default: one of each fault kind, in a random order")
    ap.add_argument("--seed", type=int, default=None, help="default: random (printed)")
    ap.add_argument("--fault", default="", help="only these kinds, comma-separated")
    ap.add_argument("--trial-seed", type=int, default=None,
                    help="run one trial of the first --fault kind with this trial seed")
    ap.add_argument("--strict", action="store_true",
                    help="known defects (KNOWN_DEFECTS) fail too")
    ap.add_argument("--keep", action="store_true", help="keep the run folder")
    ap.add_argument("--verbose", action="store_true", help="print every trial's output")
    a = ap.parse_args()
    for p in ("ddprun", "ddp_train", "config", "source"):
        setattr(a, p, os.path.abspath(getattr(a, p)))
    kinds = [k for k in a.fault.split(",") if k] or list(FAULTS)
    unknown = [k for k in kinds if k not in FAULTS]
    if unknown:
        ap.error(f"unknown fault kind(s) {unknown}; known: {', '.join(FAULTS)}")
    seed = a.seed if a.seed is not None else random.SystemRandom().randrange(1 << 31)
    rng = random.Random(seed)
    # Every kind equally often: shuffled rounds of all kinds. Each trial draws its choices
    # from its own seed, printed on its line: --trial-seed T --fault KIND repeats it alone.
    plan = []
    while len(plan) < a.trials:
        batch = list(kinds)
        rng.shuffle(batch)
        plan += [(kind, rng.randrange(1 << 31)) for kind in batch]
    plan = plan[:a.trials]
    if a.trial_seed is not None:
        plan = [(kind, a.trial_seed) for kind in kinds][:1]
    print(f"chaos: seed {seed}, {len(plan)} trial(s) of {', '.join(kinds)} (the same again: "
          f"--seed {seed} --trials {a.trials}" + (f" --fault {a.fault}" if a.fault else "")
          + ")", flush=True)
    try:
        Cluster.check_possible()
    except SkipTest as e:
        return skip_exit_code(e)
    t_start = time.monotonic()
    failures, known, infos = [], [], []
    chaos = None
    cluster = Cluster(2, keep=a.keep)
    try:
        cluster.start()
        cluster.start_sshd()
        chaos = Chaos(a, cluster)
        chaos.run_reference()
        for i, (kind, trial_seed) in enumerate(plan, 1):
            info = chaos.trial(i, kind, random.Random(trial_seed))
            info["seed"] = trial_seed
            infos.append(info)
            print(f"trial {i}/{len(plan)} (--trial-seed {trial_seed}): " + summary_line(info),
                  flush=True)
            if a.verbose or info["problems"] or info.get("known"):
                print("\n".join("    | " + line for line in
                                info["output"].splitlines()[-60 if not a.verbose else 0:]))
            for p in info["problems"]:
                line = f"trial {i} {kind} (--fault {kind} --trial-seed {trial_seed}): {p}"
                failures.append(line)
                print(f"FAIL: {line}", flush=True)
            for defect, p in info.get("known", []):
                line = f"trial {i} {kind} (--fault {kind} --trial-seed {trial_seed}): {p}"
                if defect in KNOWN_DEFECTS and not a.strict:
                    known.append(line)
                    print(f"KNOWN ({defect}: {KNOWN_DEFECTS[defect]}): {line}", flush=True)
                else:
                    failures.append(line)
                    print(f"FAIL: {line}", flush=True)
    except SkipTest as e:
        cluster.stop()
        return skip_exit_code(e)
    except Fail as e:
        failures.append(str(e))
        print(f"FAIL: {e}", flush=True)
    except Exception as e:  # noqa: BLE001: reported as a failure, after teardown
        traceback.print_exc()
        failures.append(f"{type(e).__name__}: {e}")
        print(f"FAIL: the test itself: {type(e).__name__}: {e}", flush=True)
    finally:
        cluster.stop()
    counts = {}
    for info in infos:
        counts[info["outcome"]] = counts.get(info["outcome"], 0) + 1
    per_fault = {}
    for info in infos:
        per_fault.setdefault(info["fault"], {}).setdefault(info["outcome"], 0)
        per_fault[info["fault"]][info["outcome"]] += 1
    total = time.monotonic() - t_start
    print(f"SUMMARY: {len(infos)} trials in {total:.0f} s (seed {seed}): "
          + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
          + f"; {len(failures)} failing, {len(known)} known defects", flush=True)
    print("RESULT " + json.dumps({"seed": seed, "trials": len(infos), "outcomes": counts,
                                  "per_fault": per_fault, "failures": len(failures),
                                  "known": len(known), "total_s": round(total, 1),
                                  "reference_s": round(chaos.reference_s or 0, 1)
                                  if chaos else None}))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
