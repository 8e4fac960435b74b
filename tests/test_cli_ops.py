"""The `belay` day-2 commands (impl/ops/cli_ops.py over impl/ops/operator.py) on real PostgreSQL: each command,
its --json output, and its refusal paths — unknown ids, retrying a non-terminal job, bad JSON — with a
clear message, the documented exit code (1 refused, 2 usage) and nothing changed (a whole-database
snapshot compared before and after).
"""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from click.testing import CliRunner

from impl.client import Client
from impl.ops.cli import main
from impl.store import PgStore
from impl.store.snapshot import snapshot
from model import worker_ops as w
from model.ops import JobSpec, WorkflowMember
from tests.apps import replay_app as app

OLD = datetime(2020, 1, 1, tzinfo=UTC)  # long past every retention, whatever today is


def belay(url: str, *args: str):
    return CliRunner().invoke(main, list(args), env={"BELAY_DATABASE_URL": url}, catch_exceptions=False)


def out(result) -> object:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def unchanged(url: str):
    """Context: the whole database (every table, the id sequence) is the same afterwards."""

    class _Same:
        def __enter__(self):
            with psycopg.connect(url, autocommit=True) as c:
                self.before = snapshot(c)

        def __exit__(self, *exc):
            if exc[0] is None:
                with psycopg.connect(url, autocommit=True) as c:
                    assert snapshot(c) == self.before, "the refused command changed the database"

    return _Same()


@pytest.fixture
def client(db_url):
    with Client(db_url, clock=lambda: OLD) as c:
        yield c


def _run_pipeline(url: str) -> int:
    """A pipeline job run to success (steps with costs, events, two children) at OLD, then steered."""
    with Client(url, clock=lambda: OLD) as c, PgStore(url) as store:
        job_id = c.enqueue(app.QUEUE, "pipeline", {"n": 21}).id
        app.drain(store, app.registry, lambda: OLD)
        c.steer(job_id, {"hint": "shorter"})
    return job_id


@pytest.fixture
def ran_pipeline(db_url) -> int:
    return _run_pipeline(db_url)


@pytest.fixture(scope="module")
def pipeline_db(databases):
    """One database for the read-only command tests of this module (reads change nothing)."""
    with databases.fresh() as url:
        yield url, _run_pipeline(url)


def test_stats_counts_jobs_per_queue_and_state(db_url, client):
    client.enqueue("a", "k")
    client.cancel(client.enqueue("a", "k").id)
    client.enqueue("b", "k")
    assert out(belay(db_url, "stats", "--json")) == {"a": {"cancelled": 1, "ready": 1}, "b": {"ready": 1}}
    human = belay(db_url, "stats")
    assert human.exit_code == 0 and "cancelled" in human.stdout and "b" in human.stdout


def test_jobs_list_filters_and_pages_newest_first_by_keyset(db_url, client):
    ids = [client.enqueue("q1" if i % 2 else "q2", "even" if i % 2 == 0 else "odd").id for i in range(5)]
    client.cancel(ids[0])
    client.enqueue_workflow("wf-1", [WorkflowMember("m", JobSpec("q1", "member"))])
    page1 = out(belay(db_url, "jobs", "list", "--limit", "2", "--json"))
    assert [j["id"] for j in page1["jobs"]] == [6, 5] and page1["next_after"] == 5
    page2 = out(belay(db_url, "jobs", "list", "--limit", "2", "--after", "5", "--json"))
    assert [j["id"] for j in page2["jobs"]] == [4, 3] and page2["next_after"] == 3
    page4 = out(belay(db_url, "jobs", "list", "--limit", "2", "--after", "1", "--json"))
    assert page4 == {"jobs": [], "next_after": None}

    def listed(*args: str) -> list[int]:
        return [j["id"] for j in out(belay(db_url, "jobs", "list", "--json", *args))["jobs"]]

    assert listed("--state", "cancelled") == [ids[0]]
    assert listed("--state", "cancelled", "--state", "ready", "--queue", "q2") == [ids[4], ids[2], ids[0]]
    assert listed("--kind", "odd") == [ids[3], ids[1]]
    assert listed("--workflow", "wf-1") == [6]
    human = belay(db_url, "jobs", "list", "--limit", "2")
    assert "next page: --after 5" in human.stdout
    bad = belay(db_url, "jobs", "list", "--state", "bogus")
    assert bad.exit_code == 2 and "bogus" in bad.output


