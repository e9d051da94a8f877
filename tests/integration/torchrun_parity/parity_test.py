#!/usr/bin/python3
"""torchrun parity (issue 17): real torchrun command lines, run under torchrun and under ddprun.

For each row of corpus.json the line is made runnable on this machine (one node, at most two
processes, ports replaced by one free port, the training script or module replaced by
dump_worker.py at the same path), then run twice with the same arguments after the launcher
name: once as Debian's torchrun (torch 1.13.1, through tests/support/torchrun_wrapper.py) and once as
ddprun. Every worker writes what it saw (argv, interpreter, buffering, environment) and the two
runs are compared rank by rank, variable by variable.

Lines that torchrun 1.13 cannot parse (hyphenated spellings, --local-ranks-filter, --local-addr)
run under 1.13 with underscores and without the 2.x-only options; ddprun gets them as written.

Not compared, as per-run values: MASTER_PORT unless the line fixes it (static backend with
--master_port or an endpoint port), TORCHELASTIC_RUN_ID unless --rdzv_id is given (and no
--standalone), TORCHELASTIC_ERROR_FILE and other paths under the temp folder, ddprun's own
DDPRUN_* variables, the folder of ddprun's stack hook first on PYTHONPATH, and the
NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME ddprun adds on a multi-homed host. TORCHELASTIC_USE_AGENT_STORE is torchrun's alone: ddprun must not set it.
MASTER_ADDR passes when equal or when both name this machine (torchrun's c10d gives the FQDN).
NCCL_ASYNC_ERROR_HANDLING (1.13) and TORCH_NCCL_ASYNC_ERROR_HANDLING (2.x) count as one.

Both launchers get the same parent environment: PATH starting with the Python's folder,
PYTHON_EXEC set, launcher and scheduler variables (PET_*, SLURM_*, MASTER_*, RANK, ...) and
PYTHONUNBUFFERED removed; TMPDIR a folder of the row's; PET_MONITOR_INTERVAL=0.1 (torchrun 1.13 otherwise sleeps 5 s per
run) and PET_MASTER_PORT=<the row's free port> (torchrun's static default is 29500) are
torchrun's option defaults from the environment, which ddprun ignores.

Exit status: 0 all rows pass, 1 a row fails (or the test cannot run under CI=true),
77 skipped (no torch for /usr/bin/python3 and not in CI), 2 usage.
Standard library only; run with /usr/bin/python3.
"""
import argparse
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
SKIP = 77

# torchrun's options: canonical name -> takes a value. Spellings accepted: --name, --name-with-
# hyphens (2.x) and the short forms below; values as --opt=value, --opt value or -rVALUE.
OPTIONS = {
    "nnodes": True, "nproc_per_node": True, "rdzv_backend": True, "rdzv_endpoint": True,
    "rdzv_id": True, "rdzv_conf": True, "standalone": False, "max_restarts": True,
    "monitor_interval": True, "start_method": True, "role": True, "module": False,
    "no_python": False, "run_path": False, "log_dir": True, "redirects": True, "tee": True,
    "node_rank": True, "master_addr": True, "master_port": True,
    # torch 2.x only:
    "local_addr": True, "local_ranks_filter": True, "logs_specs": True,
}
SHORT = {"-m": "module", "-r": "redirects", "-t": "tee"}
ONLY_2X = {"local_addr", "local_ranks_filter", "logs_specs"}
LAUNCHER_PREFIXES = (["srun", "torchrun"], ["torchrun"],
                     ["python", "-m", "torch.distributed.run"],
                     ["python3", "-m", "torch.distributed.run"])
# Parent-environment variables that would change what either launcher does.
SCRUB_PREFIXES = ("PET_", "TORCHELASTIC_", "DDPRUN_", "SLURM_", "OMPI_", "PMI_", "PMIX_",
                  "PBS_", "LSB_", "LSF_", "SGE_", "FLUX_")
SCRUB_NAMES = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
               "MASTER_ADDR", "MASTER_PORT", "OMP_NUM_THREADS", "PYTHONUNBUFFERED",
               "PE_HOSTFILE", "NCCL_ASYNC_ERROR_HANDLING", "TORCH_NCCL_ASYNC_ERROR_HANDLING",
               "ROLE_NAME", "PYTHON_EXEC", "CUDA_VISIBLE_DEVICES"}
NCCL_ALIASES = ("NCCL_ASYNC_ERROR_HANDLING", "TORCH_NCCL_ASYNC_ERROR_HANDLING")


