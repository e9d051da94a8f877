"""Brings a simulated cluster up for manual experiments, or removes a crashed run's state.

As root, from tests/ (or with tests/ on PYTHONPATH):
  /usr/bin/python3 -m simcluster up -n 4 [--ssh] [--slurm] [--sge]   # Ctrl-C tears down
  /usr/bin/python3 -m simcluster clean                                # remove stale state
"""

import argparse
import json
import os
import signal
import sys

from . import Cluster, SkipTest


def main():
    ap = argparse.ArgumentParser(prog="python3 -m simcluster",
                                 description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="bring a cluster up and keep it until Ctrl-C")
    up.add_argument("-n", type=int, default=2)
    up.add_argument("--ssh", action="store_true")
    up.add_argument("--slurm", action="store_true")
    up.add_argument("--sge", action="store_true")
    clean = sub.add_parser("clean", help="remove what a crashed run left")
    for p in (up, clean):
        p.add_argument("--prefix", default=os.environ.get("DDPCLUSTER_PREFIX", "ddpc"))
    args = ap.parse_args()
    if args.cmd == "clean":
        Cluster.clean_stale(args.prefix)
        return 0
    try:
        c = Cluster(args.n, prefix=args.prefix).start()
        if args.ssh:
            c.start_sshd()
        if args.slurm:
            c.start_slurm()
        if args.sge:
            c.start_sge()
    except SkipTest as e:
        print(f"cluster: cannot run here: {e}", file=sys.stderr)
        return 77
    print(json.dumps({"dir": c.dir, "nodes": c.addrs, "hostfile": c.hostfile,
                      "ssh_config": c.ssh_config, "holders": {k: p.pid for k, p in c.holders.items()},
                      "slurm_conf": (c.slurm_env or {}).get("SLURM_CONF"),
                      "sge_root": (c.sge_env or {}).get("SGE_ROOT"),
                      "timings": c.timings}, indent=1), flush=True)
    print("run on a node: nsenter -t HOLDER_PID --net --uts --mount --wd=$PWD -- CMD",
          file=sys.stderr)
    try:
        signal.pause()
    finally:
        c.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
