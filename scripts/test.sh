#!/usr/bin/env bash
# The test command: install, then run the whole suite against a PostgreSQL the project provisions
# itself (or $BELAY_DATABASE_URL). Extra arguments go to pytest. "No tests collected" is a failure.
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh || exit 1
# The dashboard's browser tests drive Debian's Chromium (Playwright cannot download its own here). As
# root on Debian/Ubuntu the browser is installed when missing; otherwise those tests are skipped with a
# one-line reason (set BELAY_REQUIRE_CHROMIUM=1 to make a missing browser a failure, as .ci/run does).
if ! command -v chromium >/dev/null 2>&1 && [ -z "${BELAY_CHROMIUM:-}" ] && [ "$(id -u)" = 0 ] \
    && command -v apt-get >/dev/null 2>&1 && [ -z "${BELAY_NO_APT:-}" ]; then
  echo "installing chromium for the dashboard's browser tests (set BELAY_NO_APT=1 to skip them instead)" >&2
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >/dev/null 2>&1 \
    || echo "could not install chromium: the browser tests will be skipped" >&2
fi
.venv/bin/python -m pytest "$@"
rc=$?
if [ "$rc" -gt 128 ]; then  # killed by a signal (139: SIGSEGV): say which test was running
  echo "pytest died of signal $((rc - 128)) while $(cat "${BELAY_TEST_RUNNING:-reports/pytest-running.txt}" 2>/dev/null || echo '(unknown)')" >&2
fi
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests: treating that as a failure" >&2
  exit 1
fi
exit "$rc"
