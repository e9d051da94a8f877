"""A private Grid Engine cell: sge_qmaster on node1, sge_execd on every node.

start(), run() and wait() take the cluster first: Cluster uses them as its methods
start_sge, sge_run and sge_wait."""

import os
import re
import time

from .namespaces import SkipTest
from .procs import sh

LIB = "/var/lib/gridengine"
CELL = "ddpc"

# Scheduler: a 1 s interval, so that jobs start at once.
SCHEDULER_CONF = (
    "algorithm default\nschedule_interval 0:0:1\nmaxujobs 0\n"
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
    "default_duration INFINITY\n")


def _pe_conf(pe):
    # One slot per host; control_slaves lets the job start its tasks with qrsh -inherit.
    return (f"pe_name {pe}\nslots 9999\nuser_lists NONE\nxuser_lists NONE\n"
            "start_proc_args NONE\nstop_proc_args NONE\nallocation_rule 1\n"
            "control_slaves TRUE\njob_is_first_task FALSE\nurgency_slots min\n"
            "accounting_summary FALSE\nqsort_args NONE\n")


def _queue_conf(pe, tmp, nodes):
    # all.q: 1 slot per node and a tmpdir of its own per host.
    return ("qname all.q\nhostlist @allhosts\nseq_no 0\nload_thresholds NONE\n"
            "suspend_thresholds NONE\nnsuspend 1\nsuspend_interval 00:05:00\n"
            "priority 0\nmin_cpu_interval 00:05:00\nprocessors UNDEFINED\n"
            "qtype BATCH INTERACTIVE\nckpt_list NONE\n"
            f"pe_list {pe}\nrerun FALSE\nslots 1\n"
            "tmpdir " + ",".join([f"{tmp}/default"] +
                                 [f"[{n}={tmp}/{n}]" for n in nodes]) + "\n"
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
            "s_rss INFINITY\nh_rss INFINITY\ns_vmem INFINITY\nh_vmem INFINITY\n")


def start(cluster, pe="mpi"):
    """A private Grid Engine cell: sge_qmaster on node1, sge_execd on every node, queue
    all.q (1 slot per node, per-host tmpdir), parallel environment `pe` (1 slot per
    host, control_slaves) and a 1 s scheduling interval. Client commands must run on a
    node (qmaster rejects the root namespace's name): use run() (cluster.sge_run).
    Sets cluster.sge_env."""
    t0 = time.monotonic()
    if not os.path.exists("/usr/sbin/sge_qmaster") or not os.path.isdir(LIB):
        raise SkipTest("Grid Engine not found (Debian: gridengine-master gridengine-exec "
                       "gridengine-client)")
    d = os.path.join(cluster.dir, "sge")
    env = _make_cell(cluster, d)
    cluster.sge_env = env
    cluster.sge_dir = d
    spool = os.path.join(d, "spool")
    cluster.start_daemon("sge_qmaster", cluster.nodes[0], ["/usr/sbin/sge_qmaster"],
                         env=dict(env, SGE_ND="1"), log=os.path.join(d, "qmaster.out"))
    deadline = time.monotonic() + 30
    while run(cluster, ["qconf", "-sh"]).returncode != 0:
        if time.monotonic() > deadline:
            raise RuntimeError(f"sge_qmaster not up (logs in {spool}/qmaster)")
        time.sleep(0.2)
    _configure(cluster, d, pe)
    for name in cluster.nodes:
        cluster.start_daemon(f"sge_execd {name}", name, ["/usr/sbin/sge_execd"],
                             env=dict(env, SGE_ND="1"), log=os.path.join(d, f"execd-{name}.out"))
    deadline = time.monotonic() + 60
    while True:
        r = run(cluster, ["qstat", "-f", "-q", "all.q"])
        up = [line for line in r.stdout.splitlines() if line.startswith("all.q@")
              and len(line.split()) >= 5 and line.split()[3] != "-NA-"
              and (len(line.split()) < 6 or not any(c in line.split()[5] for c in "au"))]
        if len(up) == cluster.n:
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"SGE execds not up: {r.stdout}{r.stderr}")
        time.sleep(0.3)
    cluster.timings["bring_up_sge_s"] = time.monotonic() - t0


