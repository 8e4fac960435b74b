#!/usr/bin/env bash
# Certify a Belay worker under kill -9, SIGSTOP and PostgreSQL crash-restarts (soak/PROTOCOL.md).
#
#   soak/run.sh                                   # 60 s default soak of the reference worker
#   soak/run.sh --worker ./my-sdk-worker --workers 4 --duration 600 --kill-every 5 \
#               --stop-every 20 --db-restart-every 60
#   soak/run.sh --partition-every 45 --stall-every 45 --failover-every 60 --replication sync  # issue 13
#   soak/run.sh --help
#
# Bootstraps itself on a fresh machine (scripts/setup.sh: .venv + the project; rerun only when
# pyproject.toml changed since the last install — stamp .venv/.belay-setup-stamp), provisions an
# embedded PostgreSQL (fsync on), runs faults → heal → drain → check, writes reports/<run-id>/ and
# reports/latest, prints the verdict. Exit 0 valid, 1 invalid, 2 unknown, 3 harness failure.
# BELAY_SOAK_PYTHON=/path/to/python skips the bootstrap and uses that interpreter.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -n "${BELAY_SOAK_PYTHON:-}" ]; then
  PY="$BELAY_SOAK_PYTHON"
else
  # Install only when the environment is missing or out of date: the stamp holds the hash of
  # pyproject.toml (dependencies) that the last successful scripts/setup.sh installed.
  stamp=.venv/.belay-setup-stamp
  want=$(sha256sum pyproject.toml | cut -d' ' -f1)
  if [ ! -x .venv/bin/python ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    scripts/setup.sh
    echo "$want" > "$stamp"
  fi
  PY=.venv/bin/python
fi
exec "$PY" -m soak.run "$@"
