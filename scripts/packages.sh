# Sourced by the scripts: which Debian packages each needs, and installing the missing ones.

# The demo: build ddprun and ddp-train, train on Fashion-MNIST, draw the curves.
demo_packages=(
  cmake g++ make
  libtorch-dev libgloo-dev           # LibTorch 1.13 and the gloo headers c10d needs
  libopenblas0-pthread               # libtorch links libblas.so.3: without this, reference BLAS (~9x slower)
  libcli11-dev nlohmann-json3-dev zlib1g-dev
  libhwloc-dev                       # the node's topology (hwloc), for --numa-binding and --cpu-bind
  libssl-dev                         # libcrypto: HMAC-SHA256 proofs in the launchers' rendezvous
  elfutils                           # eu-stack: where ranks are before ddprun kills them
  dataset-fashion-mnist
  gnuplot-nox python3                # scripts/plot-metrics.sh
)

# The tests, on top of the demo's.
test_packages=(
  googletest libgtest-dev
  openmpi-bin libopenmpi-dev
  python3-torch                      # torchrun-style Python scripts in the tests; SyncBatchNorm references
  slurm-client                       # scontrol: the ground truth for hostlist tests
  clang-format                       # the format check
  clang-tidy                         # scripts/tidy.sh: a few checks that find real bugs
  dpkg-dev                           # dpkg-shlibdeps, for the Debian packages' test
  rpm                                # rpmbuild, for the RPMs' test (CPack's RPM generator)
  python3-build python3-venv python3-setuptools python3-wheel   # the wheel's test (offline build, fresh venv)
  lmod                               # the modulefile's test
  python3-jsonschema                 # --report's test: the report against docs/report.schema.json
)

# Multi-node tests (tests/multinode, root only): namespaces, sshd, mpirun, Slurm, Grid
# Engine. Installed without starting their services.
daemon_packages=(
  iproute2 util-linux                # ip (bridge, veth), unshare, nsenter
  openssh-server openssh-client      # sshd per simulated node
  munge slurmctld slurmd             # a private Slurm cluster (slurm-client is above)
  gridengine-master gridengine-exec gridengine-client   # a private Grid Engine cell
)

# Installs the given Debian packages that are missing, and only those.
ensure_packages() {
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$' || missing+=("$p")
  done
  ((${#missing[@]})) || return 0
  echo "installing ${missing[*]}"
  local sudo=()
  [[ $(id -u) == 0 ]] || sudo=(sudo)
  "${sudo[@]}" apt-get update -q
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
}

# Like ensure_packages, for packages that ship daemons (sshd, munge, slurmd, Grid Engine):
# installs them without starting any service (a temporary policy-rc.d answers "denied" to
# invoke-rc.d and deb-systemd-invoke), unless a policy is already in place. The tests start
# private copies of these daemons themselves.
ensure_packages_without_starting() {
  local policy=/usr/sbin/policy-rc.d sudo=() made=0
  [[ $(id -u) == 0 ]] || sudo=(sudo)
  if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\nexit 101\n' | "${sudo[@]}" tee "$policy" >/dev/null
    "${sudo[@]}" chmod 755 "$policy"
    made=1
  fi
  local rc=0
  ensure_packages "$@" || rc=$?
  ((made)) && "${sudo[@]}" rm -f "$policy"
  return "$rc"
}
