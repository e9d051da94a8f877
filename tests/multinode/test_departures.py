#!/usr/bin/python3
"""Nodes that leave, one ddprun per node started by hand (3 simulated nodes, Python workers):

  --case failtogether  a rank on the last node is SIGKILLed while every rank needs SAVE_S
                       seconds to exit on SIGTERM: the last ddprun exits within SAVE_S + 1.5 s
                       of the kill (the failure travels at once: one grace, not two), every
                       node with the job's code (137).
  --case notice        SIGUSR1 to node 0's ddprun while it waits for a late node: both
                       started nodes end 75 and no worker ever starts; before it,
                       `ddprun --status` there says who joined and who is awaited.
  --case stop          SIGTERM to node 1's ddprun with --max-restarts 2: node 0 ends within
                       its grace + 2 s, spends no restart and says that node 1 was stopped.

  --case setup         node 1's set-up fails after it joined (its --log-dir is a file): node 0
                       names node 1's own error, spends no restart, and both exit 125.
  --case partition     node 1's link is cut (its interface down) while every worker runs,
                       and nothing is said on the connection: each side's kernel ends it
                       within kPeerDeadAfterSeconds (10 s, TCP keepalive), so both ddprun
                       exit non-zero within that + the grace + 3 s, node 0 naming node 1,
                       and no worker is left on either node.
  --case sshcut        node 0's ddprun starts node 1's over ssh (--launcher ssh), and node
                       1's link is cut while every worker runs: the head ends within ssh's
                       keepalive (3 s) + the grace + 3 s; node 1's ddprun, whose stdin (its
                       ssh session) stays open through the cut, takes the silence of the
                       head's heartbeat on it for a lost head and ends, workers and all,
                       within kPeerDeadAfterSeconds + the grace + 3 s.
  --case frozen        node 1's ddprun is stopped (SIGSTOP) while every worker runs: its
                       kernel still answers, so only the launchers' heartbeat shows it. Node
                       0 names it and ends within kPeerDeadAfterSeconds + the grace + 3 s;
                       node 1, continued (SIGCONT) once node 0 has ended, stops its workers
                       and ends within the grace + 3 s; no worker is left on either node.
  --case frozenhead    the same with node 0's ddprun stopped: node 1 ends first, saying that
                       node 0 sent nothing, and node 0, continued, ends after it.
  --case suspend       both ddprun stopped together past the heartbeat's bound, then
                       continued (a suspended job, Ctrl-Z): neither takes the other's
                       silence for a loss; the job runs on until SIGTERM to node 0 ends it
                       on both nodes with 143.

  PYTHONPATH=tests tests/multinode/test_departures.py --ddprun BIN --case CASE
Exit 77: skipped (not root, no namespaces); under CI=true that is a failure.
"""
import argparse
import os
import signal
import subprocess
import sys
import threading
import time
import uuid

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from simcluster.jobs import check_leftovers, job_env, run_on_cluster  # noqa: E402
from simcluster.procs import ns_inode, processes_with_marker  # noqa: E402

NPROC = 2
PORT = 29541
SAVE_S = 2.0
GRACE_S = 5
PEER_DEAD_AFTER_S = 10  # common/net.h, kPeerDeadAfterSeconds
RUN_ID = f"depart{uuid.uuid4().hex[:8]}"
WORKER_PY = r"""
import os, signal, sys, time
d, rank = os.environ["DEPART_DIR"], os.environ["RANK"]
save_s = float(os.environ.get("SAVE_S", "0"))
def on_term(sig, frame):
    time.sleep(save_s)  # an emergency checkpoint
    sys.exit(143)
signal.signal(signal.SIGTERM, on_term)
open(os.path.join(d, "started." + rank), "w").close()
if os.environ.get("KILL_RANK") == rank:
    world = int(os.environ["WORLD_SIZE"])
    while sum(f.startswith("started.") for f in os.listdir(d)) < world:
        time.sleep(0.02)
    with open(os.path.join(d, "killed_at"), "w") as f:
        f.write(repr(time.time()))
    os.kill(os.getpid(), signal.SIGKILL)
while True:
    signal.pause()
"""


