#pragma once
// The environment contract between ddprun and its workers: every variable name, in one
// place. The launcher writes them (launcher/src/plan/rank_environment.cc), the worker library
// reads them (worker/lib/env.cc). Names follow torchrun so that scripts written for it
// run unchanged. Documented in docs/environment.md.

namespace ddprun::env {

// torchrun's contract.
inline constexpr const char* kRank = "RANK";
inline constexpr const char* kLocalRank = "LOCAL_RANK";
inline constexpr const char* kWorldSize = "WORLD_SIZE";
inline constexpr const char* kLocalWorldSize = "LOCAL_WORLD_SIZE";
inline constexpr const char* kGroupRank = "GROUP_RANK";
inline constexpr const char* kGroupWorldSize = "GROUP_WORLD_SIZE";
inline constexpr const char* kRoleRank = "ROLE_RANK";
inline constexpr const char* kRoleWorldSize = "ROLE_WORLD_SIZE";
inline constexpr const char* kRoleName = "ROLE_NAME";
inline constexpr const char* kMasterAddr = "MASTER_ADDR";
inline constexpr const char* kMasterPort = "MASTER_PORT";
inline constexpr const char* kRunId = "TORCHELASTIC_RUN_ID";
inline constexpr const char* kRestartCount = "TORCHELASTIC_RESTART_COUNT";
inline constexpr const char* kMaxRestarts = "TORCHELASTIC_MAX_RESTARTS";
inline constexpr const char* kErrorFile = "TORCHELASTIC_ERROR_FILE";

// What operators (Kubeflow's PyTorchJob) set for torchrun's own options: read by ddprun
// where it would read MASTER_ADDR and MASTER_PORT.
inline constexpr const char* kPetMasterAddr = "PET_MASTER_ADDR";
inline constexpr const char* kPetMasterPort = "PET_MASTER_PORT";

// The GPUs a worker may use, as CUDA reads it; set by the site or the scheduler.
inline constexpr const char* kCudaVisibleDevices = "CUDA_VISIBLE_DEVICES";
// Set to PCI_BUS_ID when binding, so CUDA numbers GPUs as the placement did.
inline constexpr const char* kCudaDeviceOrder = "CUDA_DEVICE_ORDER";

// Threading: OMP_NUM_THREADS is set to 1 with more than one worker on a node when the
// user has not set it (torchrun's rule); OPENBLAS_NUM_THREADS is only reported.
inline constexpr const char* kOmpNumThreads = "OMP_NUM_THREADS";
inline constexpr const char* kOpenblasNumThreads = "OPENBLAS_NUM_THREADS";

// torchrun sets it to 1 unless the user did (PyTorch 2.x's name; 1.13 read
// NCCL_ASYNC_ERROR_HANDLING): NCCL errors then end the process instead of hanging it.
inline constexpr const char* kTorchNcclAsyncErrorHandling = "TORCH_NCCL_ASYNC_ERROR_HANDLING";
// Its name before PyTorch 2.2 (1.13 to 2.1 read only this one): never set by ddprun, since
// 2.2 and later warn on every rank that finds it; a user's value keeps ddprun from setting
// the newer one.
inline constexpr const char* kNcclAsyncErrorHandling = "NCCL_ASYNC_ERROR_HANDLING";

// Gloo's network interface: the user's or the site's, else set by ddprun with NCCL's below.
inline constexpr const char* kGlooSocketIfname = "GLOO_SOCKET_IFNAME";
// NCCL's network interface. When the user set neither it nor GLOO_SOCKET_IFNAME and this
// node has several network interfaces, ddprun sets both for the workers to the interface
// the kernel routes to the master address through (docs/environment.md).
inline constexpr const char* kNcclSocketIfname = "NCCL_SOCKET_IFNAME";

// ddprun's own additions.
inline constexpr const char* kDdprunHost = "DDPRUN_HOST";        // this node's name in the plan
inline constexpr const char* kDdprunLogDir = "DDPRUN_LOG_DIR";   // per-rank log folder, if any
inline constexpr const char* kDdprunVersion = "DDPRUN_VERSION";  // launcher version
// "1" when ddprun's own stdout is a terminal (workers write to a pipe, so they cannot
// tell by themselves whether redrawing a progress line makes sense).
inline constexpr const char* kDdprunStdoutTty = "DDPRUN_STDOUT_TTY";
// The node's CPUs divided among its workers; set only when the user has not set
// OMP_NUM_THREADS, so that ddp-train can use its share where torchrun's rule gives 1.
inline constexpr const char* kDdprunThreadsPerRank = "DDPRUN_THREADS_PER_RANK";
// With --numa-binding/--cpu-bind: how many of the node's ranks may run on this rank's CPUs,
// itself included (1: they are its own). Waiting threads may spin when that many fit.
inline constexpr const char* kDdprunCpuSharers = "DDPRUN_CPU_SHARERS";
// Where a worker may write the training step it has reached (a decimal number, replaced
// atomically); ddprun reads it after a failed round: a round that reached a newer step made
// progress, and its failure is worth a restart even when it repeats.
inline constexpr const char* kDdprunProgressFile = "DDPRUN_PROGRESS_FILE";
// With --restart-scope rank: the round's membership file, which ddprun replaces whole (a new
// file renamed over it) at every change: its version, the recoveries, each rank's state
// and pid (docs/environment.md, "The membership file").
inline constexpr const char* kDdprunMembershipFile = "DDPRUN_MEMBERSHIP_FILE";
// "1" in a process that replaces a lost one from its start (a lost node's ranks on a spare
// node): its membership file may not exist yet, and it waits for the one that names it.
inline constexpr const char* kDdprunReplacement = "DDPRUN_REPLACEMENT";
// Where a Python worker's faulthandler writes every thread's stack when ddprun asks
// (the sitecustomize ddprun puts first on PYTHONPATH arms it and removes the variable).
inline constexpr const char* kDdprunPythonStackFile = "DDPRUN_PYTHON_STACK_FILE";
// Where the worker library keeps the rank's last collectives (collective_trace.h).
inline constexpr const char* kDdprunTraceFile = "DDPRUN_TRACE_FILE";
// When the scheduler will end the job (unix seconds), when ddprun knows it (--deadline,
// --time-limit, or the scheduler): workers may plan their last checkpoint by it.
inline constexpr const char* kDdprunJobEndTime = "DDPRUN_JOB_END_TIME";
// The CUDA devices this worker should use, comma-separated ordinals in the worker's own
// numbering (after any CUDA_VISIBLE_DEVICES ddprun narrowed for it): its LOCAL_RANK's GPU
// by default, K of them with --gpus-per-proc K, "0" or "0,..,K-1" with
// --virtual-local-rank. Unset when ddprun assigned it none (no GPU visible, or more
// workers than GPUs).
inline constexpr const char* kDdprunDevices = "DDPRUN_DEVICES";
// "1" in a warm spare (--warm-spare, docs/environment.md): a worker started ahead of need
// with no rank, which reads its rank's whole environment on its stdin (KEY=VALUE entries,
// each ended by a NUL byte, then end of file) when a rank is lost, or end of file alone when
// the round ends without needing it.
inline constexpr const char* kDdprunSpare = "DDPRUN_SPARE";
// The launchers' rendezvous secret (docs/fault-tolerance.md): read by ddprun itself and
// removed from every environment it gives a child (workers, relays, agents).
inline constexpr const char* kDdprunRdzvToken = "DDPRUN_RDZV_TOKEN";

}  // namespace ddprun::env
