"""Failing like a tool: every `belay` command (and the soak) against bad databases and bad usage.

Each command runs in a subprocess under a small *reaper* (a child subreaper, Linux prctl 36): whatever
the command starts and leaves behind is re-parented to the reaper, which reports it. So "nothing left
running" is checked exactly, even with other PostgreSQL clusters running on the machine.

Asserted for each case: the exit status (1 failure, 2 usage), a short message on stderr naming the
problem, no "Traceback", and no process left behind.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import click
import psycopg
import pytest

from impl.http.server import free_port
from impl.ops.cli import main as belay_main
from impl.ops.failures import describe_database_error
from impl.testing import wait_for

ROOT = Path(__file__).resolve().parents[1]

REAPER = textwrap.dedent(r"""
    import ctypes, json, os, signal, subprocess, sys, time
    ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    report = os.environ.pop("REAPER_REPORT")
    ignored = [int(s) for s in os.environ.pop("REAPER_IGNORE", "").split(",") if s]  # inherited SIG_IGN
    proc = subprocess.Popen(sys.argv[1:], preexec_fn=lambda: [signal.signal(s, signal.SIG_IGN) for s in ignored])
    with open(report + ".pid", "w") as f:
        f.write(str(proc.pid))
    signal.signal(signal.SIGTERM, lambda s, f: proc.send_signal(s))
    rc = proc.wait()
    time.sleep(0.5)  # orphans are re-parented to us as their parents die
    def children():
        me, out = os.getpid(), []
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    stat = open(f"/proc/{d}/stat").read()
                    if int(stat.rsplit(")", 1)[1].split()[1]) == me:
                        out.append((int(d), open(f"/proc/{d}/cmdline").read().replace("\0", " ").strip()))
                except (OSError, ValueError, IndexError):
                    pass
        return out
    left = [(p, c) for p, c in children() if c]  # a finished child is a zombie with no cmdline
    for pid, _ in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    with open(report, "w") as f:
        json.dump({"rc": rc, "left": left}, f)
""")


class Run:
    def __init__(self, rc: int, stdout: str, stderr: str, left: list, seconds: float) -> None:
        self.rc, self.stdout, self.stderr, self.left, self.seconds = rc, stdout, stderr, left, seconds

    def __repr__(self) -> str:
        return f"Run(rc={self.rc}, left={self.left}, stderr={self.stderr[-800:]!r}, stdout={self.stdout[-300:]!r})"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BELAY_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env.update(extra)
    return env


def reaped(argv: list[str], tmp_path: Path, *, timeout: float = 60, env: dict[str, str] | None = None) -> Run:
    report = tmp_path / f"reaper-{uuid.uuid4().hex[:6]}.json"
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", REAPER, *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={**(env or _env()), "REAPER_REPORT": str(report)},
        stdin=subprocess.DEVNULL,
    )
    result = json.loads(report.read_text())
    return Run(result["rc"], done.stdout, done.stderr, result["left"], time.monotonic() - started)


def belay(*args: str) -> list[str]:
    return [sys.executable, "-m", "impl.ops.cli", *args]


def assert_clean_failure(run: Run, rc: int, *patterns: str) -> None:
    assert run.rc == rc, run
    assert "Traceback" not in run.stderr + run.stdout, run
    assert run.left == [], run
    message = run.stderr.strip()
    assert message, run
    assert len(message.splitlines()) <= 4, run
    for pattern in patterns:
        assert re.search(pattern, message, re.IGNORECASE), (pattern, run)


# --- the bad databases -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(databases) -> Iterator[str]:
    """An admin URL of the session's PostgreSQL."""
    yield databases.provisioned.url


def _with(url: str, **parts: str) -> str:
    from urllib.parse import urlsplit, urlunsplit

    s = urlsplit(url)
    user = parts.get("user", s.username or "")
    password = parts.get("password", s.password)
    netloc = user + (f":{password}" if password else "") + "@" + (s.hostname or "") + (f":{s.port}" if s.port else "")
    return urlunsplit(s._replace(netloc=netloc, path=parts.get("path", s.path)))


REFUSED = "postgresql://belay:s3cret-pw@127.0.0.1:1/belay"


