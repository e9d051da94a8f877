"""PBS emulated on the private Slurm cluster (PBS is not packaged in Debian 12).

Slurm runs a TaskProlog before every task; the one written here prints `export` lines that
give the task PBS's job environment: PBS_NODEFILE (a file naming the job's nodes),
PBS_JOBID, PBS_NUM_NODES and PBS_O_WORKDIR. A PBS job script then runs unchanged as a
Slurm job step (sbatch_args)."""

import os

# The folder for the PBS_NODEFILE files; the prolog reads it from the job's environment
# (slurm.start puts it in cluster.slurm_env).
FOLDER_VAR = "SLURM_TMPDIR_FOR_PBS"

# Open MPI in an emulated PBS job must not notice the Slurm job underneath: these make it
# start its daemons over ssh and take the nodes from its hostfile, as on PBS.
MPIRUN_ARGS = "--mca plm rsh --mca ras ^slurm --mca plm_rsh_agent ssh:rsh"


def write_task_prolog(folder):
    """Writes the TaskProlog into folder; returns its path (slurm.conf's TaskProlog)."""
    prolog = os.path.join(folder, "task_prolog.sh")
    with open(prolog, "w") as f:
        f.write("#!/bin/sh\n# Emulates PBS's job environment in every Slurm task.\n"
                f"f=\"${FOLDER_VAR}/pbs_nodefile.$SLURM_JOB_ID.$(hostname)\"\n"
                "scontrol show hostnames \"$SLURM_JOB_NODELIST\" > \"$f\"\n"
                "echo \"export PBS_NODEFILE=$f\"\n"
                "echo \"export PBS_JOBID=$SLURM_JOB_ID.pbs-emulated\"\n"
                "echo \"export PBS_NUM_NODES=$SLURM_JOB_NUM_NODES\"\n"
                "echo \"export PBS_O_WORKDIR=$SLURM_SUBMIT_DIR\"\n")
    os.chmod(prolog, 0o755)
    return prolog


def sbatch_args(script, nodes, workdir, out):
    """sbatch arguments that run script (with bash) as a PBS job of `nodes` nodes started
    in workdir, its output to out. The batch step runs the script through srun so that
    the TaskProlog applies."""
    return ["-N", str(nodes), "-D", workdir, "-o", out, "--wrap",
            f"srun -N1 -n1 --overlap bash {script}"]
