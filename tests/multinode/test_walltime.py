#!/usr/bin/python3
"""Drain before the walltime, on a real scheduler: the job is stopped with a checkpoint
before its time limit, runs again, resumes and ends exactly like an uninterrupted run.

  PYTHONPATH=tests tests/multinode/test_walltime.py --case slurm|slurm_head|sge -n 2 --ddprun BIN \
      --ddp-train BIN --config JSON --source DIR

On a simulated cluster (tests/simcluster), 1 worker per node:
  1. reference: the user's job script (scripts/jobs/slurm.sbatch or abci-sge.sh, resource
     lines adapted) with a generous time limit trains the config to the end and writes its
     final parameters;
  2. the same script with a 1 minute limit and DDPRUN_ARGS --drain-before 20: every rank
     holds after a small step (diagnostics.hold_after_step) until ddprun's SIGUSR1 comes
     about 40 s in; ddp-train stops at an agreed step K with a checkpoint and exits 75;
     the script asks the scheduler to run the job again (Slurm: `scontrol requeue`; Grid
     Engine: exit 99); the second run resumes at step K, finishes, and its final
     parameters must equal the reference's bit for bit.
Prints PASS/FAIL lines with what was measured and one `RESULT` JSON line. Exit 77: skipped
(under CI=true: a failure, exit 1).

Scheduler details the test works around (see the PASS/FAIL lines):
  - Slurm holds a requeued job until now + cred_expire + 1 (AuthInfo cred_expire, default
    120 s; Reason=BeginTime). Unless --wait-begin-time, the test moves that begin time to
    now (`scontrol update StartTime=now`) once the job is requeued.
  - Grid Engine 8.1.9 keeps a rescheduled parallel job (control_slaves) off its former
    slave hosts ("cannot run on host ... until clean up of a previous run has finished"),
    for good here: the cluster gets --sge-spare-nodes more nodes than the job asks for.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import time
import uuid

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from simcluster import Cluster, SkipTest, kill_and_wait, skip_exit_code  # noqa: E402

HOLD_AFTER_STEP = 20
TIME_LIMIT_S = 60
# ddprun gives at most half the time left to the drain: a drain 20 s before the end of a 1
# minute job leaves ddprun 20 s after the job's start to begin (past that it would drain at
# the half of what is left, and say so); with 25 s, a loaded machine's 10 s were once too few.
DRAIN_BEFORE_S = 20
FINAL_SLURM_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
                      "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY"}

# Lines of the job's output, timestamped when the test first sees them (polled).
PATTERNS = {
    "drain_line": r"ddprun: the job ends at (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) \(([^)]*)\); "
                  r"workers get (\w+) at ([\d:]+), (\d+) s before",
    "holding": r"ddp-train: rank (\d+) \(pid \d+\) holding after step (\d+)",
    "stopping": r"ddp-train: stopping after step (\d+) .*on a preemption notice \(([^)]*)\)",
    "preempted": r"ddp-train: preempted after step (\d+)",
    "requeue": r"job: stopped before (?:the time limit|h_rt) with a checkpoint",
    "resuming": r"ddp-train: resuming from \S+ at step (\d+)",
    "done": r"ddp-train: done after (\d+) steps",
}


class OutputWatch:
    """Polls a growing file; records when each pattern's first match was seen."""

    def __init__(self, path):
        self.path = path
        self.text = ""
        self.seen = {}

    def poll(self):
        try:
            with open(self.path, errors="replace") as f:
                self.text = f.read()
        except OSError:
            return
        now = time.time()
        for key, pat in PATTERNS.items():
            if key not in self.seen and re.search(pat, self.text):
                self.seen[key] = now

    def all(self, key):
        return re.findall(PATTERNS[key], self.text)