def _make_cell(cluster, d):
    """An SGE_ROOT in d made of symlinks to Debian's files, with cell CELL (classic
    spooling, root as manager, every node an admin host). Returns the clients' env."""
    root = os.path.join(d, "root")
    common = os.path.join(root, CELL, "common")
    os.makedirs(common)
    for entry in os.listdir(LIB):
        if entry != "default":
            os.symlink(os.path.join(LIB, entry), os.path.join(root, entry))
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
        f.write(cluster.nodes[0] + "\n")
    with open("/usr/share/gridengine/default-configuration") as f:
        conf = f.read()
    conf = re.sub(r"(?m)^execd_spool_dir.*$", f"execd_spool_dir {spool}/execd", conf)
    conf = re.sub(r"(?m)^min_uid.*$", "min_uid 0", conf)
    conf = re.sub(r"(?m)^min_gid.*$", "min_gid 0", conf)
    conf = re.sub(r"(?m)^load_report_time.*$", "load_report_time 00:00:05", conf)
    conf_file = os.path.join(d, "global-configuration")
    with open(conf_file, "w") as f:
        f.write(conf)
    env = dict(os.environ, SGE_ROOT=root, SGE_CELL=CELL, SGE_QMASTER_PORT="6444",
               SGE_EXECD_PORT="6445",
               PATH=f"/usr/lib/gridengine:{os.environ.get('PATH', '/usr/bin:/bin')}")
    # SGE_ND keeps a daemon in the foreground: only the daemons get it, never the clients
    # or the jobs (qsub -V) from this environment.
    env.pop("SGE_ND", None)
    ul = "/usr/lib/gridengine"
    res = "/usr/share/gridengine/util/resources"
    for argv in ([f"{ul}/spoolinit", "classic", "libspoolc", f"{common};{spool}/qmaster",
                  "init"],
                 [f"{ul}/spooldefaults", "configuration", conf_file],
                 [f"{ul}/spooldefaults", "complexes", f"{res}/centry"],
                 [f"{ul}/spooldefaults", "usersets", f"{res}/usersets"],
                 [f"{ul}/spooldefaults", "managers", "root"],
                 [f"{ul}/spooldefaults", "adminhosts", *cluster.nodes]):
        r = sh(argv, check=False, env=env)
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)}: {r.stdout}{r.stderr}")
    return env


def _configure(cluster, d, pe):
    """Scheduler, parallel environment, host group @allhosts, queue all.q, submit hosts."""
    tmp = os.path.join(d, "tmp")
    files = {
        "sched": SCHEDULER_CONF,
        "pe": _pe_conf(pe),
        "hostgroup": f"group_name @allhosts\nhostlist {' '.join(cluster.nodes)}\n",
        "queue": _queue_conf(pe, tmp, cluster.nodes),
    }
    for name in cluster.nodes:
        os.makedirs(os.path.join(tmp, name))
    os.makedirs(os.path.join(tmp, "default"))
    for key, text in files.items():
        path = os.path.join(d, f"{key}.conf")
        with open(path, "w") as f:
            f.write(text)
        files[key] = path
    for argv in (["qconf", "-Msconf", files["sched"]], ["qconf", "-Ap", files["pe"]],
                 ["qconf", "-Ahgrp", files["hostgroup"]], ["qconf", "-Aq", files["queue"]],
                 ["qconf", "-as", ",".join(cluster.nodes)]):
        r = run(cluster, argv)
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)}: {r.stdout}{r.stderr}")


def run(cluster, argv, node=None, timeout=60, env=None, **kw):
    """Runs a Grid Engine client command (qsub, qstat, qconf...) on node (default node1)."""
    return cluster.run(node or cluster.nodes[0], argv, env=env or cluster.sge_env,
                       timeout=timeout, cwd=kw.pop("cwd", cluster.dir), **kw)


def wait(cluster, job_id, timeout=120, records=1):
    """Waits until the job left qstat; returns the highest exit status of its `records`
    accounting records (qacct), or None."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = run(cluster, ["qstat", "-j", str(job_id)])
        if r.returncode != 0:
            break
        time.sleep(0.2)
    else:
        run(cluster, ["qdel", "-f", str(job_id)])
        return None
    # With control_slaves, qacct has one record per host (the master's and one per
    # `qrsh -inherit`), written in no fixed order: wait for all, report the worst.
    statuses = []
    for _ in range(100):
        r = run(cluster, ["qacct", "-j", str(job_id)])
        statuses = [int(x) for x in re.findall(r"(?m)^exit_status\s+(\d+)", r.stdout)]
        if len(statuses) >= records:
            break
        time.sleep(0.1)
    return max(statuses) if statuses else None