class Opt:
    """One launcher option as written: how it was spelled, its value, and the form."""

    def __init__(self, name, spelling, value, form):
        self.name, self.spelling, self.value, self.form = name, spelling, value, form

    def render(self, spelling=None):
        spelling = spelling or self.spelling
        if self.value is None:
            return [spelling]
        if self.form == "=":
            return [spelling + "=" + self.value]
        if self.form == "glued":
            return [spelling + self.value]
        return [spelling, self.value]


def canonical(token):
    """'--nproc-per-node' -> 'nproc_per_node'; None when not a torchrun option."""
    if token in SHORT:
        return SHORT[token]
    if token.startswith("--"):
        name = token[2:].replace("-", "_")
        if name == "module":
            return "module"
        return name if name in OPTIONS else None
    return None


def parse_command(command):
    """Split a corpus command into (env assignments, options, program words)."""
    words = shlex.split(command)
    env = {}
    while words and "=" in words[0] and not words[0].startswith("-"):
        key, _, value = words.pop(0).partition("=")
        env[key] = value
    for prefix in LAUNCHER_PREFIXES:
        if words[:len(prefix)] == prefix:
            words = words[len(prefix):]
            break
    else:
        raise ValueError("no torchrun in: " + command)
    opts, i = [], 0
    while i < len(words):
        word = words[i]
        if not word.startswith("-") or word == "--":
            break
        head, eq, tail = word.partition("=")
        name = canonical(head)
        glued = None
        if name is None and word[:2] in SHORT and len(word) > 2:
            name, head, glued = SHORT[word[:2]], word[:2], word[2:]
        if name is None:
            raise ValueError("unknown torchrun option %r in: %s" % (word, command))
        if not OPTIONS[name]:
            opts.append(Opt(name, head, None, "flag"))
            i += 1
        elif glued is not None:
            opts.append(Opt(name, head, glued, "glued"))
            i += 1
        elif eq:
            opts.append(Opt(name, head, tail, "="))
            i += 1
        else:
            opts.append(Opt(name, head, words[i + 1], "space"))
            i += 2
    program = words[i:]
    if program and program[0] == "--":
        program = program[1:]
    if not program:
        raise ValueError("no training script in: " + command)
    return env, opts, program


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def is_local_host(host):
    return host in ("localhost", "::1") or host.startswith("127.")


class Row:
    """One corpus row made runnable here."""

    def __init__(self, spec, workdir, port, max_nproc):
        self.spec = spec
        self.id = spec["id"]
        self.dir = os.path.join(workdir, self.id)
        self.port = port
        self.env, opts, program = parse_command(spec["command"])
        names = {o.name for o in opts}
        self.module = "module" in names
        self.no_python = "no_python" in names
        self.standalone = "standalone" in names
        backend = next((o.value for o in opts if o.name == "rdzv_backend"), "static")
        self.static = backend == "static" and not self.standalone
        self.run_id_given = "rdzv_id" in names and not self.standalone
        self.port_fixed = False
        for o in opts:
            self._localise(o, max_nproc)
        self.opts = opts
        self.program = self._place_program(program)

    def _localise(self, o, max_nproc):
        if o.name == "nnodes":
            o.value = "1:1" if ":" in o.value else "1"
        elif o.name == "node_rank":
            o.value = "0"
        elif o.name == "nproc_per_node":
            o.value = str(min(int(o.value), max_nproc)) if o.value.isdigit() else str(max_nproc)
        elif o.name in ("master_addr", "local_addr"):
            if not is_local_host(o.value):
                o.value = "127.0.0.1"
        elif o.name == "master_port":
            o.value = str(self.port)
            self.port_fixed = self.port_fixed or self.static
        elif o.name == "rdzv_endpoint":
            host, sep, port = o.value.rpartition(":")
            if not sep:
                host, port = o.value, ""
            host = host if is_local_host(host) else "127.0.0.1"
            if port != "0":
                port = str(self.port)
                self.port_fixed = self.port_fixed or self.static
            o.value = host + ":" + port
        elif o.name == "log_dir" and os.path.isabs(o.value):
            o.value = os.path.join(self.dir, o.value.lstrip("/"))

    def _place_program(self, program):
        """Put dump_worker.py where the line expects its script or module."""
        program = list(program)
        target = program[0]
        if self.module:
            parts = target.split(".")
            for k in range(1, len(parts)):
                pkg = os.path.join(self.dir, *parts[:k])
                os.makedirs(pkg, exist_ok=True)
                open(os.path.join(pkg, "__init__.py"), "a").close()
            path = os.path.join(self.dir, *parts) + ".py"
        elif os.path.isabs(target):
            path = os.path.join(self.dir, target.lstrip("/"))
            program[0] = path
        else:
            path = os.path.join(self.dir, target)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        shutil.copyfile(os.path.join(HERE, "dump_worker.py"), path)
        os.chmod(path, 0o755)
        return program

    def launcher_args(self, for_torch_113):
        """The arguments after the launcher's name."""
        args = []
        for o in self.opts:
            if for_torch_113:
                if o.name in ONLY_2X:
                    continue
                spelling = o.spelling if not o.spelling.startswith("--") else "--" + o.name
                args += o.render(spelling)
            else:
                args += o.render()
        # A '--' between the options and the script is torchrun's own separator; it is not
        # passed on. One after a module or script belongs to the program and stays.
        return args + self.program

    def dropped_for_113(self):
        """Spellings the 1.13 run leaves out (2.x-only options) or respells (hyphenated)."""
        return [o.spelling for o in self.opts
                if o.name in ONLY_2X or (o.spelling.startswith("--") and o.name != "module"
                                         and o.spelling != "--" + o.name)]


