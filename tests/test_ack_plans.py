"""Fenced acks find their rows through the primary key, never by scanning the running rows (issue 54).

§7's fence is "state = 'running' AND attempt = <the attempt>". Spelled plainly, it lets the planner answer a
group of acks from belay_jobs_lease_idx (its predicate is state = 'running'): one scan of every running row
of every queue — and of every dead entry since the last VACUUM — hashed against the acked ids. Statistics
taken while the jobs were ready (a fresh backlog, the usual case) make that index look empty, so the plan is
chosen exactly when it is worst: 8 worker processes of 200 slots each hold 1,600 running rows, and each
group of 100 acks fetched all 1,600 from the heap (1,600 "Rows Removed by Filter" in the `blocked` test of
ack_claim_solo). The statements spell the fence so that no partial index's predicate matches it
(impl/store/sql/worker.sql); the acked rows are then found by id.

The single-row fenced writes by id (`WHERE id = $id AND <running> AND attempt = $n`: the acks, the parks, the step
locks) took the same index under the same statistics — a scan of every running row for one id, 41–63
buffers against 4–7 through the primary key, and a VACUUM did not change the choice (an ANALYZE that sees
the running rows does) — and are spelled the same way.

Checked on a 20,000-job table whose statistics say "no running rows" while 1,600 run, with both the plan
the first executions get (custom) and the one a prepared statement settles on (generic).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from impl.store import PgStore
from impl.store.queries import SchemaSQL
from model import ops
from model import worker_ops as w
from model.envelope import encode

TTL = timedelta(seconds=60)
RUNNING = 1600
BACKLOG = 20_000  # a table where reading all of it is not the cheap way (at a few thousand rows it is)
GROUP = 100


def _nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    out = [plan]
    for child in plan.get("Plans", ()):
        out.extend(_nodes(child))
    return out


@pytest.fixture
def running(db_url: str, now) -> list:
    with PgStore(db_url, notify=False) as s:
        for _ in range(BACKLOG // 1000):
            s.apply(ops.Enqueue(now, tuple(ops.JobSpec("q", "k") for _ in range(1000))))
        with psycopg.connect(db_url, autocommit=True) as c:
            c.execute("ANALYZE belay_jobs")  # every row ready: the statistics see no running row
        jobs: list = []
        for i in range(RUNNING // 200):
            jobs.extend(s.apply(w.Claim(now, "q", f"n{i}", 200, TTL)).jobs)
    assert len(jobs) == RUNNING
    return jobs


def _statements(jobs: list, now) -> dict[str, tuple[bytes, dict[str, Any]]]:
    q = SchemaSQL("public")
    group = jobs[:GROUP]
    ids = "{" + ",".join(str(j.id) for j in group) + "}"
    attempts = "{" + ",".join(str(j.attempt) for j in group) + "}"
    results, nows = [encode(None)] * GROUP, [now] * GROUP
    one = group[0]
    single = {"id": one.id, "attempt": one.attempt, "now": now}
    return {
        "ack_succeed_solo": (q.qb("ack_succeed_solo"), {**single, "result": encode(None)}),
        "ack_succeed": (q.qb("ack_succeed"), {**single, "result": encode(None)}),
        "ack_error": (q.qb("ack_error"), {**single, "retry_at": now, "entry": Jsonb([{"error": "x"}])}),
        "ack_cancel": (q.qb("ack_cancel"), single),
        "ack_snooze": (q.qb("ack_snooze"), {**single, "until": now}),
        # the HTTP API's fenced writes (impl/store/sql/http.sql), beside the workers on one database
        "http_complete_solo": (
            q.qb("http_complete_solo"),
            {**single, "result": encode(None), "channel": None, "payload": None},
        ),
        "http_extend_lease": (q.qb("http_extend_lease"), {**single, "until": now + TTL}),
        "ack_succeed_many": (
            q.qb("ack_succeed_many"),
            {"ids": ids, "attempts": attempts, "results": results, "nows": nows},
        ),
        "ack_succeed_many_same": (
            q.qb("ack_succeed_many_same"),
            {"ids": ids, "attempts": attempts, "result": encode(None), "now": now},
        ),
        "ack_claim_solo": (
            q.qb_take("ack_claim_solo", GROUP),
            {
                "ids": ids,
                "attempts": attempts,
                "results": results,
                "nows": nows,
                "queue": "q",
                "claim_now": now,
                "take": GROUP,
                "node": "n9",
                "lease_until": now + TTL,
            },
        ),
    }


@pytest.mark.parametrize("cache_mode", ["force_custom_plan", "force_generic_plan"])
def test_a_group_of_acks_never_scans_the_running_rows(db_url, running, now, cache_mode):
    with psycopg.connect(db_url) as c:
        c.execute(f"SET plan_cache_mode = {cache_mode}")
        for name, (query, params) in _statements(running, now).items():
            with c.cursor(binary=True) as cur:
                cur.execute(b"EXPLAIN (ANALYZE, FORMAT JSON) " + query, params)
                (plan,) = cur.fetchone()[0]
            c.rollback()  # EXPLAIN ANALYZE ran the acks: undo them for the next statement
            nodes = _nodes(plan["Plan"])
            on_running = [n for n in nodes if n.get("Index Name") == "belay_jobs_lease_idx"]
            seq = [n for n in nodes if n.get("Node Type") == "Seq Scan" and n.get("Relation Name") == "belay_jobs"]
            assert not on_running and not seq, f"{name} ({cache_mode}) scans the running rows: " + "; ".join(
                f"{n['Node Type']} {n.get('Index Name', '')} rows {n.get('Actual Rows')}" for n in on_running + seq
            )
            size = GROUP if "many" in name or "claim" in name else 1
            acked = [n for n in nodes if n.get("Node Type") == "ModifyTable" and n.get("Actual Rows") == size]
            assert acked, f"{name} ({cache_mode}) did not ack the {size} row(s) it was given"
