#!/usr/bin/env bash
# On a machine with an NVIDIA GPU and a CUDA build of PyTorch: builds the worker library,
# ddp-train, ddprun and the worker's tests against that PyTorch's LibTorch (the pip wheel's
# CMake package, NCCL included), runs the worker's test suites against it, runs ddp-train over
# NCCL on the GPU, and then bench/gpu.py (ddp-train against Python DDP on one GPU). CI never
# has a GPU and never runs this.
# Usage: scripts/check-gpu.sh [BUILD_DIR]   (default build-gpu)
# Environment: PYTHON (the interpreter whose torch to use, default python3),
#   DDPRUN_PREFIX_PATH (more CMake prefixes, ';'-separated: nlohmann_json, CLI11, GTest, hwloc
#   where they are not installed), LOGS (a folder for the logs, default BUILD_DIR/logs),
#   TEST_TIMEOUT (seconds per test program, default 300), BENCH_REPS (default 3; 0 skips it),
#   TARGETS (what to build), BUILD_TYPE (default Release; RelWithDebInfo for backtraces with
#   lines) and BUILD_ONLY=1 (stop after the build).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
dir=${1:-build-gpu}
python=${PYTHON:-python3}
logs=${LOGS:-$dir/logs}
mkdir -p "$logs"
say() { echo "check-gpu: $*"; }

nvidia-smi -L || { say "no GPU (nvidia-smi -L failed)"; exit 1; }
torch_prefix=$("$python" -c 'import torch; print(torch.utils.cmake_prefix_path)') || exit 1
say "$("$python" -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda,
  "NCCL", ".".join(map(str, torch.cuda.nccl.version())))')"
# The pip wheel's c10d headers include <nccl.h>, which ships in the nvidia-nccl package.
nccl_include=$(dirname "$(find "$("$python" -c 'import site; print(site.getsitepackages()[0])')"/nvidia \
  -name nccl.h -path '*include*' 2>/dev/null | head -n 1)")
say "nccl.h in $nccl_include"
extra_includes="-isystem $nccl_include"
# The wheel has c10d's gloo header but not gloo's own: take them from a prefix that has them
# (Debian's libgloo-dev, trixie's 0.0~git20231202 compiles; nothing of gloo is linked).
if [ ! -f "$torch_prefix/../../include/gloo/algorithm.h" ]; then
  gloo_include=""
  IFS=';' read -ra prefixes <<<"${DDPRUN_PREFIX_PATH:-};/usr"
  for p in "${prefixes[@]}"; do
    [ -n "$p" ] && [ -f "$p/include/gloo/algorithm.h" ] && { gloo_include=$p/include; break; }
  done
  [ -n "$gloo_include" ] || { say "no gloo headers: install libgloo-dev or name a prefix"; exit 1; }
  say "gloo headers from $gloo_include"
  extra_includes="$extra_includes -isystem $gloo_include"
fi

start=$(date +%s)
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-Release}" -DBUILD_TESTING=ON \
  -DCMAKE_PREFIX_PATH="$torch_prefix;${DDPRUN_PREFIX_PATH:-}" \
  -DCMAKE_CXX_FLAGS="$extra_includes" >"$logs/configure.log" 2>&1 ||
  { tail -n 40 "$logs/configure.log"; say "configure failed"; exit 1; }
grep -E "ddp_worker:|Torch" "$logs/configure.log" | head -n 5
targets=${TARGETS:-"ddprun ddp-train worker_tests worker_torch_tests train_tests train_torch_tests
  worker_integration_tests worker_preemption_tests"}
# shellcheck disable=SC2086
cmake --build "$dir" -j "$(nproc)" --target $targets -- -k 0 >"$logs/build.log" 2>&1 ||
  { grep -E "error|Error" "$logs/build.log" | head -n 40; say "build failed"; exit 1; }
say "built in $(($(date +%s) - start)) s; $(grep -c 'warning:' "$logs/build.log") warning line(s)"
# libstdc++.so.6 must come before LibTorch (worker/lib/CMakeLists.txt says why).
for b in "$dir/bin/ddp-train" "$dir/tests/worker_torch_tests"; do
  [ -f "$b" ] && say "$(basename "$b") needs: $(readelf -d "$b" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' |
    head -n 3 | tr '\n' ' ')"
done
[ -z "${BUILD_ONLY:-}" ] || exit 0

# What ddprun sees of this machine's GPUs, and where it would place one worker per GPU.
"$dir/bin/ddprun" --doctor >"$logs/doctor.log" 2>&1
grep -E "GPUs|LibTorch|NCCL" "$logs/doctor.log"
# shellcheck disable=SC2016 # the worker's shell expands them
"$dir/bin/ddprun" --nproc-per-node gpu --numa-binding node -- sh -c \
  'echo "rank $RANK: CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES LOCAL_RANK=$LOCAL_RANK DDPRUN_DEVICES=$DDPRUN_DEVICES $(grep Cpus_allowed_list /proc/self/status)"' \
  >"$logs/placement.log" 2>&1
