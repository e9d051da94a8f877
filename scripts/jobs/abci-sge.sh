#!/bin/bash
# ABCI 2.x (Univa/Altair Grid Engine): one ddprun per node started by mpirun.
# Copy, edit the group and resources, then: qsub -g YOUR_GROUP abci-sge.sh
#$ -l rt_F=2
#$ -l h_rt=1:00:00
#$ -cwd
#$ -j y
#$ -N ddp-train
set -euo pipefail
source /etc/profile.d/modules.sh 2>/dev/null && module load hpcx 2>/dev/null || true

DDPRUN=${DDPRUN:-ddprun}
WORKER=${WORKER:-ddp-train}
CONFIG=${CONFIG:-configs/fashion_cnn.json}
NPROC_PER_NODE=${NPROC_PER_NODE:-gpu}
read -r -a ddprun_args <<< "${DDPRUN_ARGS:-}"
read -r -a worker_args <<< "${WORKER_ARGS:-}"
# ABCI writes the job's nodes, one per line, to $SGE_JOB_HOSTLIST; elsewhere derive the
# same list from the parallel environment's PE_HOSTFILE.
hosts=${SGE_JOB_HOSTLIST:-}
if [[ -z $hosts ]]; then
  hosts=${TMPDIR:-/tmp}/hosts.$JOB_ID
  awk '{print $1}' "$PE_HOSTFILE" > "$hosts"
fi
# No job id reaches ddprun under mpirun: the port is derived here from JOB_ID, once.
port=$((20000 + JOB_ID % 10000))
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
  # Exit status 99 asks Grid Engine to run the job again; it resumes from the checkpoint.
  echo "job: stopped before h_rt with a checkpoint; rescheduling (exit 99)" >&2
  exit 99
fi
exit "$rc"
