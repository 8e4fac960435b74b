#!/usr/bin/env bash
# The test command: install, then run the whole suite against a PostgreSQL the project provisions
# itself (or $BELAY_DATABASE_URL). Extra arguments go to pytest. "No tests collected" is a failure.
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh || exit 1
.venv/bin/python -m pytest "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests: treating that as a failure" >&2
  exit 1
fi
exit "$rc"