def test_jobs_show_prints_the_journal_with_attempts_costs_events_children_and_signals(pipeline_db):
    db_url, ran_pipeline = pipeline_db
    shown = out(belay(db_url, "jobs", "show", str(ran_pipeline), "--json"))
    assert shown["job"]["state"] == "succeeded" and shown["job"]["result"] == {"total": 42, "children": 2}
    assert [(s["name"], s["usd_micros"], s["tokens"]) for s in shown["steps"]] == [
        ("fetch", 100, 7),
        ("$spawn:pages", 0, 0),
        ("summarize", 150, 10),
    ]
    assert shown["cost"] == {"usd_micros": 250, "tokens": 17}
    assert shown["attempts"][-1] == {"attempt": len(shown["attempts"]), "ended": "succeeded", "errors": []}
    assert {e["payload"]["progress"] for e in shown["events"]} == {0.5}
    assert [c["kind"] for c in shown["children"]] == ["page", "page"]
    assert {(s["name"], str(s["payload"])) for s in shown["signals"]} >= {("$steer", "{'hint': 'shorter'}")}
    human = belay(db_url, "jobs", "show", str(ran_pipeline))
    assert human.exit_code == 0 and "summarize" in human.stdout and "total cost: 250 µ$, 17 tokens" in human.stdout


def test_reading_an_unknown_job_is_refused_with_exit_1(pipeline_db):
    db_url, _ = pipeline_db
    for args in (("jobs", "show", "999"), ("steps", "999"), ("events", "999")):
        result = belay(db_url, *args)
        assert result.exit_code == 1 and "job 999 does not exist" in result.stderr, args
    refused = belay(db_url, "steps", "999", "--json")
    assert refused.exit_code == 1
    assert json.loads(refused.stdout) == {
        "error": "job 999 does not exist (it may have been pruned)",
        "refused": "not_found",
    }


def test_usage_errors_exit_2(pipeline_db):
    db_url, _ = pipeline_db
    assert belay(db_url, "jobs", "show", "abc").exit_code == 2
    assert belay(db_url, "retry", "0").exit_code == 2
    missing = CliRunner().invoke(main, ["stats"], env={"BELAY_DATABASE_URL": ""})
    assert missing.exit_code == 2 and "--database-url" in missing.output


def test_steps_and_events_list_a_jobs_journal_and_stream(pipeline_db):
    db_url, ran_pipeline = pipeline_db
    steps = out(belay(db_url, "steps", str(ran_pipeline), "--json"))
    assert [s["name"] for s in steps] == ["fetch", "$spawn:pages", "summarize"]
    assert steps[0]["value"] == {"n": 21}
    events = out(belay(db_url, "events", str(ran_pipeline), "--json"))
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1)) and len(events) >= 2


def test_events_follow_streams_new_events_until_the_job_is_terminal(db_url, client):
    job_id = client.enqueue("f", "k").id
    with PgStore(db_url) as store:
        [job] = store.apply(w.Claim(OLD, "f", "n1", 1, timedelta(minutes=5))).jobs
        store.apply(w.EmitEvent(OLD, job_id, {"n": 1}))

        def finish() -> None:
            store.apply(w.EmitEvent(OLD, job_id, {"n": 2}))
            store.apply(w.Ack(OLD, job_id, job.attempt, w.Succeed("done")))

        later = threading.Thread(target=finish)
        later.start()
        result = belay(db_url, "events", str(job_id), "--follow", "--interval", "0.02", "--json")
        later.join()
    assert result.exit_code == 0, result.output
    assert [json.loads(line)["payload"] for line in result.stdout.splitlines()] == [{"n": 1}, {"n": 2}]


