#!/usr/bin/env bash
# The main job. Until the soak harness lands (soak/run.sh), this runs the smoke scenario:
# provision PostgreSQL, migrate, enqueue, read back, verify.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/belay smoke "$@"
