# Sourced by the scripts: installs the given Debian packages that are missing, and only those.
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