def test_retry_re_readies_a_failed_job_and_refuses_a_non_terminal_one(db_url, client):
    job_id = client.enqueue("r", "k", max_attempts=1).id
    with PgStore(db_url) as store:
        [_job] = store.apply(w.Claim(OLD, "r", "n1", 1, timedelta(minutes=5))).jobs
        store.apply(w.Ack(OLD, job_id, 1, w.Fail("Boom", "boom", None)))
    assert out(belay(db_url, "retry", str(job_id), "--json")) == {"job_id": job_id, "retried": True, "state": "ready"}
    with unchanged(db_url):
        again = belay(db_url, "retry", str(job_id))
        assert again.exit_code == 1
        assert (
            f"job {job_id} is ready: only failed or cancelled jobs can be retried; nothing was changed" in again.stderr
        )
        assert belay(db_url, "retry", "999").exit_code == 1
        refused = belay(db_url, "retry", str(job_id), "--json")
        assert refused.exit_code == 1 and json.loads(refused.stdout)["refused"] == "not_retryable"


def test_cancel_cancels_a_parked_job_requests_a_running_one_and_refuses_a_terminal_one(db_url, client):
    parked = client.enqueue("c", "k").id
    assert out(belay(db_url, "cancel", str(parked), "--json"))["state"] == "cancelled"
    running = client.enqueue("c", "k").id
    with PgStore(db_url) as store:
        store.apply(w.Claim(OLD, "c", "n1", 1, timedelta(minutes=5)))
    requested = out(belay(db_url, "cancel", str(running), "--json"))
    assert requested["cancel_requested"] is True and client.job(running).cancel_requested
    with unchanged(db_url):
        again = belay(db_url, "cancel", str(parked))
        assert again.exit_code == 1 and f"job {parked} is already cancelled" in again.stderr
        assert belay(db_url, "cancel", "999").exit_code == 1


def test_signal_wakes_the_awaiting_job_and_bad_json_changes_nothing(db_url, client):
    job_id = client.enqueue(app.QUEUE, "approval", {}).id
    with PgStore(db_url) as store:
        app.drain(store, app.registry, lambda: OLD)
    assert client.job(job_id).state == "awaiting"
    with unchanged(db_url):
        bad = belay(db_url, "signal", f"job:{job_id}", "approve", "--payload", "{ok: true}")
        assert bad.exit_code == 2 and "not valid JSON" in bad.output
    woke = out(belay(db_url, "signal", f"job:{job_id}", "approve", "--payload", '{"ok": true}', "--json"))
    assert woke == {"scope": f"job:{job_id}", "name": "approve", "woken": [job_id]}
    assert client.job(job_id).state == "ready"
    assert [s.payload for s in client.signals(f"job:{job_id}")] == [{"ok": True}]


def test_steer_sends_a_steer_message_and_refuses_unknown_jobs_and_bad_json(db_url, client):
    job_id = client.enqueue("s", "k").id
    with unchanged(db_url):
        assert belay(db_url, "steer", "999", '{"a": 1}').exit_code == 1
        bad = belay(db_url, "steer", str(job_id), "{nope")
        assert bad.exit_code == 2 and "not valid JSON" in bad.output
    assert out(belay(db_url, "steer", str(job_id), '{"hint": "shorter"}', "--json"))["steered"] is True
    assert [(s.name, s.payload) for s in client.signals(f"job:{job_id}")] == [("$steer", {"hint": "shorter"})]


