#!/usr/bin/python3
"""The hierarchical all-reduce on real nodes: 2 simulated nodes x 2 ranks, started by ddprun
over ssh. With the defaults ddp-train all-reduces through shared memory within each node
and over gloo between the two node leaders (its start line says so); every rank's
parameters are checked bit-identical every epoch (diagnostics.check_replicas), and the final
parameters match a run over flat gloo (runtime.shared_memory false) to 1e-5. Nothing is left
on any node.

  PYTHONPATH=tests tests/multinode/test_hierarchy.py --ddprun BIN --ddp-train BIN --config JSON
Exit 77: skipped (not root, no namespaces); under CI=true that is a failure (exit 1).
"""
import json
import os
import subprocess
import sys
import uuid

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from simcluster.jobs import (  # noqa: E402 (tests/ on PYTHONPATH)
    check_leftovers, job_arguments, job_env, run_on_cluster, write_job)

WORKER_SH = r"""#!/bin/sh
exec "$DDPC_TRAIN" "$@"
"""
TRANSPORTS = {True: "gloo between 2 nodes + shared memory within",
              False: "1 thread(s) per rank, gloo, "}


def main():
    a = job_arguments()

    def body(cluster, result, failures):
        params = {}
        for shared_memory in (True, False):
            job, worker, config = write_job(cluster, WORKER_SH, a.config, timeout_s=30,
                                            threads=1, shared_memory=shared_memory)
            with open(config) as f:
                cfg = json.load(f)
            cfg.setdefault("diagnostics", {})["check_replicas"] = True
            with open(config, "w") as f:
                json.dump(cfg, f)
            final = os.path.join(job, f"final-{shared_memory}.json")
            marker = f"ddpc{uuid.uuid4().hex[:12]}"
            env = job_env(marker, DDPC_TRAIN=os.path.abspath(a.ddp_train))
            argv = [os.path.abspath(a.ddprun), "--hostfile", cluster.hostfile,
                    "--nproc-per-node", "2", "--launcher", "ssh", "--ssh-config",
                    cluster.ssh_config, "--run-id", marker, "--env", "DDPC_MARK", "--env",
                    "DDPC_TRAIN", "--", worker, "--config", config, "--epochs", "2",
                    "--final-params", final]
            r = cluster.run(cluster.nodes[0], argv, env=env, timeout=150,
                            stderr=subprocess.STDOUT)
            print(f"--- shared_memory {shared_memory}: exit {r.returncode}\n{r.stdout}")
            if r.returncode != 0:
                failures.append(f"shared_memory {shared_memory}: exit {r.returncode}, not 0")
            if TRANSPORTS[shared_memory] not in r.stdout:
                failures.append(f"shared_memory {shared_memory}: no '{TRANSPORTS[shared_memory]}'"
                                " in the start line")
            if "world 4" not in r.stdout:
                failures.append(f"shared_memory {shared_memory}: not a world of 4")
            check_leftovers(cluster, marker, failures)
            if os.path.exists(final):
                with open(final) as f:
                    params[shared_memory] = json.load(f)["params"]
            else:
                failures.append(f"shared_memory {shared_memory}: no final parameters")
        if len(params) == 2:
            worst = 0.0
            for name, p in params[True].items():
                a_values, b_values = p["values"], params[False][name]["values"]
                if len(a_values) != len(b_values):
                    failures.append(f"{name}: {len(a_values)} values against {len(b_values)}")
                    continue
                worst = max([worst] + [abs(x - y) for x, y in zip(a_values, b_values)])
            result["max_difference_from_flat_gloo"] = worst
            if worst > 1e-5:
                failures.append(f"hierarchical and flat gloo parameters differ by {worst}")

    return run_on_cluster(2, body, {"nodes": 2, "ranks_per_node": 2})


if __name__ == "__main__":
    sys.exit(main())