say "placement (exit $?): $(grep -E 'rank 0:|GPU|error' "$logs/placement.log" | head -n 4 | tr '\n' ' ')"

failed=0
run_tests() {
  local t t0 rc log
  for t in "$@"; do
    t0=$(date +%s)
    log=$logs/$(echo "$t" | tr -c 'A-Za-z0-9_\n' '_').log
    # shellcheck disable=SC2086 # a suite's name, then its arguments
    timeout "${TEST_TIMEOUT:-300}" "$dir/tests/"$t >"$log" 2>&1
    rc=$?
    say "$t: exit $rc in $(($(date +%s) - t0)) s: $(grep -E '^\[  (PASSED|FAILED)  \]' \
      "$log" | tr '\n' ' ')"
    grep -E '^\[  FAILED  \] .*\(' "$log" | head -n 20
    [ "$rc" -eq 0 ] || failed=1
  done
}
# The library's and ddp-train's units first, then the GPU, then the multi-process suites.
run_tests worker_tests train_tests worker_torch_tests train_torch_tests
# Ranks as threads of one process, shuffled and repeated: a crash that moves between tests
# (LibTorch 2.11's flight recorder, docs/gpu.md) shows up here.
run_tests "worker_torch_tests --gtest_shuffle --gtest_repeat=3 --gtest_random_seed=7"

# ddp-train over NCCL on the GPU: the toy model, then the MLP on Fashion-MNIST.
tmp=$(mktemp -d)
for c in toy fashion_mlp; do
  "$python" -c "import json,sys; c=json.load(open('configs/$c.json')); c.setdefault('runtime',{})['backend']='nccl'; json.dump(c, open('$tmp/$c.json','w'))"
  if "$dir/bin/ddprun" --nproc-per-node 1 -- "$dir/bin/ddp-train" --config "$tmp/$c.json" \
    --epochs 1 >"$logs/nccl-$c.log" 2>&1; then
    say "ddp-train $c over NCCL: $(grep -E 'ddp-train: .* world|test accuracy|accuracy' \
      "$logs/nccl-$c.log" | head -n 3 | tr '\n' ' ')"
  else
    failed=1; say "ddp-train $c over NCCL failed:"; tail -n 20 "$logs/nccl-$c.log"
  fi
done

# Every precision over NCCL on the toy model: bf16 and fp16 autocast (fp16 with loss scaling),
# with sync batch norm, compressed gradients and ZeRO-1; each must end with finite parameters.
for v in "bf16|r['autocast']='bf16'; r['comm_hook']='fp16'; c['model']['batch_norm']='sync'" \
  "fp16|r['autocast']='fp16'; r['comm_hook']='bf16'; c['model']['batch_norm']='sync'" \
  "fp16-zero1|r['autocast']='fp16'; c['optimizer']={'name': 'adamw', 'lr': 0.01, 'zero_stage': 1}"; do
  name=${v%%|*}
  "$python" -c "import json; c=json.load(open('configs/toy.json')); r=c['runtime']; r['backend']='nccl'; ${v#*|}; json.dump(c, open('$tmp/$name.json','w'))"
  if "$dir/bin/ddprun" -q --nproc-per-node 1 -- "$dir/bin/ddp-train" --config "$tmp/$name.json" \
    --final-params "$tmp/$name.params" >"$logs/nccl-$name.log" 2>&1 &&
    "$python" -c "import json, math, sys; p=json.load(open('$tmp/$name.params'))
sys.exit(not all(v is not None and math.isfinite(v) for q in p['params'].values() for v in q['values']))"; then
    say "ddp-train toy over NCCL, $name: finite; $(grep -E 'test loss|epoch 3' "$logs/nccl-$name.log" | tail -n 1)"
  else
    failed=1; say "ddp-train toy over NCCL, $name failed:"; tail -n 20 "$logs/nccl-$name.log"
  fi
done

if [ "${BENCH_REPS:-3}" -gt 0 ]; then
  DDPRUN=$dir/bin/ddprun DDP_TRAIN=$dir/bin/ddp-train PYTHON=$python \
    "$python" bench/gpu.py --reps "${BENCH_REPS:-3}" --out "$logs/gpu.json" || failed=1
fi
run_tests worker_integration_tests worker_preemption_tests
say "done in $(($(date +%s) - start)) s, $([ $failed -eq 0 ] && echo "all passed" || echo "FAILURES")"
exit $failed
