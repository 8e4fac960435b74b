#!/usr/bin/env bash
# The test command: install when needed, then run the whole suite in parallel against a PostgreSQL the
# project provisions itself (or $BELAY_DATABASE_URL). Extra arguments go to pytest. "No tests collected"
# is a failure.
#
#   scripts/test.sh                      # every test, pytest-xdist: -n ${BELAY_TEST_WORKERS:-auto} --dist loadgroup
#   scripts/test.sh -n 0                 # serially (any -n / --numprocesses / --dist of yours wins)
#   scripts/test.sh tests/test_client.py -x
set -uo pipefail
cd "$(dirname "$0")/.."
# Install only when the environment is missing or out of date: the stamp holds the hash of pyproject.toml
# (the dependencies) that the last successful scripts/setup.sh installed (it writes the stamp; soak/run.sh
# reads the same one). BELAY_REINSTALL=1 installs anyway.
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ -n "${BELAY_REINSTALL:-}" ] || [ ! -x .venv/bin/python ] \
    || [ "$(cat .venv/.belay-setup-stamp 2>/dev/null)" != "$want" ]; then
  scripts/setup.sh || exit 1
fi
# The dashboard's browser tests drive Debian's Chromium (Playwright cannot download its own here). As
# root on Debian/Ubuntu the browser is installed when missing (waiting for another apt/dpkg run's lock;
# apt's error printed if it still fails); otherwise those tests are skipped with a one-line reason (set
# BELAY_REQUIRE_CHROMIUM=1 to make a missing browser a failure, as .ci/run does).
if ! command -v chromium >/dev/null 2>&1 && [ -z "${BELAY_CHROMIUM:-}" ] && [ "$(id -u)" = 0 ] \
    && command -v apt-get >/dev/null 2>&1 && [ -z "${BELAY_NO_APT:-}" ]; then
  echo "installing chromium for the dashboard's browser tests (set BELAY_NO_APT=1 to skip them instead)" >&2
  scripts/apt-install.sh chromium || echo "could not install chromium (apt's output above): the browser tests will be skipped" >&2
fi
# Parallel by default: tests that share state (a database, a port, a file) carry an xdist_group marker and
# run in one worker (--dist loadgroup). Arguments that choose the distribution themselves are left alone.
parallel=(-n "${BELAY_TEST_WORKERS:-auto}" --dist loadgroup)
for arg in "$@"; do
  case "$arg" in
    -n|-n*|--numprocesses|--numprocesses=*|--dist|--dist=*|-pno:xdist|no:xdist) parallel=() ;;
  esac
done
.venv/bin/python -m pytest "${parallel[@]}" "$@"
rc=$?
if [ "$rc" -gt 128 ]; then  # killed by a signal (139: SIGSEGV): say which test was running
  echo "pytest died of signal $((rc - 128)) while $(cat "${BELAY_TEST_RUNNING:-reports/pytest-running.txt}" 2>/dev/null || echo '(unknown)')" >&2
fi
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests: treating that as a failure" >&2
  exit 1
fi
exit "$rc"
