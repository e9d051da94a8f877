#!/usr/bin/python3
"""A rank lost on any node costs one step, not a restart (issue 41), on 2 simulated nodes of
2 ranks each: ddp-train with runtime.recovery "peer" over gloo under
`ddprun --restart-scope rank --max-restarts 2`. An uninterrupted run first; then rank 3
(node2) SIGKILLs itself in its backward at step 12, and, in another run, rank 0 (node1, the
store's host) in its forward. Each node's ddprun replaces its own rank, node 0 merges what
every node reports into the membership every worker reads: each run exits 0 on every node,
says the recovery once, starts one replacement and no full restart, ends with parameters
bit-identical to the uninterrupted run's, and leaves nothing on any node.

  --case byhand  ddprun --nnodes 2 --node-rank I --master-addr node1 ... on each node
  --case ssh     one ddprun on node1 that starts node2's over ssh (--launcher ssh), with
                 --warm-spare: the lost rank's replacement is its node's spare
  --case tree    3 nodes, --ssh-fanout 1: node1 starts node2's ddprun, which starts node3's;
                 the last rank (5, on node3) and rank 0 are lost: node3's part reaches node 0
                 through node2's, and the whole comes back down the same way
  --case treenode  3 nodes, --ssh-fanout 1 as in tree: rank 5 SIGKILLs node3's ddprun (a
                 leaf, started by node2's) in its backward at step 12; node2's ddprun hands
                 the loss up, and node 0 starts ranks 4 and 5 on node3 again under an agent
                 of its own, while ranks 0-3 go on
  --case subtree  3 nodes, --ssh-fanout 1 as in tree, --max-restarts 4: rank 3 SIGKILLs
                 node2's ddprun (an inner node: node3's was started by it, and goes with it)
                 in its backward at step 12; node 0 starts ranks 2-5 on node2 and node3
                 again, each node under an agent of its own, while ranks 0 and 1 go on
  --case spare   3 nodes, --nnodes 2, over ssh: rank 3 SIGKILLs node2's ddprun (and so
                 both of node2's ranks) in its backward at step 12; node 0 starts ranks 2
                 and 3 on the spare node3 as replacements, and ranks 0 and 1 go on
  --case again   the same on 2 nodes over ssh, with no spare: node 0 starts ranks 2 and 3 on
                 node2 again (its ddprun alone died; the host answers)
  --case rejoin  byhand, 2 nodes: rank 3 SIGKILLs node2's ddprun in its backward at step 12;
                 the test starts node2's ddprun again with the same command once the first
                 has ended, and it joins the running round: ranks 2 and 3 go on there as
                 replacements while ranks 0 and 1 go on
  --case elsewhere  the same on 3 nodes with the job on node1 and node2 (--nnodes 2): node2's
                 place is taken by a ddprun started on node3 with --node-rank 1
  --case ahead   the same on 3 nodes, the job on node1 and node2 (--nnodes 2), and a third
                 ddprun started on node3 without --node-rank (--rdzv-backend c10d) once round 0
                 runs: every place is taken, so it waits as a spare (a second one behind it,
                 told a notice, leaves the line and exits 75); at step 40 node2's ddprun is
                 lost and the spare takes its place at once, nobody starting anything again
  --case noreturn  byhand, 2 nodes, --rdzv-conf join_timeout=4: node2's ddprun is lost and
                 nobody starts it again: node 0 waits 4 s, then says so, and the job ends on
                 node 1 with the lost node's code within the wait and one grace, nothing left

  PYTHONPATH=tests tests/multinode/test_rank_scope.py --case byhand|ssh|tree --ddprun BIN \
      --ddp-train BIN --config configs/toy.json
Exit 77: skipped (not root, no namespaces, no sshd); under CI=true that is a failure.
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from simcluster.jobs import (  # noqa: E402 (tests/ on PYTHONPATH)
    check_leftovers, job_env, run_on_cluster, wait_for_nodes)

NPROC = 2
PORT = 29541
BYHAND = ("byhand", "rejoin", "elsewhere", "ahead", "noreturn")  # one ddprun a node, by the test
MOVES = ("spare", "again", "treenode", "subtree", "rejoin", "elsewhere", "ahead",
         "noreturn")  # a node lost
# ahead: late enough that the spare started once round 0 runs waits before the loss.
KILL_AT = {"ahead": 40}


def write_config(cluster, a, name, kill):
    with open(a.config) as f:
        cfg = json.load(f)
    cfg["train"]["epochs"] = 2
    # byhand: flat gloo; ssh, tree: hierarchical (shared memory on each node, gloo between).
    cfg["runtime"].update({"recovery": "peer", "shared_memory": a.case not in BYHAND,
                           "bucket_cap_mb": 0.0002, "timeout_s": 30})
    cfg["diagnostics"] = {"final_params_file": os.path.join(cluster.dir, name + ".params")}
    if kill:
        cfg["diagnostics"].update({"kill_rank": kill[0], "kill_at_step": KILL_AT.get(a.case, 12),
                                   "kill_in": kill[1],
                                   "kill_node": a.case in MOVES})
    path = os.path.join(cluster.dir, name + ".json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    return path


def start_byhand(cluster, a, config, marker, i, node, extra=()):
    """i: the node rank, or None: none given (a spare, when every place is taken)."""
    rank = [] if i is None else ["--node-rank", str(i)]
    argv = [os.path.abspath(a.ddprun), "--nnodes", "2", *rank, "--master-addr",
            cluster.nodes[0], "--master-port", str(PORT), "--nproc-per-node", str(NPROC),
            "--restart-scope", "rank", "--max-restarts", "2", "--shutdown-timeout", "5", *extra,
            "--", os.path.abspath(a.ddp_train), "--config", config]
    runtime = os.path.join(cluster.dir, f"runtime-{node}")
    os.makedirs(runtime, mode=0o700, exist_ok=True)
    env = job_env(marker, HOME=os.path.join(cluster.dir, "home"), XDG_RUNTIME_DIR=runtime)
    return cluster.popen(node, argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True)


def read_until(proc, what):
    """The lines of proc's output up to the first with `what` (all of it, if none has)."""
    read = ""
    for line in proc.stdout:
        read += line
        if what in line:
            break
    return read