@pytest.fixture(scope="module")
def password_user(server: str) -> Iterator[str]:
    """A role that must log in with a password (a pg_hba rule for it alone, ahead of `trust`)."""
    with psycopg.connect(server, autocommit=True) as c:
        hba = c.execute("SHOW hba_file").fetchone()[0]
        if not os.access(hba, os.W_OK):
            pytest.skip(f"cannot add a password rule to {hba} on this server")
        name = f"pw_{uuid.uuid4().hex[:6]}"
        c.execute(
            psycopg.sql.SQL("CREATE ROLE {} LOGIN PASSWORD 'right-password'").format(psycopg.sql.Identifier(name))
        )
        original = Path(hba).read_text()
        Path(hba).write_text(
            f"host all {name} 127.0.0.1/32 scram-sha-256\nhost all {name} ::1/128 scram-sha-256\n" + original
        )
        c.execute("SELECT pg_reload_conf()")
    try:
        yield name
    finally:
        Path(hba).write_text(original)
        with psycopg.connect(server, autocommit=True) as c:
            c.execute("SELECT pg_reload_conf()")
            c.execute(psycopg.sql.SQL("DROP ROLE {}").format(psycopg.sql.Identifier(name)))


@pytest.fixture
def bad_databases(server: str, password_user: str, blank_db_url: str) -> dict[str, tuple[str, list[str]]]:
    """name → (URL, patterns the message must contain)."""
    return {
        "refused": (REFUSED, [r"cannot connect to postgresql://belay:\*\*\*@127\.0\.0\.1:1/belay", "refused"]),
        "wrong password": (
            _with(server, user=password_user, password="wrong-password"),
            [r"refused the user name or password", re.escape(password_user)],
        ),
        "missing database": (_with(server, path="/no_such_db_here"), [r"'no_such_db_here' does not exist"]),
        "malformed": ("postgresql://belay:s3cret-pw@[::1", [r"malformed database URL"]),
        "no schema": (blank_db_url, [r"no Belay schema|incompatible Belay schema", r"belay migrate"]),
    }


# Commands that take --database-url; each gets every bad database.
DB_COMMANDS = {
    "status": ["status", "--database-url", "{url}"],
    "migrate": ["migrate", "--database-url", "{url}"],
    "serve": ["serve", "--database-url", "{url}", "--port", str(free_port())],
    "dashboard": ["dashboard", "--database-url", "{url}", "--port", str(free_port())],
    "worker": ["worker", "--app", "tests.apps.runtime_app", "--database-url", "{url}", "--exit-on-unreachable", "2"],
}


@pytest.mark.parametrize("case", ["refused", "wrong password", "missing database", "malformed", "no schema"])
@pytest.mark.parametrize("command", sorted(DB_COMMANDS))
def test_a_bad_database_is_one_clear_line_and_exit_1(command, case, bad_databases, tmp_path):
    url, patterns = bad_databases[case]
    if command == "migrate" and case == "no schema":
        pytest.skip("migrate creates the schema: an empty database is its normal input")
    argv = [a.format(url=url) for a in DB_COMMANDS[command]]
    run = reaped(belay(*argv), tmp_path)
    assert_clean_failure(run, 1, *patterns)
    assert "s3cret-pw" not in run.stderr + run.stdout
    assert "wrong-password" not in run.stderr + run.stdout
    # The pre-flight answered, not a connection pool giving up after its timeout (30 s by default).
    assert "couldn't get a connection after" not in run.stderr, run


def test_no_command_leaks_a_password_into_its_message_for_a_malformed_url():
    exc = psycopg.ProgrammingError('end of string reached in URI: "postgresql://u:hunter2@[bad"')
    message = describe_database_error(exc, "postgresql://u:hunter2@[bad")
    assert "hunter2" not in message and "malformed" in message


def test_debug_shows_the_traceback(tmp_path):
    run = reaped(belay("--debug", "status", "--database-url", REFUSED), tmp_path)
    assert run.rc == 1 and "Traceback" in run.stderr and "OperationalError" in run.stderr, run
    run = reaped(belay("status", "--database-url", REFUSED), tmp_path, env=_env(BELAY_DEBUG="1"))
    assert run.rc == 1 and "Traceback" in run.stderr, run


