#!/usr/bin/python3
"""Scale: the head ddprun starting agents on N simulated nodes (the tests/simcluster package:
network namespaces with sshd, and Slurm), and --dry-run plans for 1,024 and 16,384 nodes.

For each N and launcher: wall time from the head's start until every worker has started
(each worker records its start time in the shared /tmp), the whole run (workers exit at
once), and the head's peak RSS. A parallel start shows as a time that grows much less than
N times the one-node cost. Root only (namespaces).

The dry runs (text and JSON, medians of --dry-run-reps runs) need no root:
--dry-run-only runs just them.

Usage: bench/scale.py [--nodes 2 4 8 16] [--reps 3] [--dry-run-reps 5]
                       [--dry-run-only] [--out bench/results/scale.json]
"""
import argparse
import glob
import json
import os
import platform
import statistics
import subprocess
import tempfile
import time

from on_nodes import Cluster, SkipTest, DDPRUN, ROOT


def start_times(cluster, argv, env, stamp_dir):
    for old in glob.glob(os.path.join(stamp_dir, "started.*")):
        os.unlink(old)
    worker = ["/bin/sh", "-c", f'date +%s.%N > {stamp_dir}/started.$RANK']
    t0 = time.time()
    r = cluster.run(cluster.nodes[0], ["/usr/bin/time", "-f", "RSS %M"] + argv + ["--"] + worker,
                    env=env, cwd=ROOT, timeout=300)
    total = time.time() - t0
    if r.returncode != 0:
        raise RuntimeError(f"{argv}: exit {r.returncode}\n{r.stdout}\n{r.stderr}")
    stamps = [float(open(f).read()) for f in glob.glob(os.path.join(stamp_dir, "started.*"))]
    rss = int(r.stderr.strip().splitlines()[-1].split()[-1])
    return {"first_started_s": min(stamps) - t0, "all_started_s": max(stamps) - t0,
            "total_s": total, "head_rss_mb": rss / 1024.0, "workers": len(stamps)}


def summary(runs, key):
    values = [r[key] for r in runs]
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def dry_run(nodes, fmt, reps):
    """Median wall time and peak RSS of `reps` dry runs printing the plan (to /dev/null)."""
    with tempfile.NamedTemporaryFile("w", suffix=".hosts") as hosts:
        hosts.write("".join(f"node{i:05d} slots=8\n" for i in range(nodes)))
        hosts.flush()
        runs = []
        for _ in range(reps):
            r = subprocess.run(["/usr/bin/time", "-f", "%e %M", DDPRUN, "--dry-run", "--format",
                                fmt, "--hostfile", hosts.name, "--node-rank", "0",
                                "--master-addr", "10.0.0.1", "--master-port", "29500",
                                "--nproc-per-node", "8", "true"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               check=True)
            seconds, rss = r.stderr.strip().splitlines()[-1].split()
            runs.append({"seconds": float(seconds), "rss_mb": int(rss) / 1024.0})
        return {"nodes": nodes, "ranks": nodes * 8, "format": fmt, "reps": reps,
                "seconds": statistics.median(r["seconds"] for r in runs),
                "rss_mb": statistics.median(r["rss_mb"] for r in runs),
                "seconds_max": max(r["seconds"] for r in runs)}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, nargs="+", default=[2, 4, 8, 16, 32])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--launchers", nargs="+", default=["ssh", "ssh_tree4", "srun"])
    parser.add_argument("--dry-run-reps", type=int, default=5)
    parser.add_argument("--dry-run-only", action="store_true",
                        help="only the --dry-run plans (no root needed)")
    parser.add_argument("--out", default="bench/results/scale.json")
    args = parser.parse_args()
    result = {"benchmark": "scale", "date": time.strftime("%Y-%m-%d"),
              "machine": platform.node(), "cpus": os.cpu_count(), "reps": args.reps,
              "dry_run": [dry_run(n, fmt, args.dry_run_reps)
                          for n in (1024, 16384) for fmt in ("text", "json")],
              "launch": []}
    for row in result["dry_run"]:
        print(f"dry run {row['nodes']:6d} nodes, {row['format']:4s}: {row['seconds']:.2f} s "
              f"{row['rss_mb']:.1f} MB (median of {row['reps']})")
    for n in [] if args.dry_run_only else args.nodes:
        try:
            with Cluster(n) as cluster:
                cluster.start_sshd()
                cluster.start_slurm()
                stamps = os.path.join(cluster.dir, "stamps")
                os.makedirs(stamps)
                env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
                launchers = {
                    "ssh": (["--launcher", "ssh", "--ssh-config", cluster.ssh_config], env),
                    # Agents start agents: at most 4 ssh starts per node.
                    "ssh_tree4": (["--launcher", "ssh", "--ssh-config", cluster.ssh_config,
                                   "--ssh-fanout", "4"], env),
                    "srun": (["--launcher", "srun"], None),
                }
                for name, (extra, run_env) in launchers.items():
                    if name not in args.launchers:
                        continue
                    argv = [DDPRUN, "-q", "--hostfile", cluster.hostfile, "--nproc-per-node",
                            "1"] + extra
                    if name == "srun":
                        # Inside an allocation of all nodes, as an sbatch script would be.
                        argv = ["salloc", "-N", str(n), "--quiet"] + argv[:1] + ["-q"] + \
                            extra + ["--nproc-per-node", "1"]
                        run_env = dict(cluster.slurm_env, **env)
                    runs = [start_times(cluster, argv, run_env, stamps) for _ in range(args.reps)]
                    row = {"nodes": n, "launcher": name,
                           "first_started_s": summary(runs, "first_started_s"),
                           "all_started_s": summary(runs, "all_started_s"),
                           "total_s": summary(runs, "total_s"),
                           "head_rss_mb": summary(runs, "head_rss_mb")}
                    result["launch"].append(row)
                    print(f"{name:9s} {n:3d} nodes: first worker started after "
                          f"{row['first_started_s']['median']:.2f} s, all after "
                          f"{row['all_started_s']['median']:.2f} s, run "
                          f"{row['total_s']['median']:.2f} s, head "
                          f"{row['head_rss_mb']['median']:.1f} MB", flush=True)
        except SkipTest as e:
            print(f"skipped {n} nodes: {e}")
            break
    os.makedirs(os.path.dirname(os.path.join(ROOT, args.out)), exist_ok=True)
    with open(os.path.join(ROOT, args.out), "w") as out:
        json.dump(result, out, indent=2)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