def wait_killed(proc, node, name, failures):
    """Waits for node's first ddprun, which its rank 3 SIGKILLs; returns its output."""
    try:
        out, _ = proc.communicate(timeout=150)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
    print(f"--- {name}: {node}'s first ddprun: exit {proc.returncode}\n{out}")
    if proc.returncode != -9:
        failures.append(f"{name}: {node}'s first ddprun exited {proc.returncode}, not killed by "
                        "SIGKILL")
    return out


def never_back(cluster, a, config, failures):
    """--case noreturn: node2's ddprun is lost and nobody starts it again."""
    marker = f"ddpc{uuid.uuid4().hex[:12]}"
    extra = ["--rdzv-conf", "join_timeout=4"]
    procs = [start_byhand(cluster, a, config, marker, i, node, extra)
             for i, node in enumerate(cluster.nodes)]
    wait_killed(procs[1], cluster.nodes[1], "noreturn", failures)
    lost_at = time.monotonic()
    try:
        out, _ = procs[0].communicate(timeout=60)
    except subprocess.TimeoutExpired:
        procs[0].kill()
        out, _ = procs[0].communicate()
        failures.append("noreturn: node 0 did not end within 60 s of the loss")
    ended = time.monotonic() - lost_at
    print(f"--- noreturn: node1: exit {procs[0].returncode} {ended:.1f} s after the loss\n{out}")
    check_leftovers(cluster, marker, failures, "noreturn: ")
    # Each said once as a line of its own (the node's stderr is quoted again in the report).
    for line in ("ddprun: node 1 (node2) was lost (its ddprun ended: exit code 255); its 2 rank(s) "
                 "go on where its ddprun joins again (start it with the same options, on node2 "
                 "or another host, within 4 s)",
                 "ddprun: this node's ddprun did not join again within 4 s",
                 "ddprun: not replacing the lost rank alone: node 1 (node2)'s ddprun did not "
                 "join again in time (--rdzv-conf join_timeout)"):
        if len(re.findall("^" + re.escape(line), out, re.MULTILINE)) != 1:
            failures.append(f"noreturn: node 0 did not say once: {line}")
    if procs[0].returncode in (0, None):
        failures.append(f"noreturn: node 0 exited {procs[0].returncode}: a lost node is a failure")
    # The wait (4 s), then one grace for the survivors (5 s), and no more.
    if ended > 4 + 5 + 5:
        failures.append(f"noreturn: node 0 ended {ended:.1f} s after the loss, not within 14 s")
    return ended


