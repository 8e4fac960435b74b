"""The Client SDK surface: clock injection, compatibility at startup, await_result (listening and
polling), and the CLI commands."""

from __future__ import annotations

import json
import threading
import time
from datetime import timedelta

import psycopg
import pytest
from click.testing import CliRunner

from impl.cli import main
from impl.client import Client, result_value
from impl.migrate import IncompatibleSchema
from impl.pgrows import result_payload
from impl.store import channel_name
from impl.testing import wait_for
from model.envelope import encode
from tests.test_listener import listener_statement


def complete_like_a_worker(db_url: str, job_id: int, value, *, notify: bool, delay: float = 0.05) -> threading.Thread:
    """What a worker's succeed ack (§7) plus its result notification (§9.2) write; acks arrive with
    the worker issue, so the test writes them itself."""

    def run() -> None:
        time.sleep(delay)  # let the waiter start waiting first; correctness does not depend on it
        with psycopg.connect(db_url, autocommit=True) as c, c.transaction():
            c.execute(
                "UPDATE belay_jobs SET state = 'succeeded', result = %s, finished_at = inserted_at WHERE id = %s",
                (encode(value), job_id),
            )
            if notify:
                c.execute(
                    "SELECT pg_notify(%s, %s)", (channel_name(c.info.dbname), json.dumps({"t": "r", "id": job_id}))
                )

    t = threading.Thread(target=run)
    t.start()
    return t


def test_the_client_passes_its_clock_to_every_operation(db_url, now):
    ticks = iter([now, now + timedelta(seconds=1)])
    with Client(db_url, clock=lambda: next(ticks)) as client:
        a = client.enqueue("q", "w")
        b = client.enqueue("q", "w")
        assert client.job(a.id).inserted_at == now
        assert client.job(b.id).inserted_at == now + timedelta(seconds=1)


def test_the_client_refuses_to_start_on_a_higher_contract_major(db_url):
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute("UPDATE belay_meta SET contract_major = 2")
    with pytest.raises(IncompatibleSchema, match="upgrade"):
        Client(db_url)


@pytest.mark.parametrize("listen", [True, False], ids=["listening", "polling"])
def test_await_result_returns_the_terminal_job_and_its_decoded_value(db_url, now, listen):
    with Client(db_url, clock=lambda: now) as client:
        job_id = client.enqueue("q", "w").id
        worker = complete_like_a_worker(db_url, job_id, {"answer": 42}, notify=listen)
        job = client.await_result(job_id, timeout=10, listen=listen)
        worker.join()
        assert job.state == "succeeded"
        assert result_value(job) == {"answer": 42}


def test_a_result_notification_wakes_the_awaiter_registered_for_its_job_only(db_url):
    """The client's result listener (one LISTEN connection) sets the event of the awaiters of the job a
    result notification names, and no other; polling would hide a listener that never delivers one."""
    with Client(db_url) as client:
        listener = client._listener()
        connected = listener.register(0)  # its first LISTEN wakes every awaiter (to re-read): wait that out
        with psycopg.connect(db_url, autocommit=True) as c:
            wait_for(
                lambda: connected.is_set() or listener_statement(c) == "LISTEN", 20, "the result listener's LISTEN"
            )
            time.sleep(0.2)  # (the wake-up follows the LISTEN at once, on the listener's thread)
            listener.unregister(0, connected)
            mine, other = listener.register(7), listener.register(8)
            try:
                # the canonical payload, as an ack sends it
                c.execute("SELECT pg_notify(%s, %s)", (channel_name(c.info.dbname), result_payload(7)))
                assert mine.wait(20) and not other.is_set()
            finally:
                listener.unregister(7, mine)
                listener.unregister(8, other)


def test_await_result_without_a_notification_still_finishes_by_polling(db_url, now):
    """Notifications are lossy by assumption: the re-check on the backoff is the floor."""
    with Client(db_url, clock=lambda: now) as client:
        job_id = client.enqueue("q", "w").id
        worker = complete_like_a_worker(db_url, job_id, "done", notify=False)
        assert client.await_result(job_id, timeout=10, listen=True).state == "succeeded"
        worker.join()


def test_await_result_times_out_with_the_current_state(db_url, now):
    with Client(db_url, clock=lambda: now) as client:
        job_id = client.enqueue("q", "w").id
        with pytest.raises(TimeoutError, match=f"job {job_id} is still ready"):
            client.await_result(job_id, timeout=0.05)
        with pytest.raises(LookupError):
            client.await_result(99999, timeout=0.05)


def test_cli_migrate_is_idempotent_and_status_reports_versions(blank_db_url):
    runner = CliRunner()
    first = runner.invoke(main, ["migrate", "--database-url", blank_db_url])
    assert first.exit_code == 0, first.output
    assert "applied 1, 2, 3, 4; version 4, contract major 1" in first.output
    again = runner.invoke(main, ["migrate", "--database-url", blank_db_url])
    assert "already current" in again.output
    status = runner.invoke(main, ["status", "--database-url", blank_db_url])
    assert status.exit_code == 0, status.output
    assert "provisioning: env" in status.output
    assert "migration version 4, contract major 1" in status.output


def test_cli_status_on_an_unmigrated_database_says_what_to_do(blank_db_url):
    result = CliRunner().invoke(main, ["status", "--database-url", blank_db_url])
    assert result.exit_code == 1  # a failure, not a usage error (exit 2)
    assert "run `belay migrate`" in result.output


def test_cli_refuses_an_invalid_schema_name(blank_db_url):
    result = CliRunner().invoke(main, ["migrate", "--database-url", blank_db_url, "--schema", "x;drop"])
    assert result.exit_code != 0
    assert "is invalid" in result.output


def test_cli_never_prints_a_password(blank_db_url):
    url = blank_db_url.replace("postgres@", "postgres:hunter2@")
    result = CliRunner().invoke(main, ["migrate", "--database-url", url])
    assert "hunter2" not in result.output


def test_smoke_scenario_passes_against_a_given_database(blank_db_url, monkeypatch):
    from impl.smoke import run

    monkeypatch.setenv("BELAY_DATABASE_URL", blank_db_url)
    lines: list[str] = []
    assert run(lines.append) == 0, "\n".join(lines)
    assert any("smoke passed" in line for line in lines)


def test_cli_db_starts_an_embedded_cluster_prints_its_url_and_stops_on_sigterm():
    import signal
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-m", "impl.cli", "db"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        ready = proc.stdout.readline()
        assert "embedded PostgreSQL ready" in ready, ready + proc.stderr.read()
        url = proc.stdout.readline().strip()
        with psycopg.connect(url, autocommit=True) as c:
            assert c.execute("SELECT version FROM belay_meta").fetchone() == (4,)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(url, connect_timeout=2)
    finally:
        if proc.poll() is None:
            proc.kill()
