#!/bin/bash
# ABCI 3.0 (Altair PBS Professional): one ddprun per node started by mpirun.
# Copy, edit the project and resources, then: qsub -P YOUR_GROUP abci3-pbs.sh
#PBS -q rt_HF
#PBS -l select=2
#PBS -l walltime=1:00:00
#PBS -j oe
#PBS -N ddp-train
set -euo pipefail
cd "${PBS_O_WORKDIR:-.}"
source /etc/profile.d/modules.sh 2>/dev/null && module load hpcx 2>/dev/null || true

DDPRUN=${DDPRUN:-ddprun}
WORKER=${WORKER:-ddp-train}
CONFIG=${CONFIG:-configs/fashion_cnn.json}
NPROC_PER_NODE=${NPROC_PER_NODE:-gpu}
read -r -a ddprun_args <<< "${DDPRUN_ARGS:-}"
read -r -a worker_args <<< "${WORKER_ARGS:-}"
# PBS_NODEFILE lists a node once per MPI slot: one line per node for ddprun.
hosts=${TMPDIR:-/tmp}/hosts.${PBS_JOBID%%.*}
awk '!seen[$1]++ {print $1}' "$PBS_NODEFILE" > "$hosts"
port=$((20000 + ${PBS_JOBID%%.*} % 10000))
# The job's end, learnt once here (qstat) and given to every node's ddprun, which sends
# the workers SIGUSR1 --drain-before it (default 300 s): they checkpoint and exit 75.
job_end=$("$DDPRUN" --print-job-end 2>/dev/null | cut -d' ' -f1) || job_end=
rc=0
mpirun ${MPIRUN_ARGS:-} -hostfile "$hosts" -npernode 1 -x PATH ${LD_LIBRARY_PATH:+-x LD_LIBRARY_PATH} \
  "$DDPRUN" --hostfile "$hosts" --master-port "$port" --nproc-per-node "$NPROC_PER_NODE" \
  ${job_end:+--deadline "$job_end"} \
  "${ddprun_args[@]}" -- "$WORKER" --config "$CONFIG" "${worker_args[@]}" || rc=$?
echo "job: mpirun exited with status $rc" >&2
if ((rc == 75)); then
  # The next job in the chain resumes from the checkpoint.
  echo "job: stopped before the walltime with a checkpoint; submitting the next job" >&2
  qsub ${RESUBMIT_ARGS:-} "${JOB_SCRIPT:-$PBS_O_WORKDIR/abci3-pbs.sh}"
  exit 0
fi
exit "$rc"