def run_byhand(cluster, a, config, marker, name, failures):
    job_nodes = cluster.nodes[:2]  # elsewhere: node3 is left for node2's place

    def start(i, node):
        return start_byhand(cluster, a, config, marker, i, node)

    procs = {node: start(i, node) for i, node in enumerate(job_nodes)}
    first = ""
    if a.case == "ahead" and name != "base":
        # Once round 0 runs (node 0 says who joined it), a ddprun with no --node-rank on node3.
        first += read_until(procs[job_nodes[0]], "other node(s) joined round 0")
        spare_node = cluster.nodes[-1]
        spare = start_byhand(cluster, a, config, marker, None, spare_node,
                             ["--rdzv-backend", "c10d"])
        procs[spare_node] = spare
        first += read_until(spare, "this node waits as spare 1 ")
        # A second spare in line behind it, told a notice (its node is going away): it leaves
        # the line, drained, and the job goes on.
        second = start_byhand(cluster, a, config, marker, None, spare_node,
                              ["--rdzv-backend", "c10d"])
        said = read_until(second, "this node waits as spare ")
        second.send_signal(signal.SIGUSR1)
        said += second.communicate(timeout=30)[0]
        print(f"--- {name}: the second spare: exit {second.returncode}\n{said}")
        if second.returncode != 75 or "ddprun: a notice while this node waited as a spare: it " \
                "leaves the line, having run nothing" not in said:
            failures.append(f"{name}: the second spare exited {second.returncode} on a notice, "
                            "not 75 saying why")
        # node2's ddprun is killed by its rank 3; nobody starts it again.
        first += wait_killed(procs[job_nodes[-1]], job_nodes[-1], name, failures)
        del procs[job_nodes[-1]]
    if a.case in ("rejoin", "elsewhere") and name != "base":
        # node2's ddprun is killed by its rank 3 (diagnostics.kill_node); once it has ended,
        # the same command again (on node3: with node2's --node-rank), as a user or the
        # node's supervisor would.
        lost = job_nodes[-1]
        first = wait_killed(procs[lost], lost, name, failures)
        del procs[lost]
        place = cluster.nodes[-1]
        procs[place] = start(len(job_nodes) - 1, place)
    return first + "".join(wait_for_nodes(procs, failures, f"{name}: ").values())