def descendants(pid):
    """All live descendants of pid (from /proc), children first."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as f:
                stat = f.read()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def kill_tree(proc):
    """SIGTERM then SIGKILL the launcher's process group and every descendant it left."""
    victims = descendants(proc.pid)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for target in [proc.pid] + victims:
            try:
                os.killpg(target, sig) if target == proc.pid else os.kill(target, sig)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            proc.wait(timeout=3)
        except subprocess.TimeoutExpired:
            pass
        victims = [v for v in victims if os.path.exists("/proc/%d" % v)]
        if proc.poll() is not None and not victims:
            return


def run_launcher(argv, cwd, env, log_path, timeout):
    """Run one launcher; returns (exit code or 'timeout', seconds)."""
    start = time.monotonic()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            rc = "timeout"
        # Workers in their own process groups are not in the launcher's: end whatever is left.
        if proc.poll() is None or descendants(proc.pid):
            kill_tree(proc)
    return rc, time.monotonic() - start


def read_dumps(dump_dir):
    dumps = {}
    for name in sorted(os.listdir(dump_dir)):
        if name.startswith("rank-") and name.endswith(".json"):
            with open(os.path.join(dump_dir, name)) as f:
                dumps[name[5:-5]] = json.load(f)
    return dumps


def local_names():
    names = {"localhost", "::1"}
    for name in (socket.gethostname(), socket.getfqdn()):
        names.add(name)
        try:
            host, aliases, addrs = socket.gethostbyname_ex(name)
            names.update([host] + aliases + addrs)
        except OSError:
            pass
    return names


def env_diff(env, parent):
    """Variables new in the worker or with a changed value."""
    return {k: v for k, v in env.items() if parent.get(k) != v}


def compare(row, ref, got, parent, ref_name, got_name, local):
    """List of 'what: ref=... got=...' lines for one rank."""
    problems = []
    for field in ("argv", "executable", "unbuffered", "main_module", "cwd"):
        if ref[field] != got[field]:
            problems.append("%s: %s=%r %s=%r" % (field, ref_name, ref[field], got_name, got[field]))
    a, b = env_diff(ref["env"], parent), env_diff(got["env"], parent)
    for d in (a, b):
        values = [d.pop(k) for k in NCCL_ALIASES if k in d]
        if values:
            d["(TORCH_)NCCL_ASYNC_ERROR_HANDLING"] = "/".join(sorted(set(values)))
    tmp = os.path.dirname(os.path.dirname(parent["TMPDIR"]))  # the whole work folder
    for key in sorted(set(a) | set(b)):
        va, vb = a.get(key), b.get(key)
        if key.startswith("DDPRUN_") or key in ("TORCHELASTIC_ERROR_FILE", "PARITY_DUMP_DIR", "_"):
            continue
        # ddprun's stack hook (docs/hangs.md): its folder first, the rest as the parent had it.
        if key == "PYTHONPATH" and got_name == "ddprun" and vb is not None:
            first, _, rest = vb.partition(":")
            if re.search(r"/attempt_[0-9]+/python$", first):
                vb = rest or None
            if va == vb:
                continue
        # ddprun's addition on a multi-homed host (docs/environment.md, "Network interface").
        if key in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME") and got_name == "ddprun" and va is None:
            continue
        if key == "TORCHELASTIC_USE_AGENT_STORE":
            if got_name == "ddprun" and vb is not None:
                problems.append("TORCHELASTIC_USE_AGENT_STORE: ddprun sets it (%r); it has no "
                                "agent store and must not" % vb)
            continue
        if key == "MASTER_PORT" and not row.port_fixed:
            if va is None or vb is None:
                problems.append("MASTER_PORT: %s=%r %s=%r" % (ref_name, va, got_name, vb))
            continue
        if key == "TORCHELASTIC_RUN_ID" and not row.run_id_given:
            if (va is None) != (vb is None):
                problems.append("TORCHELASTIC_RUN_ID: %s=%r %s=%r" % (ref_name, va, got_name, vb))
            continue
        if key == "MASTER_ADDR" and va is not None and vb is not None and (
                va == vb or (va in local or va.startswith("127.")) and
                (vb in local or vb.startswith("127."))):
            continue
        if va is not None and vb is not None and (va.startswith(tmp + "/") or
                                                  vb.startswith(tmp + "/")):
            continue
        if va != vb:
            problems.append("%s: %s=%s %s=%s" % (key, ref_name, "(unset)" if va is None else
                                                 repr(va), got_name,
                                                 "(unset)" if vb is None else repr(vb)))
    return problems