class Test:
    def __init__(self, a, cluster):
        self.a, self.c = a, cluster
        self.dir = os.path.join(cluster.dir, "job")  # the nodes share /tmp: all see it
        os.makedirs(self.dir, exist_ok=True)
        self.failures = []
        self.result = {"case": a.case, "nodes": a.n, "nproc_per_node": 1}
        with open(a.config) as f:
            base = json.load(f)
        base.setdefault("runtime", {})["timeout_s"] = 30
        base["runtime"]["threads"] = 1
        # Agree on stopping after every step: the stop step is then the first one after
        # the notice, whatever the run length.
        base.setdefault("preemption", {})["check_every_steps"] = 1
        self.ref_config = self.write_json("reference.json", base)
        held = json.loads(json.dumps(base))
        held.setdefault("checkpoint", {})["dir"] = os.path.join(self.dir, "ckpt")
        held.setdefault("diagnostics", {})["hold_after_step"] = HOLD_AFTER_STEP
        self.held_config = self.write_json("held.json", held)

    def write_json(self, name, obj):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            json.dump(obj, f)
        return path

    def fail(self, what):
        self.failures.append(what)
        print(f"FAIL: {what}", flush=True)

    def check(self, ok, what):
        if ok:
            print(f"PASS: {what}", flush=True)
        else:
            self.fail(what)
        return ok

    def env(self, marker):
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "DDPC_MARK": marker,
            "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
            "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
        }

    def job_vars(self, marker, config, params, drain):
        # The reference run is never drained (--drain-before 0).
        args = (f"--tag-output --shutdown-timeout 3 --run-id {marker} "
                f"--drain-before {DRAIN_BEFORE_S if drain else 0}")
        return {"DDPRUN": self.a.ddprun, "WORKER": self.a.ddp_train, "CONFIG": config,
                "NPROC_PER_NODE": "1", "DDPRUN_ARGS": args,
                "WORKER_ARGS": f"--final-params {params}"}

    # ------------------------------------------------------------------ Slurm
    def slurm_script(self, marker, time_limit):
        with open(os.path.join(self.a.source, "scripts", "jobs", "slurm.sbatch")) as f:
            text = f.read()
        if self.a.case == "slurm_head":
            # ddprun called directly in the batch script: it becomes the head and starts
            # its agents with srun itself.
            text = text.replace("srun --ntasks-per-node=1 --wait=60 \\\n  ", "")
            if "srun --ntasks-per-node" in text:
                raise RuntimeError("slurm.sbatch's srun line changed: update the test")
        text = re.sub(r"(?m)^#SBATCH --nodes=.*$", f"#SBATCH --nodes={self.a.n}", text)
        text = re.sub(r"(?m)^#SBATCH --gpus-per-node=.*\n", "", text)
        text = re.sub(r"(?m)^#SBATCH --time=.*$", f"#SBATCH --time={time_limit}", text)
        # The script's second notice goes: Slurm may send it up to 60 s early (sbatch(1)),
        # which on a 1 minute job is at once, before ddprun's own.
        text = re.sub(r"(?m)^#SBATCH --signal=.*\n", "", text)
        script = os.path.join(self.dir, f"job-{marker}.sbatch")
        with open(script, "w") as f:
            f.write(text)
        return script

    def slurm_job(self, marker, config, params, time_limit, drain, timeout):
        """Submits the job; follows it (state changes, output) until it ends. Returns
        (final fields, state log [(t, state, reason, restarts)], OutputWatch, t0)."""
        script = self.slurm_script(marker, time_limit)
        out = os.path.join(self.dir, f"slurm-{marker}.out")
        env = dict(self.c.slurm_env, **self.env(marker), **self.job_vars(marker, config,
                                                                         params, drain))
        t0 = time.time()
        r = subprocess.run(["sbatch", "--parsable", "-D", self.a.source, "-o", out, script],
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"sbatch failed: {r.stderr}")
        job = r.stdout.strip().split(";")[0]
        watch = OutputWatch(out)
        log, last, fields, nudged = [], None, {}, False
        self.first_end = None
        deadline = time.monotonic() + timeout
        while True:
            watch.poll()
            s = subprocess.run(["scontrol", "show", "job", "-o", job], env=self.c.slurm_env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True).stdout
            fields = dict(kv.split("=", 1) for kv in s.split() if "=" in kv)
            state = (fields.get("JobState", ""), fields.get("Reason", ""),
                     fields.get("Restarts", ""))
            if state != last:
                log.append((round(time.time() - t0, 1),) + state)
                last = state
            if state[0] == "RUNNING" and state[2] == "0" and self.first_end is None:
                self.first_end = fields.get("EndTime")
            if (drain and not nudged and not self.a.wait_begin_time and state[0] == "PENDING"
                    and state[1] == "BeginTime" and state[2] not in ("", "0")
                    and not self.c.leftovers(marker)):
                # Slurm's cred_expire hold of a requeued job (see the docstring), once
                # nothing of the first run is left (a launch before that can fail).
                time.sleep(1)
                subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now"],
                               env=self.c.slurm_env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT)
                nudged = True
                log.append((round(time.time() - t0, 1), "test: StartTime=now", "", ""))
            if state[0] in FINAL_SLURM_STATES:
                break
            if time.monotonic() > deadline:
                subprocess.run(["scancel", job], env=self.c.slurm_env)
                fields["JobState"] = "TIMEOUT(test)"
                break
            time.sleep(0.1)
        time.sleep(0.3)
        watch.poll()
        fields["_job"] = job
        return fields, log, watch, t0

    def run_slurm(self):
        marker = f"ddpc{uuid.uuid4().hex[:12]}"
        ref_params = os.path.join(self.dir, "reference-params.json")
        t0 = time.time()
        fields, log, watch, _ = self.slurm_job(marker, self.ref_config, ref_params,
                                               "00:05:00", drain=False, timeout=120)
        self.result["reference_run_s"] = round(time.time() - t0, 2)
        self.check(fields.get("JobState") == "COMPLETED" and fields.get("ExitCode") == "0:0",
                   f"reference job {fields['_job']}: {fields.get('JobState')} ExitCode="
                   f"{fields.get('ExitCode')} in {self.result['reference_run_s']} s, "
                   f"'done after {' '.join(watch.all('done'))} steps'")
        self.leftovers(marker, "reference")
        if self.failures:
            print(watch.text[-3000:])
            return
        ref_steps = watch.all("done")

        marker = f"ddpc{uuid.uuid4().hex[:12]}"
        params = os.path.join(self.dir, "resumed-params.json")
        t0 = time.time()
        limit = f"00:{TIME_LIMIT_S // 60:02d}:{TIME_LIMIT_S % 60:02d}"
        fields, log, watch, t_submit = self.slurm_job(marker, self.held_config, params, limit,
                                                      drain=True, timeout=self.a.job_timeout)
        total = time.time() - t0
        self.result["drained_job_total_s"] = round(total, 2)
        print("--- job states (s since submit, state, reason, restarts):")
        for entry in log:
            print("   ", *entry)
        first_end = None
        if self.first_end:
            first_end = time.mktime(time.strptime(self.first_end, "%Y-%m-%dT%H:%M:%S"))
        self.check_drained_run(watch, t_submit, first_end, ref_steps)
        self.check(fields.get("JobState") == "COMPLETED" and fields.get("ExitCode") == "0:0"
                   and fields.get("Restarts") == "1",
                   f"job {fields['_job']}: {fields.get('JobState')} ExitCode="
                   f"{fields.get('ExitCode')} Restarts={fields.get('Restarts')} (want COMPLETED "
                   f"0:0 after 1 requeue), {total:.1f} s from submit to end")
        requeued = [e[0] for e in log if e[1] == "PENDING" and e[3] == "1"]
        rerun = [e[0] for e in log if e[1] == "RUNNING" and e[3] == "1"]
        if requeued and rerun:
            self.result["requeue_to_rerun_s"] = round(rerun[0] - requeued[0], 1)
        self.check(bool(watch.all("requeue")),
                   "the script saw ddprun exit 75 and requeued the job (scontrol requeue)")
        self.leftovers(marker, "drained job")
        self.compare_params(ref_params, params)
        self.print_output(watch)

    # ------------------------------------------------------------------ Grid Engine
    def sge_script(self, marker, h_rt):
        with open(os.path.join(self.a.source, "scripts", "jobs", "abci-sge.sh")) as f:
            text = f.read()
        # rt_F is ABCI's resource type: the test asks for the parallel environment instead.
        text = re.sub(r"(?m)^#\$ -l rt_F=.*\n", "", text)
        text = re.sub(r"(?m)^#\$ -l h_rt=.*$", f"#$ -l h_rt={h_rt}", text)
        script = os.path.join(self.dir, f"job-{marker}.sh")
        with open(script, "w") as f:
            f.write(text)
        return script

    def sge_job(self, marker, config, params, h_rt, drain, timeout):
        script = self.sge_script(marker, h_rt)
        subnet = f"{self.c.subnet}.0/24"
        env = dict(self.c.sge_env, **self.env(marker), **self.job_vars(marker, config, params,
                                                                       drain),
                   MPIRUN_ARGS=(f"--allow-run-as-root --mca oob_tcp_if_include {subnet} "
                                f"--mca btl_tcp_if_include {subnet} --mca btl self,tcp "
                                "-x DDPC_MARK -x OMP_NUM_THREADS -x OPENBLAS_NUM_THREADS"))
        out = os.path.join(self.dir, f"sge-{marker}.out")
        t0 = time.time()
        r = self.c.sge_run(["qsub", "-terse", "-V", "-S", "/bin/bash", "-pe", "mpi",
                            str(self.a.n), "-o", out, "-j", "y", script], env=env,
                           cwd=self.a.source)
        if r.returncode != 0:
            raise RuntimeError(f"qsub failed: {r.stdout}{r.stderr}")
        job = r.stdout.strip().split(".")[0]
        watch = OutputWatch(out)
        log, last = [], None
        deadline = time.monotonic() + timeout
        gone = False
        while time.monotonic() < deadline:
            watch.poll()
            q = self.c.sge_run(["qstat"]).stdout
            line = [x.split() for x in q.splitlines() if x.split()[:1] == [job]]
            state = line[0][4] if line else None
            if state is None:
                gone = self.c.sge_run(["qstat", "-j", job]).returncode != 0
                if gone:
                    break
            if state != last:
                info = ""
                if state and "q" in state and last is not None:
                    j = self.c.sge_run(["qstat", "-j", job]).stdout
                    m = re.search(r"(?s)scheduling info:\s*(.*)", j)
                    info = " ".join(m.group(1).split())[:200] if m else ""
                log.append((round(time.time() - t0, 1), state, info))
                last = state
            time.sleep(0.2)
        if not gone:
            j = self.c.sge_run(["qstat", "-j", job]).stdout
            m = re.search(r"(?s)scheduling info:\s*(.*)", j)
            self.c.sge_run(["qdel", "-f", job])
            log.append((round(time.time() - t0, 1), "TIMEOUT(test): qdel -f",
                        "last scheduling info: " + (" ".join(m.group(1).split()) if m else "")))
        log.append((round(time.time() - t0, 1), "left qstat", ""))
        time.sleep(0.3)
        watch.poll()
        # qacct: one record per host and run (the master's and one per `qrsh -inherit`),
        # written in no fixed order and a little late: wait for all of them.
        records = []
        want = self.a.n * (2 if drain else 1)
        for _ in range(50):
            acct = self.c.sge_run(["qacct", "-j", job]).stdout
            records = [dict(re.findall(r"(?m)^(\w+)\s+(.*?)\s*$", rec))
                       for rec in re.split(r"(?m)^=+\s*$", acct) if "exit_status" in rec]
            if len(records) >= want or not gone:
                break
            time.sleep(0.2)
        return job, gone, log, watch, records, t0

    def run_sge(self):
        marker = f"ddpc{uuid.uuid4().hex[:12]}"
        ref_params = os.path.join(self.dir, "reference-params.json")
        job, gone, log, watch, records, t0 = self.sge_job(marker, self.ref_config, ref_params,
                                                          "0:5:0", drain=False, timeout=150)
        self.result["reference_run_s"] = round(time.time() - t0, 2)
        codes = [rec.get("exit_status") for rec in records]
        self.check(gone and codes and all(c == "0" for c in codes) and watch.all("done"),
                   f"reference job {job}: qacct exit_status {codes} in "
                   f"{self.result['reference_run_s']} s, "
                   f"'done after {' '.join(watch.all('done'))} steps'")
        self.leftovers(marker, "reference")
        if self.failures:
            print(watch.text[-3000:])
            return
        ref_steps = watch.all("done")

        marker = f"ddpc{uuid.uuid4().hex[:12]}"
        params = os.path.join(self.dir, "resumed-params.json")
        h_rt = f"0:{TIME_LIMIT_S // 60}:{TIME_LIMIT_S % 60}"
        job, gone, log, watch, records, t_submit = self.sge_job(
            marker, self.held_config, params, h_rt, drain=True, timeout=self.a.job_timeout)
        total = time.time() - t_submit
        self.result["drained_job_total_s"] = round(total, 2)
        print("--- job states (s since submit, qstat state, scheduling info):")
        for entry in log:
            print("   ", *entry)
        # The first run's end as ddprun computed it (qstat start + h_rt): the drain line.
        self.check_drained_run(watch, t_submit, None, ref_steps)
        # One record per host and run: the master's (the script's exit status) and one per
        # `qrsh -inherit` (that node's ddprun: 75 when drained).
        summary = [(rec.get("hostname"), rec.get("exit_status"), rec.get("failed"))
                   for rec in records]
        print(f"--- qacct records of job {job} (host, exit_status, failed): {summary}")
        statuses = [rec.get("exit_status") for rec in records]
        self.result["qacct_exit_statuses"] = statuses
        self.check(gone and "99" in statuses and "0" in statuses
                   and set(statuses) <= {"0", "75", "99"}
                   and any("rescheduling" in rec.get("failed", "") for rec in records),
                   f"job {job}: a run exited 99 (failed 25: rescheduling), Grid Engine ran it "
                   f"again and it ended 0; {total:.1f} s from submit to end")
        rq = [e[0] for e in log if e[1] and "R" in e[1] and "q" in e[1]]
        rr = [e[0] for e in log if e[1] and e[1].startswith("R") and "r" in e[1]]
        if rq and rr:
            self.result["reschedule_to_rerun_s"] = round(rr[0] - rq[0], 1)
        self.check(bool(watch.all("requeue")),
                   "the script saw mpirun exit 75 and exited 99 to be rescheduled")
        self.leftovers(marker, "drained job")
        self.compare_params(ref_params, params)
        self.print_output(watch)

    # ------------------------------------------------------------------ common checks
    def check_drained_run(self, watch, t_submit, sched_end, ref_steps):
        """The first run drained at the right time and step, the second resumed there."""
        drains = watch.all("drain_line")
        if not self.check(bool(drains), "ddprun printed 'the job ends at ... (SOURCE); workers "
                          f"get SIGUSR1 at ...': {drains[:1]}"):
            return
        end_text, source, sig, drain_at, before = drains[0]
        end = time.mktime(time.strptime(end_text, "%Y-%m-%d %H:%M:%S"))
        self.result["job_end_source"] = source
        # The first run starts soon after the submission; the end is in whole seconds (and
        # Grid Engine's start time may be the submission's second). Where the scheduler's own
        # end time is known, that is the exact check below, and the start's delay (a busy
        # scheduler, a loaded machine) only needs to be sane here.
        late = 5 if sched_end is None else 30
        self.check(-1.5 <= end - t_submit - TIME_LIMIT_S <= late,
                   f"the job's end ({source}) is {end - t_submit:.1f} s after the submission "
                   f"(time limit {TIME_LIMIT_S} s, start delay allowed {late} s)")
        # ddprun's own arithmetic, exact: the signal time it announces is the end minus the
        # drain time.
        self.check(drain_at == time.strftime("%H:%M:%S", time.localtime(end - DRAIN_BEFORE_S)),
                   f"the drain signal at {drain_at}, {DRAIN_BEFORE_S} s before the end {end_text}")
        halved = "the notice comes when half of that has passed" in watch.text
        self.check(sig == "SIGUSR1" and before == str(DRAIN_BEFORE_S) and not halved,
                   f"drain signal {sig}, {before} s before the end (want SIGUSR1, "
                   f"{DRAIN_BEFORE_S})" + (": ddprun started too late for it" if halved else ""))
        if sched_end is not None:
            self.check(abs(end - sched_end) <= 1,
                       f"ddprun's end {end_text} ({source}) vs the scheduler's EndTime "
                       f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(sched_end))}")
        holders = {rank for rank, step in watch.all("holding") if step == str(HOLD_AFTER_STEP)}
        self.check(holders == {str(r) for r in range(self.a.n)},
                   f"ranks holding after step {HOLD_AFTER_STEP} before the notice: "
                   f"{sorted(holders)}")
        t_stop = watch.seen.get("stopping")
        if not self.check(t_stop is not None, "the first run stopped on a preemption notice"):
            return
        stop_step, notice = watch.all("stopping")[0]
        margin = end - t_stop
        self.result.update(notice_seen_after_submit_s=round(t_stop - t_submit, 1),
                           notice_seen_before_end_s=round(margin, 1))
        # Seen by polling the output (0.1 s) after one more training step: a little under
        # DRAIN_BEFORE_S before the end, never after the drain time plus a few seconds.
        self.check(notice == "SIGUSR1" and DRAIN_BEFORE_S - 6 <= margin <= DRAIN_BEFORE_S + 1,
                   f"notice {notice} seen {t_stop - t_submit:.1f} s after submission, "
                   f"{margin:.1f} s before the job's end (drain set {DRAIN_BEFORE_S} s before)")
        preempted = watch.all("preempted")
        resumed = watch.all("resuming")
        done = watch.all("done")
        self.result.update(preempted_step=int(preempted[0]) if preempted else None,
                           resumed_step=int(resumed[0]) if resumed else None,
                           final_step=int(done[-1]) if done else None)
        self.check(len(preempted) == 1 and int(preempted[0]) > HOLD_AFTER_STEP
                   and preempted[0] == stop_step,
                   f"first run: 'preempted after step {preempted}' (a checkpoint, exit 75), "
                   f"after the hold at step {HOLD_AFTER_STEP}")
        self.check(resumed == preempted[:1] and len(resumed) == 1,
                   f"second run: 'resuming from ... at step {resumed}' (want {preempted[:1]})")
        self.check(done == ref_steps and len(done) == 1,
                   f"second run: 'done after {done} steps' (reference: {ref_steps})")

    def print_output(self, watch):
        """The drained job's output: all of it on failure, else its key lines."""
        lines = watch.text.replace("\r", "").replace("\x1b[K", "").splitlines()
        if self.failures:
            print("--- job output (tail):\n" + "\n".join(lines[-80:]))
            return
        keep = re.compile(r"^(ddprun:|job:|srun:|slurmstepd|mpirun )|ddp-train: (?!toy on)")
        print("--- job output (ddprun, ddp-train and script lines):")
        for line in lines:
            if keep.search(line) and "  rank  local" not in line:
                print("   ", line)

    def compare_params(self, ref_path, path):
        try:
            with open(ref_path, "rb") as f:
                ref_bytes = f.read()
            with open(path, "rb") as f:
                got_bytes = f.read()
        except OSError as e:
            self.fail(f"final parameters: {e}")
            return
        ref, got = json.loads(ref_bytes), json.loads(got_bytes)
        diff = 0.0
        same_shape = (ref["step"] == got["step"] and ref["world_size"] == got["world_size"]
                      and ref["params"].keys() == got["params"].keys())
        if same_shape:
            for name, p in ref["params"].items():
                q = got["params"][name]
                if p["shape"] != q["shape"] or len(p["values"]) != len(q["values"]):
                    same_shape = False
                    break
                diff = max([diff] + [abs(x - y) for x, y in zip(p["values"], q["values"])])
        self.result["params_max_abs_diff"] = diff if same_shape else None
        self.result["params_byte_identical"] = ref_bytes == got_bytes
        self.check(same_shape and diff == 0.0,
                   f"final parameters of the drained and resumed job equal the reference's "
                   f"(step {got.get('step')} vs {ref.get('step')}, max abs diff {diff}, "
                   f"files byte-identical: {ref_bytes == got_bytes})")

    def leftovers(self, marker, what):
        deadline = time.monotonic() + 10
        left = self.c.leftovers(marker)
        while left and time.monotonic() < deadline:
            time.sleep(0.1)
            left = self.c.leftovers(marker)
        if left:
            self.fail(f"{what}: processes left after the job: {left}")
            kill_and_wait([pid for pid, _ in left])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", required=True, choices=["slurm", "slurm_head", "sge"])
    ap.add_argument("-n", type=int, default=2, help="nodes of the job (1 worker each)")
    ap.add_argument("--ddprun", required=True)
    ap.add_argument("--ddp-train", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--source", required=True, help="repository root (job scripts)")
    ap.add_argument("--job-timeout", type=float, default=200,
                    help="seconds the drained job may take, both runs")
    ap.add_argument("--wait-begin-time", action="store_true",
                    help="Slurm: let a requeued job wait out its BeginTime (cred_expire)")
    ap.add_argument("--sge-spare-nodes", type=int, default=1,
                    help="Grid Engine: nodes beyond the job's, for the rescheduled run")
    ap.add_argument("--keep", action="store_true", help="keep the run folder")
    a = ap.parse_args()
    for p in ("ddprun", "ddp_train", "config", "source"):
        setattr(a, p, os.path.abspath(getattr(a, p)))
    try:
        Cluster.check_possible()
    except SkipTest as e:
        return skip_exit_code(e)
    r = subprocess.run([a.ddprun, "--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    if "--drain-before" not in r.stdout:
        print(f"FAIL: {a.ddprun} has no --drain-before")
        return 1
    t_start = time.time()
    nodes = a.n + (a.sge_spare_nodes if a.case == "sge" else 0)
    cluster = Cluster(nodes, keep=a.keep)
    test = None
    try:
        cluster.start()
        if a.case in ("slurm", "slurm_head"):
            cluster.start_slurm()
        else:
            cluster.start_sge()
        test = Test(a, cluster)
        test.result["cluster_nodes"] = nodes
        getattr(test, "run_slurm" if a.case == "slurm_head" else f"run_{a.case}")()
    except SkipTest as e:
        cluster.stop()
        return skip_exit_code(e)
    except Exception as e:  # noqa: BLE001: reported as a failure, after teardown
        if test is None:
            cluster.stop()
            raise
        test.fail(f"{type(e).__name__}: {e}")
    finally:
        cluster.stop()
    result = test.result
    result.update({k: round(v, 2) for k, v in cluster.timings.items()})
    result["total_s"] = round(time.time() - t_start, 1)
    result["ok"] = not test.failures
    print("RESULT " + json.dumps(result))
    return 1 if test.failures else 0


if __name__ == "__main__":
    sys.exit(main())