def run_ssh(cluster, a, config, marker, name, failures):
    # ssh: each node keeps a warm spare, which becomes the lost rank; tree: new processes;
    # spare: the job on 2 of the 3 nodes, the third a spare node.
    fanout = {"tree": ["--ssh-fanout", "1"], "treenode": ["--ssh-fanout", "1"],
              "subtree": ["--ssh-fanout", "1"], "ssh": ["--warm-spare"],
              "spare": ["--nnodes", "2"], "again": []}[a.case]
    # subtree: node2's ranks and node3's, 4 recoveries
    restarts = "4" if a.case == "subtree" else "2"
    argv = [os.path.abspath(a.ddprun), "--hostfile", cluster.hostfile, "--launcher", "ssh",
            "--ssh-config", cluster.ssh_config, *fanout, "--env", "DDPC_MARK", "--nproc-per-node",
            str(NPROC), "--master-port", str(PORT), "--restart-scope", "rank", "--max-restarts",
            restarts, "--shutdown-timeout", "5", "--tag-output", "--",
            os.path.abspath(a.ddp_train), "--config", config]
    proc = cluster.popen(cluster.nodes[0], argv, env=job_env(marker), stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    return "".join(wait_for_nodes({cluster.nodes[0]: proc}, failures, f"{name}: ").values())


def count(text, what):
    return len(re.findall(re.escape(what), text))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", required=True,
                    choices=["byhand", "ssh", "tree", "treenode", "subtree", "spare", "again",
                             "rejoin", "elsewhere", "ahead", "noreturn"])
    ap.add_argument("--ddprun", required=True)
    ap.add_argument("--ddp-train", required=True)
    ap.add_argument("--config", required=True)
    a = ap.parse_args()
    run = run_byhand if a.case in BYHAND else run_ssh
    nodes = 3 if a.case in ("tree", "treenode", "subtree", "spare", "elsewhere", "ahead") else 2
    last = (2 if a.case in ("elsewhere", "ahead") else nodes) * NPROC - 1
    kills = ((f"rank{last}-backward", last, "backward"), ("rank0-forward", 0, "forward"))
    moves = a.case in MOVES
    if moves:
        kills = (("node2-backward", 3, "backward"),)
    if a.case == "treenode":  # the leaf: node3, below node2's ddprun
        kills = (("node3-backward", 5, "backward"),)
    lost = {"node2-backward": "ranks 2, 3, 4, 5" if a.case == "subtree" else "ranks 2, 3",
            "node3-backward": "ranks 4, 5"}
    # The node lost, as node 0 names it, and the last rank, which must end where it goes on.
    lost_node = "node 2 (node3)" if a.case == "treenode" else "node 1 (node2)"
    lost_rank = 5 if a.case in ("treenode", "subtree") else 3

    def body(cluster, result, failures):
        os.makedirs(os.path.join(cluster.dir, "home"), mode=0o700, exist_ok=True)
        if a.case == "noreturn":
            config = write_config(cluster, a, "noreturn", (3, "backward"))
            result["loss_to_end_s"] = round(never_back(cluster, a, config, failures), 2)
            return
        marker = f"ddpc{uuid.uuid4().hex[:12]}"
        run(cluster, a, write_config(cluster, a, "base", None), marker, "base", failures)
        check_leftovers(cluster, marker, failures, "base: ")
        base_file = os.path.join(cluster.dir, "base.params")
        if not os.path.exists(base_file):
            failures.append("the uninterrupted run wrote no final parameters")
            return
        with open(base_file) as f:
            base = json.load(f)
        for name, rank, phase in kills:
            marker = f"ddpc{uuid.uuid4().hex[:12]}"
            out = run(cluster, a, write_config(cluster, a, name, (rank, phase)), marker, name,
                      failures)
            check_leftovers(cluster, marker, failures, f"{name}: ")
            ranks = lost.get(name, f"rank {rank}")
            step = KILL_AT.get(a.case, 12)
            line = re.search(rf"ddp-train: recovered {ranks} at step {step} from rank \d+ in "
                             r"([0-9.]+) s \(0 steps lost", out)
            if not line:
                failures.append(f"{name}: no recovery line for {ranks} at step {step}")
            else:
                result[f"{name}_s"] = float(line.group(1))
                # Far below runtime.timeout_s (30 s): no survivor waited out gloo's timeout in
                # the old group's end (a collective of it waiting on a survivor that left it).
                if float(line.group(1)) > 10:
                    failures.append(f"{name}: the recovery took {line.group(1)} s")
            # A node lost: its ranks start together on the spare node, none alone.
            where = {"spare": "; started its 2 rank(s) on the spare node node3",
                     "again": "; started its 2 rank(s) there again, with no spare node that fits",
                     "treenode": "; started its 2 rank(s) there again under this node's own "
                                 "agent, with no spare node that fits",
                     "rejoin": "; its 2 rank(s) go on where its ddprun joins again (start it "
                               "with the same options, on node2 or another host, within 600 s)",
                     }
            where["elsewhere"] = where["rejoin"]
            where["subtree"] = (", and with it the 1 node(s) below it in the ssh tree" +
                                where["again"])
            where["ahead"] = "; its 2 rank(s) go on on node3, whose ddprun waits as a spare"
            moved = count(out, f"ddprun: {lost_node} was lost (its ddprun ended: exit code "
                          f"255){where.get(a.case, '')}")
            place = ("node3" if a.case in ("spare", "treenode", "subtree", "elsewhere", "ahead")
                     else "node2")
            if a.case == "subtree" and count(
                    out, "ddprun: node 2, below node 1 (node2) in the ssh tree, went with it; "
                    "started its 2 rank(s) there again under this node's own agent, with no spare "
                    "node that fits (0 restart(s) left)") != 1:
                failures.append(f"{name}: node 0 did not say once that node 2 went with node 1")
            if a.case == "subtree" and not re.search(r"ddp-train:\s+3\s+node2\s", out):
                failures.append(f"{name}: rank 3 did not end on node2")
            if a.case == "ahead":
                # The second spare: behind the first, or first in line once the first is seated.
                for said, times in (
                        (r"ddprun: rendezvous: node \(any rank\) \(node3\) waits as a spare: "
                         r"every node's place is taken \([12] spare\(s\)\)", 2),
                        (r"ddprun: rendezvous: the spare node node3 takes node 1's place \([01] "
                         r"spare\(s\) left\)", 1),
                        (r"ddprun: rendezvous: the spare node node3 left \([01] spare\(s\) "
                         r"left\)", 1),
                        (r"ddprun: joined round 0 as node 1 in its lost place", 1)):
                    if len(re.findall(said, out)) != times:
                        failures.append(f"{name}: not said {times} time(s): {said}")
            if a.case in ("rejoin", "elsewhere", "ahead") and count(
                    out, f"ddprun: node 1 ({place}) joined again: its ranks go on there (was "
                    "node2)") != 1:
                failures.append(f"{name}: node 0 did not say once that node 1 joined again")
            alone = count(out, "started its replacement")
            if (moved, alone) != ((1, 0) if moves else (0, 1)):
                failures.append(f"{name}: {alone} replacement(s) alone, {moved} node(s) moved")
            if moves and not re.search(rf"ddp-train:\s+{lost_rank}\s+{place}\s", out):
                failures.append(f"{name}: rank {lost_rank} did not end on {place}")
            if a.case in ("elsewhere", "ahead") and not re.search(
                    r"ddprun: node 1\s+0\s+exit code 0\s+[0-9.]+ s\s+\(node3\)", out):
                failures.append(f"{name}: node 0's rank table does not show node 1 on node3")
            if count(out, "restarting all workers") != 0:
                failures.append(f"{name}: a full restart")
            spare = count(out, "'s replacement is the warm spare")
            if spare != (1 if a.case == "ssh" else 0):
                failures.append(f"{name}: {spare} replacement(s) by a warm spare")
            params_file = os.path.join(cluster.dir, name + ".params")
            if not os.path.exists(params_file):
                failures.append(f"{name}: no final parameters")
                continue
            with open(params_file) as f:
                params = json.load(f)
            if params["step"] != base["step"] or params["params"] != base["params"]:
                failures.append(f"{name}: the final parameters are not bit-identical to the "
                                "uninterrupted run's")

    return run_on_cluster(nodes, body, {"case": a.case, "nodes": nodes},
                          sshd=a.case not in BYHAND)


if __name__ == "__main__":
    sys.exit(main())
