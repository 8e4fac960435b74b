#!/usr/bin/env bash
# The lint gate (issue 21): the single place that defines the static checks. CI (.ci/run) and
# pre-commit (.pre-commit-config.yaml) both call this. Configuration lives in pyproject.toml
# ([tool.ruff*], [tool.mypy]). Runs every check, then exits non-zero if any of them found something.
#   ruff check          pyflakes, pycodestyle, isort, pyupgrade, bugbear, simplify, RUF, bandit (impl/)
#   ruff format --check the formatter
#   mypy                model/ and soak/judges/ strict, impl/ check_untyped_defs, the rest of soak/ and properties/ default mode
# Uses .venv/bin/ tools if present (as scripts/setup.sh creates them), else those on PATH.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
[ -x "$BIN/ruff" ] || BIN=$(dirname "$(command -v ruff)")
rc=0
echo "== ruff check" >&2
"$BIN/ruff" check --no-cache . || rc=1
echo "== ruff format --check" >&2
"$BIN/ruff" format --check --no-cache . || rc=1
echo "== mypy" >&2
"$BIN/mypy" || rc=1
if [ "$rc" -ne 0 ]; then
  echo "lint: FAILED (see above)" >&2
fi
exit "$rc"