def test_queue_put_show_pause_and_resume_keep_each_others_options(db_url, client):
    client.enqueue("ai", "k")
    put = out(
        belay(
            db_url,
            "queue",
            "put",
            "ai",
            "--limit",
            "20",
            "--limit-min",
            "2",
            "--global-limit",
            "5",
            "--rate",
            "100/60",
            "--partition",
            "input.tenant",
            "--json",
        )
    )
    opts = {
        "limit": {"min": 2, "max": 20},
        "global_limit": 5,
        "rate": {"allowed": 100, "period": 60},
        "partition": {"field": "input", "key": "tenant"},
    }
    assert put == {"name": "ai", "opts": opts, "paused": False}
    assert out(belay(db_url, "queue", "pause", "ai", "--json"))["opts"] == {**opts, "paused": True}
    assert out(belay(db_url, "queue", "put", "ai", "--limit", "3", "--json"))["opts"] == {"limit": 3, "paused": True}
    shown = out(belay(db_url, "queue", "show", "ai", "--json"))
    assert (shown["paused"], shown["counts"]) == (True, {"ready": 1})
    assert out(belay(db_url, "queue", "resume", "ai", "--json"))["opts"] == {"limit": 3}
    assert [q["name"] for q in out(belay(db_url, "queue", "show", "--json"))] == ["ai"]
    assert "ai" in belay(db_url, "queue", "show").stdout
    with unchanged(db_url):
        bad = belay(db_url, "queue", "put", "ai", "--opts", '{"limt": 1}')
        assert bad.exit_code == 1 and "unknown queue options ['limt']" in bad.stderr
        assert belay(db_url, "queue", "put", "ai", "--opts", "{").exit_code == 2
        assert belay(db_url, "queue", "put", "ai", "--rate", "fast").exit_code == 2
        unknown = belay(db_url, "queue", "show", "nope")
        assert unknown.exit_code == 1 and "queue 'nope'" in unknown.stderr


def test_prune_dry_run_reports_exactly_what_prune_then_deletes(db_url, client, ran_pipeline):
    client.cancel(client.enqueue("p", "k").id)
    client.enqueue("p", "k")  # incomplete: never pruned
    # A terminal member of a workflow that is still settling is kept (its held dependent needs it).
    wf = client.enqueue_workflow(
        "wf",
        [
            WorkflowMember("a", JobSpec("p", "k")),
            WorkflowMember("b", JobSpec("p", "k"), deps=("a",)),
            WorkflowMember("c", JobSpec("p", "k")),
        ],
    )
    client.cancel(dict(wf.ids)["a"])  # a cancelled, b doomed (cancelled), c still ready
    assert client.job(dict(wf.ids)["b"]).state == "cancelled"
    with unchanged(db_url):
        dry = out(belay(db_url, "prune", "--dry-run", "--json"))
    assert dry["jobs"] == {"cancelled": 1, "succeeded": 3}  # the pipeline and its two children
    assert dry["steps"] == 5 and dry["events"] >= 2
    human = belay(db_url, "prune", "--dry-run", "--succeeded", "infinity")
    assert "would delete jobs: cancelled 1" in human.stdout and "succeeded" not in human.stdout.split(";")[0]
    done = out(belay(db_url, "prune", "--json"))
    assert done["pruned_jobs"] == 4
    assert out(belay(db_url, "prune", "--dry-run", "--json"))["jobs"] == {}
    assert belay(db_url, "prune", "--dry-run", "--failed", "soon").exit_code == 2


def test_replay_prints_what_the_job_did_and_exits_3_on_a_divergence(pipeline_db):
    db_url, ran_pipeline = pipeline_db
    plain = belay(db_url, "replay", str(ran_pipeline))
    assert plain.exit_code == 0 and "timeline" in plain.stdout and "summarize" in plain.stdout
    clean = belay(db_url, "replay", str(ran_pipeline), "--app", "tests.apps.replay_app", "--json")
    assert clean.exit_code == 0 and json.loads(clean.stdout)["clean"] is True
    diverged = belay(db_url, "replay", str(ran_pipeline), "--app", "tests.apps.replay_app:renamed")
    assert diverged.exit_code == 3
    assert "DIVERGED (step) at journal position 3" in diverged.stdout and "summarise" in diverged.stdout
    assert belay(db_url, "replay", "999").exit_code == 1
    assert belay(db_url, "replay", str(ran_pipeline), "--app", "tests.apps.nope").exit_code == 2
