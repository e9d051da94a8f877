# Sourced by check-libtorch2.sh and check-cuda-build.sh: a private apt for `apt-get
# download` from a Debian suite, with its own sources list and state under $dir (the
# system's apt configuration is not touched, nothing is installed).
#
# Expects: dir (the private folder), suite, components (e.g. "main contrib"), tool (the
# name in messages). Sets: mirror; the positional parameters to apt's options, for
# `apt_get "$@" ...` and `apt-cache "$@" ...`.

# The mirror the system already uses (deb822 or one-line format), if it has one.
detect_mirror() {
  for f in /etc/apt/sources.list.d/*.sources /etc/apt/sources.list; do
    [ -r "$f" ] || continue
    m=$(sed -n -e 's/^URIs:[[:space:]]*\([^[:space:]]*\/debian\)[[:space:]]*$/\1/p' \
      -e 's/^deb[[:space:]]\{1,\}\(\[[^]]*\][[:space:]]\{1,\}\)\{0,1\}\([^[:space:]]*\/debian\)[[:space:]].*/\2/p' \
      "$f" | head -n 1)
    if [ -n "$m" ]; then
      echo "$m"
      return
    fi
  done
  echo http://deb.debian.org/debian
}
mirror=${DEBIAN_MIRROR:-$(detect_mirror)}

mkdir -p "$dir/etc/preferences.d" "$dir/state/lists/partial" "$dir/cache/archives/partial" \
  "$dir/debs"
: >"$dir/state/status"
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
echo "deb [signed-by=$keyring] $mirror $suite $components" >"$dir/etc/sources.list"
set -- -o "Dir::Etc::sourcelist=$dir/etc/sources.list" -o "Dir::Etc::sourceparts=-" \
  -o "Dir::Etc::preferencesparts=$dir/etc/preferences.d" -o "Dir::State=$dir/state" \
  -o "Dir::State::status=$dir/state/status" -o "Dir::Cache=$dir/cache" \
  -o "APT::Architecture=$(dpkg --print-architecture)" -o "Debug::NoLocking=1" \
  -o "APT::Sandbox::User=root" -o "Acquire::Languages=none"

# Runs apt-get with the private configuration. Exits 100 (test.sh turns that into a warning)
# only when the mirror cannot be reached at all; any other apt failure fails the check.
# `apt-get update` exits 0 when it cannot fetch the index (it only warns and keeps the old
# lists), so the output is searched whatever the exit status.
apt_get() {
  status=0
  out=$(apt-get "$@" 2>&1) || status=$?
  if printf '%s' "$out" | grep -qE 'Could not resolve|Temporary failure resolving|Could not connect|Connection timed out|Network is unreachable|No route to host|Connection refused'; then
    printf '%s\n' "$out" >&2
    echo "$tool: the mirror $mirror cannot be reached" >&2
    exit 100
  fi
  if [ "$status" -eq 0 ]; then
    [ -z "$out" ] || printf '%s\n' "$out"
    return 0
  fi
  printf '%s\n' "$out" >&2
  echo "$tool: apt-get $* failed (the mirror answered)" >&2
  exit 1
}
