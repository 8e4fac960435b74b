#!/usr/bin/env bash
# The main job: a soak of the reference worker on an embedded PostgreSQL (soak/run.sh, which
# bootstraps .venv itself). Arguments are passed to soak/run.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
exec soak/run.sh "$@"
