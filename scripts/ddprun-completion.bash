# bash completion for ddprun
_ddprun() {
  local cur prev i
  cur=${COMP_WORDS[COMP_CWORD]}
  prev=${COMP_WORDS[COMP_CWORD-1]}
  # After the program (or "--"), complete as for that program: files.
  for ((i = 1; i < COMP_CWORD; i++)); do
    case ${COMP_WORDS[i]} in
      --) COMPREPLY=($(compgen -f -- "$cur")); return ;;
      # Options that take a value, in --help's order (both spellings).
      --nproc-per-node|--nproc_per_node|--run-id|--run_id|--scheduler|--hostfile|--nnodes|--node-rank|--node_rank|--master-addr|--master_addr|--master-port|--master_port|--local-addr|--local_addr|--launcher|--env|--ssh-config|--ssh-fanout|--max-restarts|--max_restarts|--restart-on|--restart-scope|--shutdown-timeout|--shutdown_timeout|--exit-timeout|--exit_timeout|--stall-timeout|--stall_timeout|--deadline|--time-limit|--drain-before|--drain-signal|--signals-to-handle|--signals_to_handle|--log-dir|--log_dir|-r|--redirects|-t|--tee|--local-ranks-filter|--local_ranks_filter|--report|--gpus-per-proc|--gpus_per_proc|--numa-binding|--numa_binding|--cpu-bind|--cpu_bind|--format|--check-path|--rdzv-backend|--rdzv_backend|--rdzv-endpoint|--rdzv_endpoint|--rdzv-conf|--rdzv_conf|--rdzv-id|--rdzv_id|--role|--monitor-interval|--monitor_interval|--start-method|--start_method|--event-log-handler|--event_log_handler|--fold-window|--fold_window|--duplicate-stdout-filters|--duplicate_stdout_filters|--duplicate-stderr-filters|--duplicate_stderr_filters) ((i++)) ;;
      -*) ;;
      *) COMPREPLY=($(compgen -f -- "$cur")); return ;;
    esac
  done
  case $prev in
    --nproc-per-node|--nproc_per_node) COMPREPLY=($(compgen -W "auto cpu gpu 1 2 4 8" -- "$cur")); return ;;
    --gpus-per-proc|--gpus_per_proc) COMPREPLY=($(compgen -W "1 2 4 8" -- "$cur")); return ;;
    --numa-binding|--numa_binding) COMPREPLY=($(compgen -W "none node socket exclusive core-complex" -- "$cur")); return ;;
    --cpu-bind|--cpu_bind) COMPREPLY=($(compgen -W "none cores numa" -- "$cur")); return ;;
    --scheduler) COMPREPLY=($(compgen -W "slurm lsf pbs sge mpi kubeflow hostfile local" -- "$cur")); return ;;
    --tee|-t|--redirects|-r) COMPREPLY=($(compgen -W "0 1 2 3" -- "$cur")); return ;;
    --rdzv-backend|--rdzv_backend) COMPREPLY=($(compgen -W "c10d static" -- "$cur")); return ;;
    --start-method|--start_method) COMPREPLY=($(compgen -W "spawn fork forkserver" -- "$cur")); return ;;
    --format) COMPREPLY=($(compgen -W "text json" -- "$cur")); return ;;
    --restart-scope) COMPREPLY=($(compgen -W "job rank" -- "$cur")); return ;;
    --launcher) COMPREPLY=($(compgen -W "auto ssh mpirun srun local" -- "$cur")); return ;;
    --env) COMPREPLY=($(compgen -v -- "$cur")); return ;;
    --hostfile|--log-dir|--log_dir|--ssh-config|--check-path|--report) COMPREPLY=($(compgen -f -- "$cur")); return ;;
    --nnodes|--node-rank|--master-addr|--master-port|--run-id|--max-restarts|--shutdown-timeout) return ;;
  esac
  if [[ $cur == -* ]]; then
    COMPREPLY=($(compgen -W "--nproc-per-node --gpus-per-proc --virtual-local-rank --numa-binding --cpu-bind --scheduler --hostfile --nnodes --node-rank --master-addr --master-port --run-id --max-restarts --shutdown-timeout --log-dir --tee --tag-output --fold-output --no-fold-output --fold-window --standalone --rdzv-backend --rdzv-endpoint --rdzv-id --rdzv-conf --role --module --no-python --run-path --redirects --local-ranks-filter --local-addr --signals-to-handle --monitor-interval --start-method --event-log-handler --duplicate-stdout-filters --duplicate-stderr-filters --exit-timeout --stall-timeout --no-stacks --restart-on --restart-scope --warm-spare --restart-repeated --drain-before --drain-signal --deadline --time-limit --print-job-end --status --stacks --stop --attach --dry-run --format --launcher --env --ssh-config --ssh-fanout --check --check-path --bandwidth --doctor --quiet --report --help --version" -- "$cur"))
  else
    COMPREPLY=($(compgen -c -- "$cur"))
  fi
}
complete -F _ddprun ddprun
