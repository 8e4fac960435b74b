"""Trace validation accepts the contract's allowed set, not the reference's shapes (issue 51 item 1).

Each test drives a history in which a *foreign* worker — SQL written by hand, as a Node.js or Go SDK
would send it — makes one choice the contract leaves free and the reference SDK does not make (the
shared names of `BELAY_ALT`, docs/certification.md "Allowed alternatives"), captures it with the soak's
own HistoryCheck and judges it: the rule replay (per-commit §11 invariants) and the refinement must both
call it valid. Next to each, a near-miss that breaks what the contract does fix must stay unexplained.

These tests stand in for the Node worker's broken-but-legal probes until the two are run end to end:
test name → probe: split_spawn, children_each, iso_z, reclaim_each, cron_each, clear_children_apart,
renew_per_queue, claim_one, step_then_spend (the illegal one)."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from impl.client import Client
from impl.store import PgStore
from model import ops
from model import worker_ops as w
from soak.hook import HistoryCheck
from soak.judges.refine import RefinementResult, validate
from soak.judges.replay import load_state
from soak.record.capture import read_transactions
from tests.logical import logical_cluster, logical_url  # noqa: F401  (fixtures: cluster, url)

TTL = timedelta(seconds=30)


class Captured:
    """A capture around a block of writes: `.result` is the soak's merged history verdict (rule replay +
    refinement), `.validate()` the refinement alone."""

    def __init__(self, url: str, tmp: Path, name: str) -> None:
        self.tmp = tmp
        self.hist = HistoryCheck.begin(url, tmp, name)

    def __enter__(self) -> Captured:
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            if exc[0] is None:
                self.hist.finish()
        finally:
            assert self.hist.close()

    @property
    def merged(self) -> Any:
        return self.hist.result

    def validate(self) -> RefinementResult:
        return validate(
            list(read_transactions(self.tmp / "history.bin")),
            None,
            load_state(self.tmp / "history-initial.pickle"),
            final_state=load_state(self.tmp / "history-final.pickle"),
        )


def now() -> datetime:
    return datetime.now(UTC)


def first(r: RefinementResult) -> str:
    return "\n".join(f.detail() for f in r.findings[:3]) if r.findings else r.line()


def ms(t: datetime) -> datetime:
    """JavaScript's Date: millisecond precision."""
    return t.replace(microsecond=t.microsecond // 1000 * 1000)


def iso_z(t: datetime) -> str:
    """Date.prototype.toISOString(): `2026-12-06T21:03:04.490Z`."""
    t = t.astimezone(UTC)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def js(value: Any) -> bytes:
    """JSON.stringify: the §2 JSON envelope."""
    return json.dumps(value, separators=(",", ":")).encode()


class Foreign:
    """A foreign SDK's statements, each call its own transaction unless inside `with f.tx():`."""

    def __init__(self, url: str) -> None:
        self.conn = psycopg.connect(url, autocommit=True)

    def close(self) -> None:
        self.conn.close()

    def tx(self) -> Any:
        return self.conn.transaction()

    def x(self, sql: str, *args: Any) -> list[tuple]:
        cur = self.conn.execute(sql, args)
        return cur.fetchall() if cur.description else []

    # §8.4, split: the children with their keys, then (later) the journal rebuilt from the keys
    def insert_child(self, parent: int, name: str, index: int, at: datetime, queue: str = "kids", mode: str = "always"):
        return self.x(
            "INSERT INTO belay_jobs (queue, worker, input, meta, state, priority, attempt, max_attempts, ready_at, "
            "inserted_at, errors, cancel_requested, unique_key, unique_mode, parent_id, spent_usd_micros, spent_tokens) "
            "VALUES (%s, 'kid', %s, '{}', 'ready', 0, 0, 3, %s, %s, '[]', false, %s, %s, %s, 0, 0) "
            "ON CONFLICT DO NOTHING RETURNING id",
            queue,
            Jsonb({"i": index}),
            at,
            at,
            f"$spawn:{parent}:{name}:{index}",
            mode,
            parent,
        )

    def key_ids(self, parent: int, name: str, n: int) -> list[int]:
        keys = [f"$spawn:{parent}:{name}:{i}" for i in range(n)]
        held = dict(
            self.x(
                "SELECT unique_key, id FROM belay_jobs WHERE unique_key = ANY(%s) AND unique_mode IN ('window', 'always')",
                keys,
            )
        )
        return [held[k] for k in keys]

    def journal(self, job: int, name: str, value: bytes, at: datetime, usd: int = 0, tokens: int = 0) -> None:
        self.x(
            "INSERT INTO belay_steps (job_id, seq, name, value, usd_micros, tokens, inserted_at) "
            "SELECT %s, COALESCE(MAX(seq), 0) + 1, %s, %s, %s, %s, %s FROM belay_steps WHERE job_id = %s "
            "ON CONFLICT (job_id, name) DO NOTHING",
            job,
            name,
            value,
            usd,
            tokens,
            at,
            job,
        )

    def sleep(self, job: int, attempt: int, name: str, spelled: str, until: datetime, at: datetime) -> None:
        with self.tx():
            self.journal(job, f"$sleep:{name}", js(spelled), at)
            self.x(
                "UPDATE belay_jobs SET state = 'ready', ready_at = %s, lease_until = NULL, leased_by = NULL, "
                "max_attempts = max_attempts + 1 WHERE id = %s AND state = 'running' AND attempt = %s",
                until,
                job,
                attempt,
            )


def claim(store: PgStore, queue: str, node: str = "n1", demand: int = 10, ttl: timedelta = TTL) -> list[int]:
    return [j.id for j in store.apply(w.Claim(now(), queue, node, demand, ttl)).jobs]


def spawned_parent(store: PgStore, client: Client) -> tuple[int, int]:
    parent = client.enqueue("q", "parent", {}, max_attempts=3).id
    (got,) = claim(store, "q", demand=1)
    assert got == parent
    return parent, 1


def finish_family(store: PgStore, parent: int, attempt: int, kids: list[int]) -> None:
    """The rest of a spawn in the reference's own shapes: await children, run them, the parent resumes."""
    store.apply(w.AwaitChildren(now(), parent, attempt))
    assert sorted(claim(store, "kids")) == sorted(kids)
    for k in kids:
        store.apply(w.Ack(now(), k, 1, w.Succeed({"k": k})))
    (again,) = claim(store, "q", demand=1)
    assert again == parent
    store.apply(w.Ack(now(), parent, attempt + 1, w.Succeed(kids)))


def assert_valid(cap: Captured) -> RefinementResult:
    r = cap.validate()
    assert r.verdict == "valid", first(r)
    assert cap.merged.verdict == "valid", (cap.merged.why, [str(f) for f in cap.merged.findings[:3]])
    return r


# --------------------------------------------------------------------------------------------------
# split_spawn, children_each


def test_split_spawn_children_then_a_later_journal_is_valid(url, tmp_path):
    """split_spawn: the children in one transaction, `$spawn:<name>` journaled in the next — §8.4 "the
    id list is rebuilt by fetching those keys", §11.8 "regardless of crashes between insert and journal"."""
    f = Foreign(url)
    with Captured(url, tmp_path, "split") as cap:
        with PgStore(url) as store, Client(url) as client:
            parent, attempt = spawned_parent(store, client)
            t = now()
            with f.tx():
                for i in range(3):
                    f.insert_child(parent, "kids", i, t)
            ids = f.key_ids(parent, "kids", 3)
            f.journal(parent, "$spawn:kids", js(ids), now())
            finish_family(store, parent, attempt, ids)
    f.close()
    r = assert_valid(cap)
    assert r.by_kind["spawn_children"] == 1 and r.by_kind["spawn"] == 1, dict(r.by_kind)


def test_children_each_in_reverse_order_journaled_by_a_later_attempt_is_valid(url, tmp_path):
    """children_each: one INSERT per child, each its own transaction, in reverse index order (ids descend
    with the index); the first attempt crashes before the journal, the lease expires, the second attempt's
    re-insert skips every key and journals the ids fetched by the keys."""
    f = Foreign(url)
    with Captured(url, tmp_path, "each") as cap:
        with PgStore(url) as store, Client(url) as client:
            parent = client.enqueue("q", "parent", {}, max_attempts=3).id
            assert claim(store, "q", demand=1, ttl=timedelta(milliseconds=1)) == [parent]
            for i in (2, 1, 0):
                f.insert_child(parent, "kids", i, now())
            time.sleep(0.01)  # attempt 1 dies here; its lease expires
            assert store.apply(w.Reclaim(now(), w.Backoff(0, 1, 0))).retried == (parent,)
            assert claim(store, "q", demand=1) == [parent]
            for i in (2, 1, 0):
                assert f.insert_child(parent, "kids", i, now()) == []  # held: ON CONFLICT DO NOTHING
            ids = f.key_ids(parent, "kids", 3)
            assert ids == sorted(ids, reverse=True)
            f.journal(parent, "$spawn:kids", js(ids), now())
            finish_family(store, parent, 2, ids)
    f.close()
    r = assert_valid(cap)
    assert r.by_kind["spawn_children"] == 3 and r.by_kind["spawn"] == 1, dict(r.by_kind)


def test_a_split_spawn_journal_that_is_not_the_keys_list_is_invalid(url, tmp_path):
    """Near-misses: the journal lists the ids in the wrong order (not the ids fetched by the keys); a
    child inserted after its spawn was journaled; a journal declaring fewer children than the keys hold;
    a child whose key is not mode `always`."""
    f = Foreign(url)
    with Captured(url, tmp_path, "wronglist") as cap:
        with PgStore(url) as store, Client(url) as client:
            p1, _ = spawned_parent(store, client)
            t = now()
            with f.tx():
                for i in range(2):
                    f.insert_child(p1, "kids", i, t)
            ids = f.key_ids(p1, "kids", 2)
            f.journal(p1, "$spawn:kids", js(ids[::-1]), now())  # not the keys' order
            late = f.insert_child(p1, "kids", 2, now())[0][0]  # a child after the journal: the spawn is memoized
            p2, _ = spawned_parent(store, client)
            t = now()
            with f.tx():
                for i in range(3):
                    f.insert_child(p2, "kids", i, t)
            f.journal(p2, "$spawn:kids", js(f.key_ids(p2, "kids", 2)), now())  # child 2 left out
            p3, _ = spawned_parent(store, client)
            f.insert_child(p3, "kids", 0, now(), mode="incomplete")  # not the always-key shape
    f.close()
    r = cap.validate()
    assert r.verdict == "invalid" and r.unexplained == 4, first(r)
    texts = [f.detail() for f in r.findings]
    assert any(f"belay_steps ({p1}, '$spawn:kids').value" in t for t in texts), texts
    assert any(f"belay_jobs {late}: the transaction writes" in t for t in texts), texts
    assert any("journals 2 child id(s), but job" in t and f"'$spawn:{p2}:kids:2'" in t for t in texts), texts
    assert any("unique_mode: transaction 'incomplete', model 'always'" in t for t in texts), texts


# --------------------------------------------------------------------------------------------------
# iso_z


def test_iso_z_spellings_of_the_wake_time_and_error_times_are_valid(url, tmp_path):
    """iso_z: the `$sleep:<name>` wake time and an error entry's `at` spelled as JavaScript's
    toISOString() (decisions.md: "an ISO-8601 string"; §2: "never interpret a foreign SDK's reserved
    values" — the spelling is free, the instant is what the ack's ready_at must be)."""
    f = Foreign(url)
    with Captured(url, tmp_path, "isoz") as cap:
        with PgStore(url) as store, Client(url) as client:
            a = client.enqueue("q", "sleeper", {}, max_attempts=3).id
            b = client.enqueue("q", "k", {}, max_attempts=1).id
            c = client.enqueue("q", "k", {}, max_attempts=3).id
            assert sorted(claim(store, "q")) == [a, b, c]
            until = ms(now() + timedelta(milliseconds=300))
            f.sleep(a, 1, "nap", iso_z(until), until, ms(now()))
            t = ms(now())
            f.x(  # a terminal failure, `at` in JavaScript's spelling
                "UPDATE belay_jobs SET state = 'failed', finished_at = %s, lease_until = NULL, leased_by = NULL, "
                "errors = errors || %s WHERE id = %s AND state = 'running' AND attempt = 1",
                t,
                Jsonb([{"attempt": 1, "at": iso_z(t), "error": "boom", "detail": None}]),
                b,
            )
            t = ms(now())
            f.x(  # a success whose result holds a timestamp in that spelling
                "UPDATE belay_jobs SET state = 'succeeded', finished_at = %s, result = %s, lease_until = NULL, "
                "leased_by = NULL WHERE id = %s AND state = 'running' AND attempt = 1",
                t,
                js({"at": iso_z(t)}),
                c,
            )
            time.sleep(0.35)
            (again,) = claim(store, "q")
            store.apply(w.Ack(now(), again, 2, w.Succeed(None)))
    f.close()
    r = assert_valid(cap)
    assert r.by_kind["sleep"] == 1 and r.by_kind["ack"] == 3, dict(r.by_kind)


def test_a_sleep_whose_ready_at_is_not_its_journaled_wake_time_is_invalid(url, tmp_path):
    """Near-misses: the ack's ready_at one second off the journaled instant; a wake time that is no
    ISO-8601 string."""
    f = Foreign(url)
    with Captured(url, tmp_path, "sleepoff") as cap:
        with PgStore(url) as store, Client(url) as client:
            a = client.enqueue("q", "sleeper", {}).id
            b = client.enqueue("q", "sleeper", {}).id
            assert sorted(claim(store, "q")) == [a, b]
            until = ms(now() + timedelta(seconds=5))
            f.sleep(a, 1, "nap", iso_z(until), until + timedelta(seconds=1), ms(now()))
            f.sleep(b, 1, "nap", "in five seconds", until, ms(now()))
    f.close()
    r = cap.validate()
    assert r.verdict == "invalid" and r.unexplained == 2, first(r)
    texts = [f.detail() for f in r.findings]
    assert any(f"belay_jobs {a}.ready_at" in t for t in texts), texts
    assert any(f"job {b}: $sleep value is no ISO-8601 wake time" in t for t in texts), texts


# --------------------------------------------------------------------------------------------------
# reclaim_each, cron_each


def test_reclaim_each_one_transaction_per_expired_lease_is_valid(url, tmp_path):
    """reclaim_each: each expired lease in its own transaction, the higher id first, one of them failed
    on its last attempt with §7's settlement in the same transaction (§6: "then per row apply outcome …
    including full §7 settlement")."""
    f = Foreign(url)
    with Captured(url, tmp_path, "reclaimeach") as cap:
        with PgStore(url) as store, Client(url) as client:
            client.enqueue_workflow(
                "wf",
                [
                    ops.WorkflowMember("a", ops.JobSpec("q", "k", max_attempts=1)),
                    ops.WorkflowMember("b", ops.JobSpec("q", "k"), ("a",)),
                ],
            )
            plain = client.enqueue("q", "k", {}, max_attempts=3).id
            got = claim(store, "q", ttl=timedelta(milliseconds=1))
            a = min(i for i in got if i != plain)
            time.sleep(0.01)
            t = ms(now())
            with f.tx():  # the higher id first: a retry
                f.x(
                    "UPDATE belay_jobs SET state = 'ready', ready_at = %s, lease_until = NULL, leased_by = NULL, "
                    "errors = errors || %s WHERE id = %s AND state = 'running' AND lease_until <= %s",
                    t,
                    Jsonb([{"attempt": 1, "at": iso_z(t), "error": "lease_expired", "detail": None}]),
                    plain,
                    t,
                )
            store.apply(w.Reclaim(now(), w.Backoff(0, 1, 0), limit=1))  # then a: failed, b doomed with it
            assert client.job(a + 1).state == "cancelled"
    f.close()
    r = assert_valid(cap)
    assert r.by_kind["reclaim"] == 2, dict(r.by_kind)


def test_cron_each_one_transaction_per_slot_is_valid_and_an_early_slot_is_not(url, tmp_path):
    """cron_each: §8.5 "For each due minute slot (UTC-truncated), insert" — each slot its own
    transaction, in any order (the oldest first leaves later due slots to later transactions). Near-miss:
    a slot not yet due."""
    f = Foreign(url)

    def fire(slot: datetime, at: datetime) -> None:
        f.x(
            "INSERT INTO belay_jobs (queue, worker, input, meta, state, priority, attempt, max_attempts, ready_at, "
            "inserted_at, errors, cancel_requested, cron_name, cron_slot, spent_usd_micros, spent_tokens) "
            "VALUES ('cq', 'k', '{}', '{}', 'ready', 0, 0, 20, %s, %s, '[]', false, 'c1', %s, 0, 0) "
            "ON CONFLICT DO NOTHING",
            at,
            at,
            slot,
        )

    with Captured(url, tmp_path, "croneach") as cap:
        with Client(url) as client:
            client.put_cron("c1", "* * * * *", "k", {}, opts={"queue": "cq"})
            t = now()
            minute = t.replace(second=0, microsecond=0)
            for back in (2, 0, 1):  # the oldest first: the later slots are due and not yet inserted
                fire(minute - timedelta(minutes=back), now())
    r = assert_valid(cap)
    assert r.by_kind["fire_crons"] == 3, dict(r.by_kind)
    (tmp_path / "early").mkdir()
    with Captured(url, tmp_path / "early", "cronearly") as cap2:
        fire(now().replace(second=0, microsecond=0) + timedelta(minutes=5), now())
    f.close()
    r2 = cap2.validate()
    assert r2.verdict == "invalid" and r2.unexplained == 1, first(r2)


# --------------------------------------------------------------------------------------------------
# clear_children_apart, renew_per_queue, claim_one


def test_clear_children_apart_before_the_park_is_valid(url, tmp_path):
    """clear_children_apart: await-children's "clear the stale $children signal" committed on its own,
    then the re-verify and the park; a child finishing between the two makes the park find the signal
    (§7's rule: park as ready)."""
    f = Foreign(url)

    def clear(parent: int) -> None:
        f.x("DELETE FROM belay_signals WHERE scope = %s AND name = '$children'", f"job:{parent}")

    def park(parent: int, attempt: int) -> None:
        with f.tx():
            present = f.x("SELECT 1 FROM belay_signals WHERE scope = %s AND name = '$children'", f"job:{parent}")
            if present:
                f.x(
                    "UPDATE belay_jobs SET state = 'ready', ready_at = %s, lease_until = NULL, leased_by = NULL, "
                    "max_attempts = max_attempts + 1 WHERE id = %s AND state = 'running' AND attempt = %s",
                    now(),
                    parent,
                    attempt,
                )
            else:
                f.x(
                    "UPDATE belay_jobs SET state = 'awaiting', await_scope = %s, await_name = '$children', "
                    "ready_at = NULL, lease_until = NULL, leased_by = NULL, max_attempts = max_attempts + 1 "
                    "WHERE id = %s AND state = 'running' AND attempt = %s",
                    f"job:{parent}",
                    parent,
                    attempt,
                )

    with Captured(url, tmp_path, "clearapart") as cap:
        with PgStore(url) as store, Client(url) as client:
            parent, attempt = spawned_parent(store, client)
            kids = store.apply(
                w.Spawn(now(), parent, "kids", tuple(ops.JobSpec("kids", "kid", {"i": i}) for i in range(3)))
            ).child_ids
            assert sorted(claim(store, "kids")) == sorted(kids)
            store.apply(w.Ack(now(), kids[0], 1, w.Succeed(None)))  # delivers $children
            clear(parent)
            store.apply(w.Ack(now(), kids[1], 1, w.Succeed(None)))  # between the clear and the park
            park(parent, attempt)  # the signal is there: ready at once
            assert claim(store, "q", demand=1) == [parent]
            clear(parent)
            park(parent, 2)  # kids[2] still running: awaiting
            store.apply(w.Ack(now(), kids[2], 1, w.Succeed(None)))  # wakes the parent
    f.close()
    r = assert_valid(cap)
    assert r.by_kind["clear_signal"] == 2, dict(r.by_kind)


def test_renew_per_queue_and_claim_one_are_valid(url, tmp_path):
    """renew_per_queue: one renewal statement per queue, each its own transaction; claim_one: every claim
    takes one row (§6 "Renew all local leases in one statement each ttl/3" read as the reference's
    efficiency, not a duty — docs/certification.md says why)."""
    with Captured(url, tmp_path, "renewq") as cap:
        with PgStore(url) as store, Client(url) as client:
            qa = [client.enqueue("qa", "k", {}).id for _ in range(2)]
            qb = [client.enqueue("qb", "k", {}).id for _ in range(2)]
            for q in ("qa", "qa", "qb", "qb"):
                assert len(claim(store, q, demand=1)) == 1
            until = now() + timedelta(seconds=60)
            store.apply(w.Renew(now(), "n1", tuple(qa), until))
            store.apply(w.Renew(now(), "n1", tuple(qb), until))
            for j in qa + qb:
                store.apply(w.Ack(now(), j, 1, w.Succeed(j)))
    r = assert_valid(cap)
    assert r.by_kind["renew"] == 2 and r.by_kind["claim"] == 4, dict(r.by_kind)


# --------------------------------------------------------------------------------------------------
# step_then_spend: NOT legal


def test_step_then_spend_in_two_transactions_is_invalid(url, tmp_path):
    """§8.2: "INSERT … then UPDATE belay_jobs SET spent_… (one transaction)" — the broken probe
    `step_then_spend`: both halves are unexplained."""
    f = Foreign(url)
    with Captured(url, tmp_path, "stepspend") as cap:
        with PgStore(url) as store, Client(url) as client:
            job = client.enqueue("q", "costed", {}).id
            claim(store, "q", demand=1)
            f.journal(job, "s1", js({"token": "x", "attempt": 1}), now(), usd=5, tokens=7)
            f.x(
                "UPDATE belay_jobs SET spent_usd_micros = spent_usd_micros + 5, spent_tokens = spent_tokens + 7 WHERE id = %s",
                job,
            )
    f.close()
    r = cap.validate()
    assert r.verdict == "invalid" and r.unexplained == 2, first(r)
    texts = [f.detail() for f in r.findings]
    assert any(f"belay_jobs {job}.spent_usd_micros: transaction 0, model 5" in t for t in texts), texts


# --------------------------------------------------------------------------------------------------
# found besides the shared list: the `$children` payload


def test_children_delivered_per_child_or_unsorted_is_valid_and_a_foreign_id_is_not(url, tmp_path):
    """Two children acked in one transaction (a batch), `$children` upserted once per child — the last
    upsert wins, so the payload names one of them — or once with the ids unsorted: §7 "deliver the
    $children signal … unconditionally", R1 "re-verify on wake" (the payload is a hint). Near-miss: a
    payload naming a job the transaction did not finish."""
    f = Foreign(url)

    def batch_ack(parent: int, kids: list[int], payloads: list[list[int]]) -> None:
        t = now()
        with f.tx():
            for k in kids:
                f.x(
                    "UPDATE belay_jobs SET state = 'succeeded', finished_at = %s, result = %s, lease_until = NULL, "
                    "leased_by = NULL WHERE id = %s AND state = 'running' AND attempt = 1",
                    t,
                    js(None),
                    k,
                )
            for listed in payloads:  # §8.1 delivery under the scope lock: upsert, then wake
                f.x("SELECT pg_advisory_xact_lock(hashtext('belay_sig:' || %s))", f"job:{parent}")
                f.x(
                    "INSERT INTO belay_signals (scope, name, payload, inserted_at) VALUES (%s, '$children', %s, %s) "
                    "ON CONFLICT (scope, name) DO UPDATE SET payload = EXCLUDED.payload, inserted_at = EXCLUDED.inserted_at",
                    f"job:{parent}",
                    Jsonb({"children": listed}),
                    t,
                )
                f.x(
                    "UPDATE belay_jobs SET state = 'ready', ready_at = %s, await_scope = NULL, await_name = NULL "
                    "WHERE state = 'awaiting' AND await_scope = %s AND await_name = '$children'",
                    t,
                    f"job:{parent}",
                )

    def family(store: PgStore, client: Client, queue: str) -> tuple[int, list[int]]:
        parent = client.enqueue(queue, "parent", {}).id
        assert claim(store, queue, demand=1) == [parent]
        kids = store.apply(
            w.Spawn(now(), parent, "kids", tuple(ops.JobSpec("kids", "kid", {"i": i}) for i in range(2)))
        ).child_ids
        store.apply(w.AwaitChildren(now(), parent, 1))
        assert sorted(claim(store, "kids")) == sorted(kids)
        return parent, list(kids)

    with Captured(url, tmp_path, "childrenhint") as cap:
        with PgStore(url) as store, Client(url) as client:
            p1, k1 = family(store, client, "q1")
            batch_ack(p1, k1, [[k1[0]], [k1[1]]])  # per child
            p2, k2 = family(store, client, "q2")
            batch_ack(p2, k2, [k2[::-1]])  # unsorted
    r = assert_valid(cap)
    assert r.by_kind["ack_many"] == 2, dict(r.by_kind)
    (tmp_path / "foreign").mkdir()
    with Captured(url, tmp_path / "foreign", "childrenforeign") as cap2:
        with PgStore(url) as store, Client(url) as client:
            p3, k3 = family(store, client, "q3")
            batch_ack(p3, k3, [[k3[0], p3]])  # the parent is no finished child
    f.close()
    r2 = cap2.validate()
    assert r2.verdict == "invalid" and r2.unexplained == 1, first(r2)
    assert f"belay_signals ('job:{p3}', '$children').payload" in first(r2), first(r2)


def test_events_numbered_the_sdks_own_way_are_valid_and_a_seq_below_the_last_is_not(url, tmp_path):
    """belay_events: "PK (job_id, seq); append-only stream" (§3) — the numbering is the SDK's (a 0-based
    counter, gaps); a seq below the stream's last is no append."""
    f = Foreign(url)

    def emit(job: int, seq: int) -> None:
        f.x(
            "INSERT INTO belay_events (job_id, seq, payload, inserted_at) VALUES (%s, %s, %s, %s)",
            job,
            seq,
            Jsonb({"phase": "start", "seq": seq}),
            now(),
        )

    with Captured(url, tmp_path, "events") as cap:
        with PgStore(url) as store, Client(url) as client:
            job = client.enqueue("q", "slow", {}).id
            assert claim(store, "q", demand=1) == [job]
            emit(job, 0)
            emit(job, 10)
            store.apply(w.EmitEvent(now(), job, {"phase": "reference"}))  # MAX(seq) + 1 = 11
            store.apply(w.Ack(now(), job, 1, w.Succeed(None)))
    r = assert_valid(cap)
    assert r.by_kind["emit_event"] == 3, dict(r.by_kind)
    (tmp_path / "below").mkdir()
    with Captured(url, tmp_path / "below", "eventsbelow") as cap2:
        emit(job, 5)
    f.close()
    r2 = cap2.validate()
    assert r2.verdict == "invalid" and r2.unexplained == 1, first(r2)
    assert "event seq 5 of job" in first(r2) and "not above the stream's last, 11" in first(r2), first(r2)


def test_a_spawn_list_of_ids_spelled_as_strings_is_valid_and_a_wrong_one_is_not(url, tmp_path):
    """JavaScript's PostgreSQL driver returns bigint ids as strings; `JSON.stringify` journals
    `["5","6"]` — a spelling of the list the keys hold (decisions.md "the child id list"), judged as the
    ids it denotes by the refinement and by I8. Near-miss: strings naming other ids."""
    f = Foreign(url)
    with Captured(url, tmp_path, "strids") as cap:
        with PgStore(url) as store, Client(url) as client:
            parent, attempt = spawned_parent(store, client)
            t = now()
            with f.tx():
                for i in range(2):
                    f.insert_child(parent, "kids", i, t)
                ids = f.key_ids(parent, "kids", 2)
                f.journal(parent, "$spawn:kids", js([str(i) for i in ids]), t)  # one transaction, as the reference
            finish_family(store, parent, attempt, ids)
    r = assert_valid(cap)
    assert r.by_kind["spawn"] == 1, dict(r.by_kind)
    (tmp_path / "wrong").mkdir()
    with Captured(url, tmp_path / "wrong", "stridswrong") as cap2:
        with PgStore(url) as store, Client(url) as client:
            p2 = client.enqueue("q", "parent", {}).id
            assert claim(store, "q", demand=1) == [p2]
            t = now()
            with f.tx():
                f.insert_child(p2, "kids", 0, t)
                f.journal(p2, "$spawn:kids", js([str(p2)]), t)  # the parent's own id, not its child's
    f.close()
    r2 = cap2.validate()
    assert r2.verdict == "invalid" and r2.unexplained == 1, first(r2)
    assert f"belay_steps ({p2}, '$spawn:kids').value" in first(r2), first(r2)


def test_a_parent_that_succeeds_with_its_split_spawn_never_journaled_breaks_i8(url, tmp_path):
    """The intermediate state of a split spawn (children inserted, no journal) is legal only while the
    spawn may still be journaled or the parent never ran past it: a parent that succeeds without the
    journal is an I8 violation of the rule replay — each transaction alone is a legal operation."""
    f = Foreign(url)
    with Captured(url, tmp_path, "nojournal") as cap:
        with PgStore(url) as store, Client(url) as client:
            parent, attempt = spawned_parent(store, client)
            f.insert_child(parent, "kids", 0, now())
            store.apply(w.Ack(now(), parent, attempt, w.Succeed(None)))
    f.close()
    assert cap.validate().verdict == "valid"  # every transaction is an operation of the model
    merged = cap.merged
    assert merged.verdict == "invalid", merged.why
    texts = [str(x) for x in merged.findings]
    assert any(f"I8 job {parent}: succeeded with spawn 'kids' never journaled" in t for t in texts), texts


# --------------------------------------------------------------------------------------------------
# the spelling readers (pure)


@pytest.mark.parametrize(
    ("text", "instant"),
    [
        ("2026-12-06T21:03:04.490Z", datetime(2026, 12, 6, 21, 3, 4, 490000, tzinfo=UTC)),
        ("2026-12-06T21:03:04.490000+00:00", datetime(2026, 12, 6, 21, 3, 4, 490000, tzinfo=UTC)),
        ("2026-12-06T23:03:04+02:00", datetime(2026, 12, 6, 21, 3, 4, tzinfo=UTC)),
        ("2026-12-06T21:03:04.1234565Z", datetime(2026, 12, 6, 21, 3, 4, 123456, tzinfo=UTC)),  # half-even
        ("2026-12-06T21:03:04.1234575Z", datetime(2026, 12, 6, 21, 3, 4, 123458, tzinfo=UTC)),
        ("2026-12-06T21:03:04.9999996Z", datetime(2026, 12, 6, 21, 3, 5, tzinfo=UTC)),
        ("20261206T210304,5Z", datetime(2026, 12, 6, 21, 3, 4, 500000, tzinfo=UTC)),
        ("2026-12-06T21:03:04", datetime(2026, 12, 6, 21, 3, 4, tzinfo=UTC)),  # no zone: UTC (§2)
    ],
)
def test_wake_time_reads_every_iso_8601_spelling_as_its_instant(text, instant):
    assert w.wake_time(text) == instant


@pytest.mark.parametrize("bad", [5, None, "", "soon", "2026-13-01T00:00:00Z", ["2026-12-06T21:03:04Z"]])
def test_wake_time_refuses_what_is_no_iso_8601_date_time(bad):
    with pytest.raises(ops.InvalidInput):
        w.wake_time(bad)


def test_child_id_list_reads_integers_and_their_canonical_decimal_strings_only():
    assert w.child_id_list([5, "6", 7]) == [5, 6, 7]
    assert w.child_id_list([]) == []
    for bad in (["05"], ["5.0"], [True], [5.0], ["-5"], ["\u0665"], "5", {"ids": [5]}, None):
        assert w.child_id_list(bad) is None, bad
