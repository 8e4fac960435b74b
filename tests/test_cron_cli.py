"""Crons as a first-class object (issue 29, item 4): `belay cron list|put|pause|resume|delete` with the
next due slots and the last fired job, static crons declared beside kinds (Registry.cron) that the
runtime fires and `--app` lists and pauses, and `jobs list --parent / --error`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from impl.client import Client
from impl.runtime import QueueConfig, Worker, WorkerConfig
from impl.store import PgStore
from impl.worker import Registry
from model import worker_ops as w
from model.ops import JobSpec
from tests.apps import cron_app
from tests.test_cli_ops import OLD, belay, out, unchanged

APP = "tests.apps.cron_app"


def test_cron_put_list_pause_resume_delete_with_next_slots(db_url):
    put = out(belay(db_url, "cron", "put", "nightly-x", "0 3 * * *", "report", "--input", '{"a": 1}', "--json"))
    assert {k: put[k] for k in ("name", "expression", "kind", "queue", "input", "paused", "source")} == {
        "name": "nightly-x",
        "expression": "0 3 * * *",
        "kind": "report",
        "queue": "default",
        "input": {"a": 1},
        "paused": False,
        "source": "row",
    }
    slots = [datetime.fromisoformat(s) for s in put["next_slots"]]
    now = datetime.now(UTC)
    assert len(slots) == 3 and all((s.hour, s.minute) == (3, 0) for s in slots), slots
    assert now < slots[0] <= now + timedelta(days=1) and slots[1] - slots[0] == timedelta(days=1)
    assert put["last_fired"] is None
    listed = out(belay(db_url, "cron", "list", "--slots", "5", "--json"))
    assert [c["name"] for c in listed] == ["nightly-x"] and len(listed[0]["next_slots"]) == 5
    paused = out(belay(db_url, "cron", "pause", "nightly-x", "--json"))
    assert paused["paused"] is True and paused["next_slots"] == []
    # a put keeps the pause state unless told
    again = out(belay(db_url, "cron", "put", "nightly-x", "*/5 * * * *", "report", "--queue", "q", "--json"))
    assert (again["paused"], again["queue"], again["expression"]) == (True, "q", "*/5 * * * *")
    resumed = out(belay(db_url, "cron", "resume", "nightly-x", "--json"))
    assert resumed["paused"] is False and all(datetime.fromisoformat(s).minute % 5 == 0 for s in resumed["next_slots"])
    table = belay(db_url, "cron", "list")
    assert table.exit_code == 0 and "nightly-x" in table.stdout and "*/5 * * * *" in table.stdout
    assert out(belay(db_url, "cron", "delete", "nightly-x", "--json")) == {"name": "nightly-x", "deleted": True}
    assert out(belay(db_url, "cron", "list", "--json")) == []


def test_cron_refusals_change_nothing(db_url):
    with unchanged(db_url):
        bad = belay(db_url, "cron", "put", "c", "61 * * * *", "report")
        assert bad.exit_code == 1 and "invalid cron expression" in bad.stderr, bad.output
        four = belay(db_url, "cron", "put", "c", "* * * *", "report")
        assert four.exit_code == 1 and "five fields" in four.stderr
        for verb in ("pause", "resume", "delete"):
            missing = belay(db_url, "cron", verb, "nope")
            assert missing.exit_code == 1 and "cron 'nope' has no belay_crons row" in missing.stderr, missing.output
        assert belay(db_url, "cron", "list", "nope").exit_code == 1
        assert belay(db_url, "cron", "put", "c", "* * * * *", "report", "--input", "{").exit_code == 2


def test_static_crons_declared_beside_kinds_are_listed_paused_and_fired(db_url):
    declared = {c.name: c for c in cron_app.registry.static_crons()}
    assert (declared["nightly"].queue, declared["every-minute"].queue) == ("reports", "other")
    assert belay(db_url, "cron", "list", "--json").stdout.strip() == "[]"  # not rows: only with --app
    listed = {c["name"]: c for c in out(belay(db_url, "cron", "list", "--app", APP, "--json"))}
    assert set(listed) == {"nightly", "every-minute"} and listed["nightly"]["source"] == "static"
    assert listed["every-minute"]["priority"] == 2 and listed["nightly"]["input"] == {"scope": "all"}
    refused = belay(db_url, "cron", "pause", "every-minute")
    assert refused.exit_code == 1 and "--app" in refused.stderr
    paused = out(belay(db_url, "cron", "pause", "every-minute", "--app", APP, "--json"))
    assert (paused["paused"], paused["source"], paused["queue"]) == (True, "row over static", "other")

    # the runtime fires the registry's crons — not the paused one — and only its queues' with exclusive_queues
    def fire(config: WorkerConfig) -> list[tuple[str, str]]:
        worker = Worker(db_url, cron_app.registry, config)
        try:
            worker.sweep_once(datetime.now(UTC) - timedelta(days=1, minutes=1))
        finally:
            worker.store.close()
        with PgStore(db_url) as store, store.transaction(None) as tx:
            return sorted({(r["cron_name"], r["queue"]) for r in tx.all("snapshot_jobs") if r["cron_name"]})

    assert fire(WorkerConfig(queues=(QueueConfig("other"),), exclusive_queues=True)) == []
    assert fire(WorkerConfig()) == [("nightly", "reports")]
    out(belay(db_url, "cron", "resume", "every-minute", "--app", APP, "--json"))
    assert ("every-minute", "other") in fire(WorkerConfig(queues=(QueueConfig("other"),), exclusive_queues=True))
    last = out(belay(db_url, "cron", "list", "nightly", "--app", APP, "--json"))["last_fired"]
    assert last is not None and last["state"] == "ready" and last["slot"].endswith("T03:00:00+00:00")


def test_a_registry_refuses_a_cron_declared_twice_or_with_a_bad_expression():
    registry = Registry()
    registry.cron("a", "* * * * *", "k")
    with pytest.raises(ValueError, match="declared twice"):
        registry.cron("a", "* * * * *", "k")
    with pytest.raises(Exception, match="five fields"):
        registry.cron("b", "* * *", "k")
    assert registry.static_crons()[0].queue == "default"  # a kind it does not run: 'default'


def test_jobs_list_filters_by_parent_and_by_error_text(db_url):
    with Client(db_url, clock=lambda: OLD) as client, PgStore(db_url) as store:
        parent = client.enqueue("p", "parent").id
        other = client.enqueue("p", "parent").id
        store.apply(w.Claim(OLD, "p", "n1", 2))  # both parents running: they can spawn
        kids = store.apply(w.Spawn(OLD, parent, "kids", (JobSpec("c", "kid"), JobSpec("c", "kid")))).child_ids
        store.apply(w.Spawn(OLD, other, "kids", (JobSpec("c", "kid"),)))
        failing = client.enqueue("e", "boom", max_attempts=1).id
        plain = client.enqueue("e", "boom", max_attempts=1).id
        store.apply(w.Claim(OLD, "e", "n1", 2))
        store.apply(w.Ack(OLD, failing, 1, w.Fail("DiskFull", "DiskFull: 100% of /var used", None)))
        store.apply(w.Ack(OLD, plain, 1, w.Fail("Timeout", "Timeout: upstream", None)))

    def ids(*args: str) -> list[int]:
        return [j["id"] for j in out(belay(db_url, "jobs", "list", *args, "--json"))["jobs"]]

    assert ids("--parent", str(parent)) == sorted(kids, reverse=True)
    assert ids("--error", "diskfull") == [failing]  # case-insensitive, class or detail
    assert ids("--error", "100%") == [failing]  # LIKE wildcards are literal
    assert ids("--error", "_") == []
    assert ids("--error", "upstream", "--queue", "e") == [plain]
