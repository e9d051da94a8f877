#pragma once
// What config.diagnostics turns on: the replica check, the final parameters file, and the
// test hooks that hold a rank at a chosen point (docs/worker-library.md#diagnostics).

#include <torch/nn/module.h>

#include <cstdint>
#include <iosfwd>
#include <string>

namespace ddprun::worker {

class Plane;

// Collective: every rank must call it. Hashes this rank's parameters and buffers (FNV-1a
// over their bytes) and all-reduces the MIN and MAX of the hash. Throws ConsistencyError
// naming `step` and this rank's hash unless every rank holds bit-identical parameters and
// buffers (up to hash collisions).
void check_replicas(torch::nn::Module& model, Plane& control, std::int64_t step);

// Writes {"step", "world_size", "params": {name: {"shape", "values"}}} (values as doubles)
// to `path` atomically, mode 0644. Throws std::system_error or ddprun::Error on failure.
void write_final_params(const std::string& path, torch::nn::Module& model, std::int64_t step,
                        int world);

// Test hook (diagnostics.hold_after_step): prints "ddp-train: rank R (pid P) holding after
// step N until a preemption signal" to `out`, then returns once a StopSignals signal has
// been received (at once if one already was).
void hold_after_step(std::ostream& out, int rank, std::int64_t step);

// Test hook (diagnostics.hold_checkpoint_write_at_step), for rank 0 while checkpoint
// `dir`/`tmp_name` is durable under its temporary name: prints "ddp-train: rank 0 (pid P)
// holding checkpoint write DIR/TMP before its rename" to `out` and waits for SIGKILL.
// Test hook (diagnostics.kill_rank): SIGKILLs this process; `with_its_node`: its parent (the
// node's ddprun) first, whose end takes every worker of the node (PR_SET_PDEATHSIG).
[[noreturn]] void lose_rank(bool with_its_node);

[[noreturn]] void hold_checkpoint_write(std::ostream& out, const std::string& dir,
                                        const std::string& tmp_name);

}  // namespace ddprun::worker