def _every_command(group: click.Group, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            yield from _every_command(command, (*prefix, name))
        else:
            yield (*prefix, name)


@pytest.mark.parametrize("command", list(_every_command(belay_main)), ids=" ".join)
def test_every_command_answers_a_usage_error_with_exit_2(command, tmp_path):
    run = reaped(belay(*command, "--no-such-option"), tmp_path)
    assert_clean_failure(run, 2, r"no such option")


@pytest.mark.parametrize("command", list(_every_command(belay_main)), ids=" ".join)
def test_every_database_command_fails_cleanly_on_a_refused_database(command, tmp_path):
    """The general rule, for commands added later too: any command with --database-url, given a
    refused database, exits 1 with one clear line (or 2 if it also needs other arguments)."""
    params = {p.name for p in _lookup(command).params}
    if "database_url" not in params:
        pytest.skip("takes no --database-url")
    run = reaped(belay(*command, "--database-url", REFUSED, *_required_args(command)), tmp_path)
    if run.rc == 2:  # the command needs other arguments first: still a clean usage error
        assert_clean_failure(run, 2)
    else:
        assert_clean_failure(run, 1, "refused")
        assert "couldn't get a connection after" not in run.stderr, run  # a pre-flight, not a pool timeout


def _lookup(command: tuple[str, ...]) -> click.Command:
    cmd: click.Command = belay_main
    for name in command:
        assert isinstance(cmd, click.Group)
        cmd = cmd.commands[name]
    return cmd


def _required_args(command: tuple[str, ...]) -> list[str]:
    extra = {("worker",): ["--app", "tests.apps.runtime_app", "--exit-on-unreachable", "2"]}
    return extra.get(command, [])


# --- the daemon -------------------------------------------------------------------------------------------


def _lines(text: str, pattern: str) -> list[str]:
    return [line for line in text.splitlines() if re.search(pattern, line)]


def test_worker_gives_up_only_when_asked_and_says_so_once(tmp_path):
    run = reaped(
        belay("worker", "--app", "tests.apps.runtime_app", "--database-url", REFUSED, "--exit-on-unreachable", "3"),
        tmp_path,
    )
    assert_clean_failure(run, 1, "gave up after")
    assert len(_lines(run.stderr, "waiting for the database")) == 1, run  # one line per change, not per attempt
    assert run.seconds >= 3, run  # it waited for the limit before giving up


def test_worker_rides_out_a_database_outage_logging_each_change_once(tmp_path):
    """Started before its database exists, the worker waits; the database crashes under it and comes
    back: one line for each change, no traceback, and SIGTERM still stops it cleanly."""
    from impl.provision import ClusterConfig, EmbeddedCluster
    from impl.store.migrate import migrate

    cluster = EmbeddedCluster(ClusterConfig())
    cluster.start()
    try:
        url = cluster.url
        cluster.stop()
        log = tmp_path / "worker.log"
        report = tmp_path / "reaper.json"
        with open(log, "w") as out:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    REAPER,
                    *belay("worker", "--app", "tests.apps.runtime_app", "--database-url", url, "--lease-ttl", "3"),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
                env={**_env(), "REAPER_REPORT": str(report)},
            )
            try:
                wait_for(lambda: "waiting for the database" in log.read_text(), 30, "the waiting line")
                cluster.start()
                with psycopg.connect(cluster.url, autocommit=True) as c:
                    migrate(c)
                wait_for(lambda: "running queues" in log.read_text(), 30, "the worker to start")
                cluster.crash()
                wait_for(lambda: "database unreachable" in log.read_text(), 30, "the outage line")
                time.sleep(2)  # several retry rounds while it is down: still one line
                cluster.restart()
                wait_for(lambda: "reachable again" in log.read_text(), 30, "the recovery line")
                os.kill(proc.pid, signal.SIGTERM)
                proc.wait(timeout=30)
            finally:
                if proc.poll() is None:
                    proc.kill()
        text = log.read_text()
        result = json.loads(report.read_text())
        assert result["rc"] == 0 and result["left"] == [], (result, text[-2000:])
        assert "Traceback" not in text, text[-3000:]
        assert len(_lines(text, "waiting for the database")) == 1, text
        assert len(_lines(text, "database unreachable")) == 1, text
        assert len(_lines(text, "reachable again")) == 1, text
    finally:
        cluster.destroy()


# --- nothing outlives a signal ----------------------------------------------------------------------------


def _spawn_reaped(argv: list[str], tmp_path: Path, env: dict[str, str] | None = None, ignored: tuple[int, ...] = ()):
    """`argv` under the reaper; `ignored`: signals the command inherits as ignored (SIG_IGN), as a
    background job of a non-interactive shell inherits SIGINT."""
    log = tmp_path / f"out-{uuid.uuid4().hex[:6]}.log"
    report = tmp_path / f"reaper-{uuid.uuid4().hex[:6]}.json"
    out = open(log, "w")  # noqa: SIM115 - the child writes to it; the caller closes it
    proc = subprocess.Popen(
        [sys.executable, "-c", REAPER, *argv],
        stdout=out,
        stderr=subprocess.STDOUT,
        cwd=ROOT,
        env={**(env or _env()), "REAPER_REPORT": str(report), "REAPER_IGNORE": ",".join(str(int(x)) for x in ignored)},
        stdin=subprocess.DEVNULL,
    )
    return proc, log, report, out


def _child_pid(report: Path) -> int:
    wait_for(lambda: Path(str(report) + ".pid").exists(), 10, "the child pid")
    return int(Path(str(report) + ".pid").read_text())