def base_environment(python):
    env = {k: v for k, v in os.environ.items()
           if k not in SCRUB_NAMES and not k.startswith(SCRUB_PREFIXES)}
    pydir = os.path.dirname(python)
    env["PATH"] = pydir + os.pathsep + env.get("PATH", "/usr/bin:/bin")
    env["PYTHON_EXEC"] = python
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    # torchrun 1.13 reads PET_<OPTION> as the option's default: a short monitor interval
    # (the default 5 s costs 5 s a run); the line's own option still wins.
    env["PET_MONITOR_INTERVAL"] = "0.1"
    return env


def run_row(spec, args, workdir, local):
    port = free_port()
    row = Row(spec, workdir, port, spec.get("nproc_here", args.max_nproc))
    parent = base_environment(args.python)
    parent.update(row.env)
    # torchrun's static default port is 29500 when the line gives none; give it a free one
    # instead (PET_MASTER_PORT is torchrun's own default-from-environment; ddprun ignores it).
    parent["PET_MASTER_PORT"] = str(port)
    # torchrun's default log folders (and anything else either launcher puts in the temp
    # folder) go under the row's folder, which is removed at the end.
    parent["TMPDIR"] = os.path.join(row.dir, "tmp")
    os.makedirs(parent["TMPDIR"])
    launchers = [("torchrun", [args.python, args.torchrun_wrapper] + row.launcher_args(True))]
    if args.self_check:
        launchers.append(("torchrun-again", [args.python, args.torchrun_wrapper] +
                          row.launcher_args(True)))
    else:
        launchers.append(("ddprun", [args.ddprun] + row.launcher_args(False)))
    results = {}
    for name, argv in launchers:
        dump_dir = os.path.join(row.dir, "dump-" + name)
        os.makedirs(dump_dir)
        env = dict(parent, PARITY_DUMP_DIR=dump_dir)
        log = os.path.join(row.dir, name + ".log")
        rc, secs = run_launcher(argv, row.dir, env, log, args.timeout)
        results[name] = (argv, rc, secs, log, read_dumps(dump_dir))
    (ref_name, got_name) = [n for n, _ in launchers]
    ref, got = results[ref_name], results[got_name]
    problems = []
    marked = set(spec.get("torch_2x", {}).get("options", []))
    if marked != set(row.dropped_for_113()):
        problems.append("corpus: torch_2x.options %s, but the line has %s" % (
            sorted(marked), sorted(row.dropped_for_113())))
    for name, (argv, rc, secs, log, dumps) in results.items():
        if rc != 0:
            with open(log, errors="replace") as f:
                tail = [l.rstrip() for l in f.readlines() if l.strip()][-3:]
            problems.append("%s exited %s: %s" % (name, rc, " | ".join(tail)))
    for rank in sorted(set(ref[4]) | set(got[4]), key=lambda r: (len(r), r)):
        if rank not in ref[4] or rank not in got[4]:
            problems.append("rank %s: only %s started it" % (rank, ref_name if rank in ref[4]
                                                            else got_name))
            continue
        for p in compare(row, ref[4][rank], got[4][rank], parent, ref_name, got_name, local):
            problems.append("rank %s %s" % (rank, p))
    if not ref[4] and not problems:
        problems.append("no worker wrote anything")
    return row, results, problems


