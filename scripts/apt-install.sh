#!/usr/bin/env bash
# apt-get update, then apt-get install -y PACKAGES — as root on Debian/Ubuntu (scripts/test.sh, .ci/run).
# On a fresh machine another apt/dpkg run (unattended upgrades, a provisioner) may hold its lock at that
# second: wait for it (DPkg::Lock::Timeout, and a retry while apt reports a lock it could not get) up to
# BELAY_APT_LOCK_WAIT seconds (default 300). When apt still fails, print its own output and exit with its
# status; on success print nothing.
set -uo pipefail
wait_s=${BELAY_APT_LOCK_WAIT:-300}
log=$(mktemp)
trap 'rm -f "$log"' EXIT

apt() {  # apt-get ARGS..., retried while another process holds an apt or dpkg lock
  local deadline=$((SECONDS + wait_s)) rc
  while :; do
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout="$wait_s" "$@" >"$log" 2>&1
    rc=$?
    [ "$rc" -eq 0 ] && return 0
    if grep -qiE 'could not get lock|unable to acquire the dpkg frontend lock|unable to lock' "$log" \
        && [ "$SECONDS" -lt "$deadline" ]; then
      echo "apt-get $1: another process holds the apt/dpkg lock; waiting (up to $((deadline - SECONDS)) s more)" >&2
      sleep "${BELAY_APT_RETRY_SLEEP:-5}"
      continue
    fi
    echo "apt-get $* failed (exit $rc); apt's output:" >&2
    sed 's/^/  /' "$log" >&2
    return "$rc"
  done
}

apt update -qq && apt install -y -qq "$@"