def _signalled(
    argv: list[str],
    tmp_path: Path,
    ready: Callable[[Path], bool],
    what: str,
    timeout: float,
    *,
    signum: int = signal.SIGTERM,
    stop_within: float = 60,
    env: dict[str, str] | None = None,
    ignored: tuple[int, ...] = (),
) -> tuple[dict, str]:
    """Run `argv` under the reaper until `ready(log)`, send its process `signum`, wait up to `stop_within` s
    for the reaper; the reaper's report (what was left) and the command's output."""
    proc, log, report, out = _spawn_reaped(argv, tmp_path, env=env, ignored=ignored)
    try:
        wait_for(lambda: ready(log), timeout, what)
        os.kill(_child_pid(report), signum)
        proc.wait(timeout=stop_within)
    finally:
        out.close()
        if proc.poll() is None:
            proc.kill()
    return json.loads(report.read_text()), log.read_text()


# What the long-running commands promise (docs/signals.md): `belay db`, `belay worker`, the test suite and
# the mutant runner stop cleanly on SIGINT, SIGTERM and SIGHUP whatever disposition they inherited;
# `belay serve` / `belay dashboard` stop on SIGINT and SIGTERM (uvicorn installs its own handlers for both).


@pytest.mark.parametrize("inherited", ["default", "ignored"])
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT], ids=lambda s: s.name)
def test_belay_db_stops_its_cluster_on_a_signal(signum, inherited, tmp_path):
    ignored = (signum,) if inherited == "ignored" else ()
    result, text = _signalled(
        belay("db", "--no-migrate"),
        tmp_path,
        lambda log: "postgresql://" in log.read_text(),
        "the URL",
        60,
        signum=signum,
        ignored=ignored,
    )
    assert result["left"] == [], (result, text)
    assert "Traceback" not in text


def test_a_test_run_stopped_by_sigterm_stops_its_embedded_cluster(tmp_path):
    test_file = tmp_path / "test_blocks.py"
    test_file.write_text(
        textwrap.dedent("""
        import time
        def test_blocks(db_url):
            print("READY", flush=True)
            time.sleep(120)
    """)
    )
    result, text = _signalled(
        [
            sys.executable,
            "-m",
            "pytest",
            "-s",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "conftest",
            str(test_file),
            "--rootdir",
            str(ROOT),
        ],
        tmp_path,
        lambda log: "READY" in log.read_text(),
        "the test to start",
        120,
    )
    assert result["left"] == [], (result, text[-2000:])


# --- the soak ---------------------------------------------------------------------------------------------


def _soak_env() -> dict[str, str]:
    return _env(BELAY_SOAK_PYTHON=sys.executable)  # soak/run.sh: skip the bootstrap, use this interpreter


def test_the_soak_on_a_refused_database_says_so_in_one_line_and_checks_nothing(tmp_path):
    run = reaped(
        [
            str(ROOT / "soak" / "run.sh"),
            "--database-url",
            REFUSED,
            "--report",
            str(tmp_path / "reports"),
            "--no-progress",
        ],
        tmp_path,
        env=_soak_env(),
    )
    assert run.rc == 3, run  # soak/run.sh's documented code for "the harness could not run"
    assert "Traceback" not in run.stderr + run.stdout, run
    assert run.left == [], run
    assert re.search(
        r"soak: error: cannot connect to postgresql://belay:\*\*\*@127\.0\.0\.1:1/belay: connection refused", run.stderr
    ), run
    assert "s3cret-pw" not in run.stderr + run.stdout


def test_a_soak_stopped_by_sigterm_stops_everything_and_reports_unknown(tmp_path):
    reports = tmp_path / "reports"
    result, text = _signalled(
        [
            str(ROOT / "soak" / "run.sh"),
            "--workers",
            "2",
            "--duration",
            "120",
            "--no-progress",
            "--report",
            str(reports),
            "--seed",
            "1",
        ],
        tmp_path,
        # the faults phase: workers are running and have logged
        lambda log: any(p.stat().st_size > 0 for p in reports.glob("*/workers/*.log")),
        "running workers",
        120,
        stop_within=120,
        env=_soak_env(),
    )
    assert result["rc"] == 2, (result, text[-3000:])
    assert result["left"] == [], (result, text[-3000:])  # no postgres, no worker, no driver left
    assert "Traceback" not in text, text[-3000:]
    latest = json.loads((reports / "latest" / "results.json").read_text())
    assert latest["verdict"] == "unknown" and latest["interrupted"] == "interrupted by SIGTERM", latest
    assert (reports / "latest" / "report.html").exists() and (reports / "latest" / "summary.md").exists()