def torch_available(python):
    try:
        return subprocess.run([python, "-c", "import torch.distributed.run"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ddprun", default=os.path.join(REPO, "build", "bin", "ddprun"))
    ap.add_argument("--python", default="/usr/bin/python3",
                    help="Python with torch 1.13 for torchrun and for the workers")
    ap.add_argument("--torchrun-wrapper",
                    default=os.path.join(REPO, "tests", "support", "torchrun_wrapper.py"))
    ap.add_argument("--corpus", default=os.path.join(HERE, "corpus.json"))
    ap.add_argument("--only", nargs="*", default=[], help="row ids to run")
    ap.add_argument("--self-check", action="store_true",
                    help="compare torchrun with itself (checks the harness, not ddprun)")
    ap.add_argument("--timeout", type=float, default=60, help="seconds per launcher run")
    ap.add_argument("--max-nproc", type=int, default=2)
    ap.add_argument("-j", "--jobs", type=int, default=2, help="rows run at the same time")
    ap.add_argument("--dry-run", action="store_true",
                    help="print each row's two command lines; run nothing")
    ap.add_argument("--keep", action="store_true", help="keep the work folder and print it")
    ap.add_argument("-v", "--verbose", action="store_true", help="print the commands run")
    args = ap.parse_args()
    in_ci = os.environ.get("CI") == "true"

    if not torch_available(args.python):
        if in_ci:
            print("FAIL: cannot run, and CI=true: %s has no torch (python3-torch)" % args.python)
            return 1
        print("SKIP: %s has no torch (python3-torch)" % args.python)
        return SKIP
    if not args.self_check and not os.access(args.ddprun, os.X_OK):
        print("FAIL: no ddprun at %s" % args.ddprun)
        return 1

    with open(args.corpus) as f:
        rows = json.load(f)["rows"]
    if args.only:
        unknown = set(args.only) - {r["id"] for r in rows}
        if unknown:
            print("unknown row ids: " + ", ".join(sorted(unknown)))
            return 2
        rows = [r for r in rows if r["id"] in args.only]

    workdir = tempfile.mkdtemp(prefix="torchrun-parity-")
    if args.dry_run:
        for spec in rows:
            row = Row(spec, workdir, 12345, spec.get("nproc_here", args.max_nproc))
            print(spec["id"])
            print("    torchrun: " + shlex.join(row.launcher_args(True)))
            print("    ddprun:   " + shlex.join(row.launcher_args(False)))
        shutil.rmtree(workdir, ignore_errors=True)
        return 0
    local = local_names()
    failed, start = [], time.monotonic()
    # Rows run in parallel lanes, each lane one row at a time. torchrun 1.13's --standalone
    # always puts its rendezvous store on localhost:29400, so those rows share one lane.
    lanes = [[] for _ in range(max(1, args.jobs))]
    for spec in rows:
        if "--standalone" in spec["command"]:
            lanes[0].append(spec)
        else:
            min(lanes, key=len).append(spec)
    outcome = {}
    done = threading.Condition()

    def run_lane(lane):
        for spec in lane:
            try:
                result = run_row(spec, args, workdir, local)
            except Exception as e:  # a harness bug: report it on the row, keep going
                result = (None, {}, ["harness error: %r" % e])
            with done:
                outcome[spec["id"]] = result
                done.notify_all()

    threads = [threading.Thread(target=run_lane, args=(lane,), daemon=True) for lane in lanes]
    try:
        for t in threads:
            t.start()
        for spec in rows:
            with done:
                while spec["id"] not in outcome:
                    done.wait()
                row, results, problems = outcome[spec["id"]]
            times = " ".join("%s %.1fs" % (n, r[2]) for n, r in results.items())
            verdict = "FAIL" if problems else "PASS"
            note = ""
            if row is not None and row.dropped_for_113():
                note = " [1.13 run without/respelled: %s]" % " ".join(row.dropped_for_113())
            print("%s %s (%s)%s" % (verdict, spec["id"], times, note))
            if args.verbose or problems:
                for name, r in results.items():
                    print("    %s: %s" % (name, shlex.join(r[0])))
            for p in problems:
                print("    " + p)
            if problems:
                failed.append(spec["id"])
            sys.stdout.flush()
        for t in threads:
            t.join()
    finally:
        if args.keep:
            print("work folder kept: " + workdir)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    print("torchrun parity: %d passed, %d failed (%.0f s)%s" % (
        len(rows) - len(failed), len(failed), time.monotonic() - start,
        "; failed: " + ", ".join(failed) if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
