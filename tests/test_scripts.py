"""The test command's shell logic (issue 55, item 4), run on a copy with stand-ins, never on the real venv:
scripts/test.sh installs only when the install stamp is missing or stale, runs pytest in parallel unless the
arguments choose otherwise, and turns "no tests collected" into a failure; scripts/apt-install.sh waits
while another apt/dpkg run holds the lock and prints apt's own output when it fails."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _executable(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def _checkout(tmp_path: Path) -> Path:
    """scripts/test.sh with a setup.sh that only records that it ran (and writes the stamp, as the real one
    does) and a .venv/bin/python that prints its arguments and exits $FAKE_RC."""
    co = tmp_path / "checkout"
    (co / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "test.sh", co / "scripts" / "test.sh")
    (co / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    _executable(
        co / "scripts" / "setup.sh",
        '#!/bin/sh\necho setup >> setup.log\nsha256sum pyproject.toml | cut -d" " -f1 > .venv/.belay-setup-stamp\n',
    )
    _executable(co / ".venv" / "bin" / "python", '#!/bin/sh\necho "python $*"\nexit "${FAKE_RC:-0}"\n')
    return co


def _test_sh(co: Path, *args: str, rc: int = 0, workers: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "BELAY_NO_APT": "1", "FAKE_RC": str(rc)}
    env.pop("BELAY_REINSTALL", None)
    env.pop("BELAY_TEST_WORKERS", None)  # the default unless `workers` is given (.ci/run sets its own)
    if workers is not None:
        env["BELAY_TEST_WORKERS"] = workers
    return subprocess.run(
        [str(co / "scripts" / "test.sh"), *args], cwd=co, env=env, capture_output=True, text=True, timeout=60
    )


def _setups(co: Path) -> int:
    log = co / "setup.log"
    return len(log.read_text().splitlines()) if log.exists() else 0


def test_test_sh_installs_only_when_the_stamp_is_missing_or_stale(tmp_path):
    co = _checkout(tmp_path)
    assert _test_sh(co).returncode == 0 and _setups(co) == 1  # no stamp yet: install
    assert _test_sh(co, "tests/test_x.py").returncode == 0 and _setups(co) == 1  # current: no install
    with (co / "pyproject.toml").open("a") as f:
        f.write("# a new dependency\n")
    assert _test_sh(co).returncode == 0 and _setups(co) == 2  # pyproject.toml changed: install again
    assert _test_sh(co).returncode == 0 and _setups(co) == 2


def test_test_sh_runs_in_parallel_unless_the_arguments_choose(tmp_path):
    co = _checkout(tmp_path)
    assert _test_sh(co, "-x").stdout.strip() == "python -m pytest -n auto --dist loadgroup -x"
    assert _test_sh(co, "-n", "0").stdout.strip() == "python -m pytest -n 0"
    assert _test_sh(co, "--dist=load", "-n3").stdout.strip() == "python -m pytest --dist=load -n3"
    assert _test_sh(co, "-p", "no:xdist").stdout.strip() == "python -m pytest -p no:xdist"
    assert _test_sh(co, "-x", workers="3").stdout.strip() == "python -m pytest -n 3 --dist loadgroup -x"


def test_test_sh_fails_when_no_tests_are_collected_and_passes_other_codes_through(tmp_path):
    co = _checkout(tmp_path)
    no_tests = _test_sh(co, rc=5)
    assert no_tests.returncode == 1 and "collected no tests" in no_tests.stderr
    assert _test_sh(co, rc=1).returncode == 1
    assert _test_sh(co, rc=0).returncode == 0


def _fake_apt(tmp_path: Path, locked_times: int, fail_install: bool = False) -> dict[str, str]:
    """An apt-get on PATH that reports a held lock `locked_times` times, then succeeds (or fails to install)."""
    bindir = tmp_path / "bin"
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "locked").write_text(str(locked_times))
    _executable(
        bindir / "apt-get",
        f"""#!/usr/bin/env bash
echo "$*" >> {tmp_path}/calls
n=$(cat {tmp_path}/locked)
if [ "$n" -gt 0 ]; then
  echo $((n - 1)) > {tmp_path}/locked
  echo "E: Could not get lock /var/lib/apt/lists/lock. It is held by process 4242 (apt-get)"; exit 100
fi
if [ "{int(fail_install)}" = 1 ] && [[ "$*" == *install* ]]; then echo "E: Unable to locate package chromium"; exit 100; fi
exit 0
""",
    )
    return {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "BELAY_APT_RETRY_SLEEP": "0"}


def _apt_install(env: dict[str, str], **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ROOT / "scripts" / "apt-install.sh"), "chromium"],
        env={**env, **extra},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_apt_install_waits_for_a_held_lock_then_installs(tmp_path):
    done = _apt_install(_fake_apt(tmp_path, locked_times=2))
    assert done.returncode == 0, done.stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    assert calls == ["-o DPkg::Lock::Timeout=300 update -qq"] * 3 + [
        "-o DPkg::Lock::Timeout=300 install -y -qq chromium"
    ]
    assert done.stderr.count("holds the apt/dpkg lock; waiting") == 2


def test_apt_install_prints_apts_error_when_it_still_fails(tmp_path):
    held = _apt_install(_fake_apt(tmp_path, locked_times=99), BELAY_APT_LOCK_WAIT="0")
    assert held.returncode == 100 and "Could not get lock /var/lib/apt/lists/lock" in held.stderr, held.stderr
    missing = _apt_install(_fake_apt(tmp_path / "m", locked_times=0, fail_install=True))
    assert missing.returncode == 100 and "E: Unable to locate package chromium" in missing.stderr, missing.stderr
