"""Replay dry-run (impl/ops/replay.py; spec/belay-operations.txt "Day-2 tooling": Replay.dry_run).

Jobs run with tests/apps/replay_app.py's v1 code in-process on real PostgreSQL; then the code is
changed (a step renamed, a step inserted, a spawn removed, ...) and the dry-run must name the first
divergence; the unchanged code must replay clean; and a replay must write nothing (row counts and
pg_stat_user_tables' n_tup_ins/upd/del compared before and after).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from impl.client import Client
from impl.ops.history import history
from impl.ops.replay import ReplayError, dry_run, dry_run_many
from impl.store import PgStore
from impl.store.snapshot import snapshot
from tests.apps import replay_app as app

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def ran_db(databases) -> dict:
    """One database for the module's read-only tests (replays write nothing — test_a_replay_writes_nothing
    checks exactly that): a pipeline job (steps, an event, two children awaited, costs) and an approval
    job (an awaited signal), both run to success with the v1 code."""
    with databases.fresh() as url:
        yield {"url": url, "jobs": _run_v1(url)}


@pytest.fixture
def ran(ran_db) -> dict[str, int]:
    return ran_db["jobs"]


@pytest.fixture
def ro_url(ran_db) -> str:
    return ran_db["url"]


def _run_v1(db_url: str) -> dict[str, int]:
    with PgStore(db_url) as store, Client(db_url, clock=lambda: NOW) as client:
        pipeline = client.enqueue(app.QUEUE, "pipeline", {"n": 21}).id
        approval = client.enqueue(app.QUEUE, "approval", {}).id
        app.drain(store, app.registry, lambda: NOW)
        client.signal(f"job:{approval}", "approve", {"ok": True})
        app.drain(store, app.registry, lambda: NOW)
        assert client.job(pipeline).state == "succeeded"
        assert client.job(approval).state == "succeeded"
    return {"pipeline": pipeline, "approval": approval}


def test_history_reconstructs_attempts_steps_children_events_and_outcome_from_the_database(ro_url, ran):
    h = history(ro_url, ran["pipeline"])
    assert [e["name"] for e in h["journal"]] == ["fetch", "$spawn:pages", "summarize"]
    assert [e["type"] for e in h["journal"]] == ["step", "spawn", "step"]
    assert h["journal"][0]["value"] == {"n": 21} and h["journal"][0]["usd_micros"] == 100
    assert h["cost"] == {"usd_micros": 250, "tokens": 17}
    assert len(h["children"]) == 2 and {c["state"] for c in h["children"]} == {"succeeded"}
    assert h["journal"][1]["children"] == [c["id"] for c in h["children"]]
    runs = len(h["attempts"])  # parked on its children until both finished, then succeeded
    assert runs >= 2 and [a["ended"] for a in h["attempts"]] == ["parked, slept or snoozed"] * (runs - 1) + [
        "succeeded"
    ]
    assert [e["payload"] for e in h["events"]] == [{"progress": 0.5}] * runs  # events are emitted on every run
    assert h["outcome"] == {
        "state": "succeeded",
        "finished_at": NOW.isoformat(),
        "result": {"total": 42, "children": 2},
    }
    assert any("$children" in t["what"] for t in h["timeline"])
    approval = history(ro_url, ran["approval"])
    assert [(s["name"], s["payload"]) for s in approval["signals"]] == [("approve", {"ok": True})]


def test_unchanged_code_replays_clean(ro_url, ran):
    for job_id in ran.values():
        report = dry_run(ro_url, job_id, app.registry)
        assert report.executed and report.clean, report.describe()
        assert report.ended == "the code returned"
    pipeline = dry_run(ro_url, ran["pipeline"], app.registry)
    assert [c["call"] for c in pipeline.calls] == [
        "step 'fetch'",
        "spawn 'pages'",
        "await children",
        "step 'summarize'",
    ]


def test_a_renamed_step_is_named_as_the_first_divergence(ro_url, ran):
    report = dry_run(ro_url, ran["pipeline"], app.renamed)
    d = report.divergence
    assert (d.kind, d.seq, d.expected, d.found) == ("step", 3, "summarize", "summarise")
    assert "not in the journal at all" in d.message
    assert not report.clean


def test_an_inserted_step_is_named_as_the_first_divergence(ro_url, ran):
    d = dry_run(ro_url, ran["pipeline"], app.inserted).divergence
    assert (d.kind, d.seq, d.expected, d.found) == ("spawn", 2, "$spawn:pages", "validate")
    assert "step 'validate'" in d.message and "spawn 'pages'" in d.message


def test_a_removed_spawn_is_named_as_the_first_divergence(ro_url, ran):
    d = dry_run(ro_url, ran["pipeline"], app.spawn_removed).divergence
    assert (d.kind, d.seq, d.expected, d.found) == ("spawn", 2, "$spawn:pages", "summarize")
    assert "no longer asked for" in d.message


def test_a_spawn_of_different_children_and_a_different_await_are_divergences(ro_url, ran):
    d = dry_run(ro_url, ran["pipeline"], app.spawn_changed).divergence
    assert (d.kind, d.seq) == ("spawn", 2) and "3 children" in d.message
    d = dry_run(ro_url, ran["approval"], app.await_changed).divergence
    assert (d.kind, d.seq, d.found) == ("await", 2, f"for signal 'approved' in 'job:{ran['approval']}'")
    assert "never came" in d.message


def test_a_changed_result_outside_any_step_is_a_divergence(ro_url, ran):
    d = dry_run(ro_url, ran["pipeline"], app.result_changed).divergence
    assert d.kind == "result" and "'version': 2" in d.found


def test_a_job_parked_on_its_await_replays_clean_up_to_the_park(db_url):
    with PgStore(db_url) as store, Client(db_url, clock=lambda: NOW) as client:
        job_id = client.enqueue(app.QUEUE, "approval", {}).id
        app.drain(store, app.registry, lambda: NOW)
        assert client.job(job_id).state == "awaiting"
    report = dry_run(db_url, job_id, app.registry)
    assert report.clean and "parked for signal 'approve'" in report.ended
    d = dry_run(db_url, job_id, app.await_changed).divergence
    assert d.kind == "await" and "parked on signal 'approve'" in d.message


def test_dry_run_many_replays_every_recent_job_of_the_registry(ro_url, ran):
    reports = dry_run_many(ro_url, app.renamed, since=NOW - timedelta(days=1))
    by_id = {r.job_id: r for r in reports}
    assert set(ran.values()) <= set(by_id)
    assert by_id[ran["pipeline"]].divergence.kind == "step"
    assert by_id[ran["approval"]].clean
    assert all(r.clean for r in dry_run_many(ro_url, app.registry))


def test_an_unknown_job_or_kind_is_refused_clearly(ro_url, ran):
    with pytest.raises(ReplayError, match="job 999999 does not exist"):
        dry_run(ro_url, 999999, app.registry)
    from impl.worker import Registry

    with pytest.raises(ReplayError, match="no kind 'pipeline'"):
        dry_run(ro_url, ran["pipeline"], Registry())


def _counters(conn: psycopg.Connection) -> dict:
    conn.execute("SELECT pg_stat_clear_snapshot()")
    rows = conn.execute(
        "SELECT relname, n_tup_ins, n_tup_upd, n_tup_del FROM pg_stat_user_tables "
        "WHERE relname LIKE 'belay_%' ORDER BY relname"
    ).fetchall()
    counts = {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t, *_ in rows}
    return {"pg_stat": rows, "rows": counts}


def _quiet(conn: psycopg.Connection, timeout: float = 10) -> None:
    """Wait until no other backend is connected to this database: a backend flushes its table
    statistics when it exits, before it leaves pg_stat_activity, so the counters are then final."""
    deadline = time.monotonic() + timeout
    while conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
    ).fetchone()[0]:
        assert time.monotonic() < deadline, "other connections to the test database did not go away"
        time.sleep(0.02)


def test_a_replay_writes_nothing(ro_url, ran):
    with psycopg.connect(ro_url, autocommit=True) as conn:
        _quiet(conn)  # the fixture's connections are closed; wait until their statistics are flushed
        before_state = snapshot(conn)
        before = _counters(conn)
        for registry in (app.registry, app.renamed, app.spawn_removed, app.await_changed):
            for job_id in ran.values():
                dry_run(ro_url, job_id, registry)
        dry_run_many(ro_url, app.inserted)
        _quiet(conn)
        assert _counters(conn) == before
        assert snapshot(conn) == before_state
