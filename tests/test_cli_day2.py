"""What a new user broke in an hour (issue 29, item 3), each on real PostgreSQL through the `belay` CLI:
a ghost queue from `queue pause nosuchqueue` (and `queue delete`), a retry of a doomed workflow member
that said nothing, `status` naming the wrong source of its URL, error classes printed twice, `status`
and `migrate` without `--json`, and a busy dashboard port exiting with replay's divergence code 3.
"""

from __future__ import annotations

import json
import socket

import psycopg
import pytest
from click.testing import CliRunner

from impl.client import Client
from impl.ops.cli import main
from impl.store import PgStore
from model import worker_ops as w
from model.ops import JobSpec, WorkflowMember
from tests.test_cli_ops import OLD, belay, out, unchanged


def test_pausing_or_resuming_an_unknown_queue_is_refused_and_leaves_no_ghost_row(db_url):
    with unchanged(db_url):
        for verb in ("pause", "resume"):
            refused = belay(db_url, "queue", verb, "nosuchqueue")
            assert refused.exit_code == 1, refused.output
            assert "queue 'nosuchqueue'" in refused.stderr and "queue put" in refused.stderr, refused.stderr
        as_json = belay(db_url, "queue", "pause", "nosuchqueue", "--json")
        assert as_json.exit_code == 1 and json.loads(as_json.stdout)["refused"] == "not_found"
    # --create pauses a queue whose jobs have not arrived yet
    assert out(belay(db_url, "queue", "pause", "later", "--create", "--json"))["paused"] is True
    # a queue with jobs but no row yet can be paused
    with Client(db_url, clock=lambda: OLD) as client:
        client.enqueue("ai", "k")
    assert out(belay(db_url, "queue", "pause", "ai", "--json"))["paused"] is True


def test_queue_delete_removes_the_row_and_refuses_an_unknown_one(db_url):
    assert out(belay(db_url, "queue", "put", "ghost", "--limit", "4", "--json"))["opts"] == {"limit": 4}
    deleted = out(belay(db_url, "queue", "delete", "ghost", "--json"))
    assert deleted == {"name": "ghost", "deleted": True, "opts": {"limit": 4}}
    with psycopg.connect(db_url, autocommit=True) as c:
        assert c.execute("SELECT count(*) FROM belay_queues").fetchone()[0] == 0
    with unchanged(db_url):
        again = belay(db_url, "queue", "delete", "ghost")
        assert again.exit_code == 1 and "queue 'ghost' has no belay_queues row" in again.stderr, again.output


def test_retrying_a_doomed_workflow_member_says_why_and_exits_1(db_url):
    with Client(db_url, clock=lambda: OLD) as client:
        wf = client.enqueue_workflow(
            "wf-doom",
            [
                WorkflowMember("fetch", JobSpec("default", "fetch")),
                WorkflowMember("summarize", JobSpec("default", "summarize"), deps=("fetch",)),
            ],
        )
        ids = dict(wf.ids)
        client.cancel(ids["fetch"])
    result = belay(db_url, "retry", str(ids["summarize"]))
    assert result.exit_code == 1, result.output
    assert f"job {ids['summarize']} was not retried" in result.stderr, result.stderr
    assert f"'fetch' (job {ids['fetch']}) is cancelled" in result.stderr, result.stderr
    as_json = belay(db_url, "retry", str(ids["summarize"]), "--json")
    assert as_json.exit_code == 1 and json.loads(as_json.stdout)["refused"] == "doomed"
    # retrying the dependency first works, and says so
    assert out(belay(db_url, "retry", str(ids["fetch"]), "--json"))["state"] == "ready"


def test_status_names_where_its_url_came_from(db_url):
    given = CliRunner().invoke(main, ["status", "--database-url", db_url], env={"BELAY_DATABASE_URL": None})
    assert given.exit_code == 0, given.output
    assert "--database-url" in given.output.splitlines()[0] and "BELAY_DATABASE_URL" not in given.output, given.output
    from_env = CliRunner().invoke(main, ["status"], env={"BELAY_DATABASE_URL": db_url})
    assert from_env.exit_code == 0 and "BELAY_DATABASE_URL" in from_env.output.splitlines()[0], from_env.output


def test_status_and_migrate_take_json(db_url):
    with Client(db_url, clock=lambda: OLD) as client:
        client.enqueue("ai", "k")
    status = out(belay(db_url, "status", "--json"))
    assert status["schema"] == "public" and status["version"] == 3 and status["contract_major"] == 1
    assert status["source"] == "BELAY_DATABASE_URL" and status["jobs"] == {"ai": {"ready": 1}}
    migrated = out(belay(db_url, "migrate", "--json"))
    assert migrated == {"schema": "public", "applied": [], "version": 3, "contract_major": 1}


def test_an_error_class_is_printed_once_in_jobs_show(db_url):
    with Client(db_url, clock=lambda: OLD) as client, PgStore(db_url) as store:
        job_id = client.enqueue("q", "boom", max_attempts=1).id
        store.apply(w.Claim(OLD, "q", "n1", 1))
        store.apply(w.Ack(OLD, job_id, 1, w.Fail("RuntimeError", "RuntimeError: disk on fire", None)))
    shown = belay(db_url, "jobs", "show", str(job_id))
    assert shown.exit_code == 0, shown.output
    assert "RuntimeError: disk on fire" in shown.stdout, shown.stdout
    assert "RuntimeError: RuntimeError" not in shown.stdout, shown.stdout
    replayed = belay(db_url, "replay", str(job_id))
    assert "error 'RuntimeError: disk on fire'" in replayed.stdout, replayed.stdout
    assert "RuntimeError: 'RuntimeError" not in replayed.stdout, replayed.stdout


@pytest.mark.parametrize("command", ["dashboard", "serve"])
@pytest.mark.parametrize("checked", [True, False], ids=["checked first", "uvicorn's own failure"])
def test_a_busy_port_exits_1_with_a_message_not_replays_code_3(db_url, command, checked, monkeypatch):
    if not checked:  # the bind lost to a race after the check: uvicorn's startup failure (exit 3) maps to 1
        monkeypatch.setattr("impl.ops.cli._check_port", lambda host, port: None)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = CliRunner().invoke(main, [command, "--database-url", db_url, "--port", str(port)])
    assert result.exit_code == 1, (result.exit_code, result.output)
    assert f"127.0.0.1:{port}" in result.output, result.output
    if checked:
        assert "address already in use" in result.output, result.output