class Node:
    """One node's ddprun, with the wall-clock time it exited."""

    def __init__(self, cluster, node, argv, env):
        self.name = node
        self.proc = cluster.popen(node, argv, env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
        self.out = ""
        self.exited_at = None
        self.thread = threading.Thread(target=self._wait)
        self.thread.start()

    def _wait(self):
        self.out, _ = self.proc.communicate(timeout=120)
        self.exited_at = time.time()

    def join(self, failures):
        self.thread.join(timeout=150)
        print(f"--- {self.name}: exit {self.proc.returncode}\n{self.out}")
        if self.exited_at is None:
            self.proc.kill()
            failures.append(f"{self.name}'s ddprun did not exit")


def argv_for(a, cluster, i, nnodes, worker, *extra):
    return [os.path.abspath(a.ddprun), "--run-id", RUN_ID, "--nnodes", str(nnodes),
            "--node-rank", str(i),
            "--master-addr", cluster.nodes[0], "--master-port", str(PORT), "--nproc-per-node",
            str(NPROC), "--shutdown-timeout", str(GRACE_S), *extra, "--", "/usr/bin/python3",
            worker]


def wait_for(condition, timeout, what, failures):
    """Polls `condition` until true (a wait for another process, not a stand-in for one)."""
    until = time.monotonic() + timeout
    while time.monotonic() < until:
        if condition():
            return True
        time.sleep(0.02)
    failures.append(f"timed out waiting for {what}")
    return False


def case_failtogether(cluster, a, worker, env, d, failures, result):
    nodes = [Node(cluster, n, argv_for(a, cluster, i, 3, worker), env)
             for i, n in enumerate(cluster.nodes)]
    for n in nodes:
        n.join(failures)
    if not os.path.exists(os.path.join(d, "killed_at")):
        failures.append("rank 5 was never killed")
        return
    killed_at = float(open(os.path.join(d, "killed_at")).read())
    last = max(n.exited_at or 0 for n in nodes)
    result["kill_to_last_exit_s"] = round(last - killed_at, 2)
    result["save_s"] = SAVE_S
    if last - killed_at > SAVE_S + 1.5:
        failures.append(f"the last ddprun exited {last - killed_at:.2f} s after the kill, "
                        f"more than SAVE_S + 1.5 = {SAVE_S + 1.5} s")
    for n in nodes:
        if n.proc.returncode != 128 + signal.SIGKILL:
            failures.append(f"{n.name} exited {n.proc.returncode}, not 137 (the job's code)")
    if "node 2 failed first" not in nodes[1].out:
        failures.append("node 1 did not name node 2's failure as why it stopped")


def case_notice(cluster, a, worker, env, d, failures, result):
    # Node 2 never comes: node 0 waits for it with node 1 joined.
    nodes = [Node(cluster, n, argv_for(a, cluster, i, 3, worker), env)
             for i, n in enumerate(cluster.nodes[:2])]

    def joined():
        r = cluster.run(cluster.nodes[0], ["ss", "-Htn", "state", "established",
                                           f"( sport = :{PORT} )"])
        return r.returncode == 0 and r.stdout.strip() != ""
    if wait_for(joined, 30, "node 1 to join node 0", failures):
        status = cluster.run(cluster.nodes[0], [os.path.abspath(a.ddprun), "--status", RUN_ID],
                             env=env, timeout=30)
        print(f"--- status while the nodes gather: exit {status.returncode}\n{status.stdout}"
              f"{status.stderr}")
        if status.returncode != 0 or "joined: 1 (node2); awaited: 2" not in status.stdout:
            failures.append("--status while the nodes gather did not say who joined and who "
                            "is awaited")
        nodes[0].proc.send_signal(signal.SIGUSR1)
    for n in nodes:
        n.join(failures)
        if n.proc.returncode != 75:
            failures.append(f"{n.name} exited {n.proc.returncode}, not 75")
    started = [f for f in os.listdir(d) if f.startswith("started.")]
    if started:
        failures.append(f"workers started after the notice: {started}")
    if "while the nodes gathered" not in nodes[0].out:
        failures.append("node 0 did not say that the notice came while the nodes gathered")


def case_stop(cluster, a, worker, env, d, failures, result):
    nodes = [Node(cluster, n, argv_for(a, cluster, i, 2, worker, "--max-restarts", "2"), env)
             for i, n in enumerate(cluster.nodes[:2])]
    world = 2 * NPROC
    stopped_at = None
    if wait_for(lambda: sum(f.startswith("started.") for f in os.listdir(d)) == world, 60,
                "every worker to start", failures):
        stopped_at = time.time()
        nodes[1].proc.send_signal(signal.SIGTERM)
    for n in nodes:
        n.join(failures)
        if n.proc.returncode != 128 + signal.SIGTERM:
            failures.append(f"{n.name} exited {n.proc.returncode}, not 143")
    if stopped_at is not None and nodes[0].exited_at is not None:
        result["stop_to_node0_exit_s"] = round(nodes[0].exited_at - stopped_at, 2)
        if nodes[0].exited_at - stopped_at > GRACE_S + 2:
            failures.append(f"node 0 exited {nodes[0].exited_at - stopped_at:.2f} s after node 1's "
                            f"stop, more than the grace + 2 s")
    if "node 1 was stopped by SIGTERM" not in nodes[0].out:
        failures.append("node 0 did not say that node 1 was stopped")
    if "restarting all workers" in nodes[0].out:
        failures.append("node 0 spent a restart on a stop")


def case_setup(cluster, a, worker, env, d, failures, result):
    not_a_folder = os.path.join(cluster.dir, "not-a-folder")
    with open(not_a_folder, "w") as f:
        f.write("a file where node 1's --log-dir should be\n")
    argv0 = argv_for(a, cluster, 0, 2, worker, "--max-restarts", "2")
    argv1 = argv_for(a, cluster, 1, 2, worker, "--max-restarts", "2", "--log-dir", not_a_folder)
    nodes = [Node(cluster, cluster.nodes[0], argv0, env), Node(cluster, cluster.nodes[1], argv1, env)]
    for n in nodes:
        n.join(failures)
        if n.proc.returncode != 125:
            failures.append(f"{n.name} exited {n.proc.returncode}, not 125 (ddprun's error)")
    if "node 1 could not start its workers" not in nodes[0].out:
        failures.append("node 0 did not name node 1's set-up failure")
    elif "not-a-folder" not in nodes[0].out:
        failures.append("node 0 did not quote node 1's own error")
    if "restarting all workers" in nodes[0].out:
        failures.append("node 0 spent a restart on a node whose set-up failed")


def case_partition(cluster, a, worker, env, d, failures, result):
    nodes = [Node(cluster, n, argv_for(a, cluster, i, 2, worker), env)
             for i, n in enumerate(cluster.nodes[:2])]
    world = 2 * NPROC
    cut_at = None
    if wait_for(lambda: sum(f.startswith("started.") for f in os.listdir(d)) == world, 60,
                "every worker to start", failures):
        cut = cluster.run(cluster.nodes[1], ["ip", "link", "set", "dev", "eth0", "down"],
                          timeout=30)
        if cut.returncode != 0:
            failures.append(f"cannot cut node 1's link: {cut.stderr.strip()}")
        cut_at = time.time()
    for n in nodes:
        n.join(failures)
    if cut_at is None:
        return
    bound = PEER_DEAD_AFTER_S + GRACE_S + 3
    for n in nodes:
        if n.exited_at is None:
            continue
        result[f"cut_to_{n.name}_exit_s"] = round(n.exited_at - cut_at, 2)
        if n.exited_at - cut_at > bound:
            failures.append(f"{n.name} exited {n.exited_at - cut_at:.2f} s after the cut, more "
                            f"than {bound} s")
        if n.proc.returncode == 0:
            failures.append(f"{n.name} exited 0 after losing the other node")
    if "node 1" not in nodes[0].out:
        failures.append("node 0 did not name node 1")


def case_sshcut(cluster, a, worker, env, d, failures, result):
    hostfile = os.path.join(cluster.dir, "hostfile2")
    with open(hostfile, "w") as f:
        f.write(f"{cluster.nodes[0]}\n{cluster.nodes[1]}\n")
    argv = [os.path.abspath(a.ddprun), "--run-id", RUN_ID, "--hostfile", hostfile, "--launcher",
            "ssh", "--ssh-config", cluster.ssh_config, "--nproc-per-node", str(NPROC),
            "--master-port", str(PORT), "--shutdown-timeout", str(GRACE_S)]
    for name in ("DDPC_MARK", "DEPART_DIR", "SAVE_S"):
        argv += ["--env", name]
    head = Node(cluster, cluster.nodes[0], argv + ["--", "/usr/bin/python3", worker], env)
    node1_net = ns_inode(cluster.holders[cluster.nodes[1]].pid, "net")

    def on_node1():
        return [pid for pid, _ in processes_with_marker(env["DDPC_MARK"])
                if ns_inode(pid, "net") == node1_net]

    if not wait_for(lambda: sum(f.startswith("started.") for f in os.listdir(d)) == 2 * NPROC,
                    60, "every worker to start", failures):
        head.join(failures)
        return
    cut = cluster.run(cluster.nodes[1], ["ip", "link", "set", "dev", "eth0", "down"], timeout=30)
    if cut.returncode != 0:
        failures.append(f"cannot cut node 1's link: {cut.stderr.strip()}")
    cut_at = time.time()
    bound = PEER_DEAD_AFTER_S + GRACE_S + 3
    if wait_for(lambda: not on_node1(), bound, "node 1's ddprun and workers to end", failures):
        result["cut_to_node1_gone_s"] = round(time.time() - cut_at, 2)
    head.join(failures)
    if head.exited_at is not None:
        result["cut_to_head_exit_s"] = round(head.exited_at - cut_at, 2)
        if head.exited_at - cut_at > 3 + GRACE_S + 3:
            failures.append(f"the head exited {head.exited_at - cut_at:.2f} s after the cut")
    if head.proc.returncode == 0:
        failures.append("the head exited 0 after losing node 1")
    cluster.run(cluster.nodes[1], ["ip", "link", "set", "dev", "eth0", "up"], timeout=30)


def case_frozen(cluster, a, worker, env, d, failures, result, frozen_rank):
    nodes = [Node(cluster, n, argv_for(a, cluster, i, 2, worker), env)
             for i, n in enumerate(cluster.nodes[:2])]
    frozen, other = nodes[frozen_rank], nodes[1 - frozen_rank]
    world = 2 * NPROC
    if not wait_for(lambda: sum(f.startswith("started.") for f in os.listdir(d)) == world, 60,
                    "every worker to start", failures):
        for n in nodes:
            n.proc.send_signal(signal.SIGCONT)
            n.join(failures)
        return
    frozen.proc.send_signal(signal.SIGSTOP)
    stopped_at = time.time()
    other.thread.join(timeout=PEER_DEAD_AFTER_S + GRACE_S + 30)
    frozen.proc.send_signal(signal.SIGCONT)
    continued_at = time.time()
    for n in nodes:
        n.join(failures)
    if other.exited_at is None or frozen.exited_at is None:
        return
    result["stop_to_other_exit_s"] = round(other.exited_at - stopped_at, 2)
    result["continue_to_frozen_exit_s"] = round(frozen.exited_at - continued_at, 2)
    bound = PEER_DEAD_AFTER_S + GRACE_S + 3
    if other.exited_at - stopped_at > bound:
        failures.append(f"{other.name} exited {other.exited_at - stopped_at:.2f} s after "
                        f"{frozen.name}'s ddprun was stopped, more than {bound} s")
    if frozen.exited_at - continued_at > GRACE_S + 3:
        failures.append(f"{frozen.name} exited {frozen.exited_at - continued_at:.2f} s after "
                        f"it was continued, more than the grace + 3 s")
    for n in nodes:
        if n.proc.returncode == 0:
            failures.append(f"{n.name} exited 0 after the other node's ddprun was stopped")
    said = ("lost this node's ddprun: not a line from it in 10 s" if frozen_rank == 1
            else "node 0's ddprun sent nothing in 10 s")
    if said not in other.out:
        failures.append(f"{other.name} did not say that the stopped ddprun sent nothing")


def case_suspend(cluster, a, worker, env, d, failures, result):
    nodes = [Node(cluster, n, argv_for(a, cluster, i, 2, worker), env)
             for i, n in enumerate(cluster.nodes[:2])]
    world = 2 * NPROC
    if wait_for(lambda: sum(f.startswith("started.") for f in os.listdir(d)) == world, 60,
                "every worker to start", failures):
        for n in nodes:
            n.proc.send_signal(signal.SIGSTOP)
        time.sleep(PEER_DEAD_AFTER_S + 1)  # the suspension itself, past the bound
        for n in reversed(nodes):
            n.proc.send_signal(signal.SIGCONT)
        # Each side now gets a fresh bound and hears the other within it; a side that
        # judged at once would have ended its job by now.
        time.sleep(4)
        for n in nodes:
            if n.proc.poll() is not None:
                failures.append(f"{n.name} ended after the job was continued: exit "
                                f"{n.proc.returncode}")
        nodes[0].proc.send_signal(signal.SIGTERM)
    for n in nodes:
        n.join(failures)
        if n.proc.returncode != 128 + signal.SIGTERM:
            failures.append(f"{n.name} exited {n.proc.returncode}, not 143 (the stop's)")
    for n in nodes:
        if "sent nothing" in n.out or "not a line from it" in n.out:
            failures.append(f"{n.name} took the suspension for a silent node")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ddprun", required=True)
    ap.add_argument("--case", choices=["failtogether", "notice", "stop", "setup", "partition",
                                       "sshcut", "frozen", "frozenhead", "suspend"],
                    required=True)
    a = ap.parse_args()

    def body(cluster, result, failures):
        d = os.path.join(cluster.dir, "marks")
        os.makedirs(d)
        worker = os.path.join(cluster.dir, "worker.py")
        with open(worker, "w") as f:
            f.write(WORKER_PY)
        marker = f"ddpc{uuid.uuid4().hex[:12]}"
        extra = {"DEPART_DIR": d, "SAVE_S": str(SAVE_S)}
        if a.case == "failtogether":
            extra["KILL_RANK"] = str(3 * NPROC - 1)
        env = job_env(marker, **extra)
        cases = {"failtogether": case_failtogether, "notice": case_notice, "stop": case_stop,
                 "setup": case_setup, "partition": case_partition, "sshcut": case_sshcut,
                 "frozen": lambda *args: case_frozen(*args, frozen_rank=1),
                 "frozenhead": lambda *args: case_frozen(*args, frozen_rank=0),
                 "suspend": case_suspend}
        cases[a.case](cluster, a, worker, env, d, failures, result)
        check_leftovers(cluster, marker, failures)

    return run_on_cluster(3, body, {"case": a.case, "nodes": 3}, sshd=a.case == "sshcut")


if __name__ == "__main__":
    sys.exit(main())
