"""The HTTP API and the model (model.store.ModelStore) driven side by side through the task lifecycle.

Each rule makes one HTTP request against the running server and applies the vocabulary operation the
route is documented to perform (impl/http/__init__.py) to the model with the same `now`; the answers
must agree (200 ↔ Acked, 409 ↔ Stale, the claimed runs, the retry time) and so must every task's job
row afterwards. Tasks are matched by the ids each side returned, so the examples can share one server
and database (each example has its own queues and starts a day later on the shared clock).

One database, many runtimes (issue 53): ordinary jobs (enqueued, claimed and acked as a worker does)
share the database in their own queue, and two sweepers reclaim expired leases — the HTTP server's and
a `belay worker`'s (the contract's §6 Reclaim with the runtime's backoff, over every job). Both are the
model's Reclaim: an HTTP task's expired claim goes back to the queue whoever reclaims it (its row's
max_attempts is out of its claims' reach, impl/http/tasks.py), an ordinary job spends an attempt as the
contract says, and the HTTP sweep never touches an ordinary job.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import replace
from datetime import timedelta
from types import MappingProxyType
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from impl.http.errors import iso
from impl.http.service import EVENT_SCOPE
from impl.http.tasks import ROW_MAX_ATTEMPTS, RetryStrategy, failures_of
from impl.http.testing import FakeClock, serve_api
from model import ops
from model import worker_ops as w
from model.store import ModelStore

STRATEGIES = [
    None,
    {"kind": "fixed", "base_seconds": 5},
    {"kind": "exponential", "base_seconds": 2, "factor": 2, "max_seconds": 10},
]
COMPARED = ("state", "attempt", "max_attempts", "ready_at", "lease_until", "leased_by", "finished_at")


class HttpVersusModel(RuleBasedStateMachine):
    api: Any = None
    clock: Any = None

    def __init__(self) -> None:
        super().__init__()
        self.clock.advance(86400)
        self.model = ModelStore()
        prefix = uuid.uuid4().hex[:8]
        self.queues = {q: f"{prefix}-{q}" for q in ("a", "b")}
        for name in self.queues.values():
            assert self.api.post("/queues", json={"name": name}).status_code == 201
        self.tasks: dict[int, tuple[int, dict | None]] = {}  # db job id → (model job id, strategy)
        self.runs: list[tuple[str, int, int]] = []  # (run id, model job id, attempt)
        self.waited: list[str] = []  # event names waited on and not emitted yet
        self.prefix, self.waits = prefix, 0
        self.created_max: dict[int, int] = {}  # model job id → max_attempts as created
        self.jobs_queue = f"{prefix}-jobs"  # ordinary jobs: no HTTP claim ever takes them
        self.jobs: dict[int, int] = {}  # db job id → model job id, ordinary jobs
        self.leases: list[tuple[int, int, int]] = []  # (db id, model id, attempt) an ordinary claim handed out

    def pick_run(self, data) -> tuple[str, int, int]:
        """Mostly a recent run (likely live), sometimes any run (likely stale)."""
        return data.draw(st.one_of(st.sampled_from(self.runs[-2:]), st.sampled_from(self.runs)))

    def now(self):
        return self.clock()

    def model_job(self, model_id: int):
        return self.model.state.jobs[model_id]

    @rule(queue=st.sampled_from("ab"), max_attempts=st.integers(1, 3), strategy=st.sampled_from(STRATEGIES))
    def create(self, queue, max_attempts, strategy):
        body = {"task_name": "work", "params": {"n": len(self.tasks)}, "max_attempts": max_attempts}
        if strategy is not None:
            body["retry_strategy"] = strategy
        r = self.api.post(f"/queues/{self.queues[queue]}/tasks", json=body)
        assert r.status_code == 201, r.text
        spec = ops.JobSpec(self.queues[queue], "work", body["params"], {}, max_attempts=ROW_MAX_ATTEMPTS)
        [inserted] = self.model.apply(ops.Enqueue(self.now(), (spec,))).outcomes
        self.tasks[int(r.json()["task_id"][5:])] = (inserted.id, strategy)
        self.created_max[inserted.id] = max_attempts

    @rule(queue=st.sampled_from("ab"), limit=st.integers(1, 3), timeout=st.sampled_from([10, 30]))
    def claim(self, queue, limit, timeout):
        r = self.api.post(f"/queues/{self.queues[queue]}/tasks/claim", json={"limit": limit, "claim_timeout": timeout})
        assert r.status_code == 200, r.text
        got = [(self.tasks[int(t["task_id"][5:])][0], int(t["run_id"].rsplit("_", 1)[1])) for t in r.json()["tasks"]]
        claimed = self.model.apply(w.Claim(self.now(), self.queues[queue], "http", limit, timedelta(seconds=timeout)))
        assert got == [(j.id, j.attempt) for j in claimed.jobs]  # a run id names its claim: run_<job>_<claim>
        for t, j in zip(r.json()["tasks"], claimed.jobs, strict=True):  # attempt counts runs, not claims
            assert (t["attempt"], t["max_attempts"]) == (failures_of(j.errors) + 1, self.created_max[j.id])
        self.runs += [(t["run_id"], mid, attempt) for t, (mid, attempt) in zip(r.json()["tasks"], got, strict=True)]

    def expect(self, r, result) -> None:
        if isinstance(result, w.Stale):
            assert r.status_code == 409 and r.json()["code"] == "STALE_RUN", r.text
        else:
            assert r.status_code == 200, r.text

    @precondition(lambda self: self.runs)
    @rule(data=st.data())
    def complete(self, data):
        run, mid, attempt = self.pick_run(data)
        r = self.api.post(f"/runs/{run}/complete", json={})
        self.expect(r, self.model.apply(w.Ack(self.now(), mid, attempt, w.Succeed(None))))

    @precondition(lambda self: self.runs)
    @rule(data=st.data())
    def fail(self, data):
        run, mid, attempt = self.pick_run(data)
        strategy = next(s for m, s in self.tasks.values() if m == mid)
        job, retry_at = self.model_job(mid), None
        failure = failures_of(job.errors) + 1  # the task's budget is the one it was created with
        if failure < self.created_max[mid]:
            delay = RetryStrategy.from_json(strategy).delay(failure) if strategy else timedelta(0)
            retry_at = self.now() + delay
        r = self.api.post(f"/runs/{run}/fail", json={"error": "boom"})
        result = self.model.apply(w.Ack(self.now(), mid, attempt, w.Fail("run_failed", "boom", retry_at)))
        self.expect(r, result)
        if isinstance(result, w.Acked):
            body = r.json()
            assert ("next_attempt_at" in body) == (result.state == "ready")
            if result.state == "ready":
                assert body["next_attempt_at"] == iso(retry_at)

    @precondition(lambda self: self.runs)
    @rule(data=st.data(), seconds=st.integers(0, 30))
    def schedule(self, data, seconds):
        run, mid, attempt = self.pick_run(data)
        until = self.now() + timedelta(seconds=seconds)
        r = self.api.post(f"/runs/{run}/schedule", json={"run_at": iso(until)})
        self.expect(r, self.model.apply(w.Ack(self.now(), mid, attempt, w.Snooze(until))))

    @precondition(lambda self: self.runs)
    @rule(data=st.data(), timeout=st.sampled_from([5, 30]))
    def wait_for_event(self, data, timeout):
        """A wait for an event not emitted yet parks the run (202) — the model's ParkAwait in the API's
        event scope, with the shared park rule on max_attempts — or is stale (409)."""
        run, mid, attempt = self.pick_run(data)
        self.waits += 1
        name = f"{self.prefix}-e{self.waits}"  # events are API-wide: unique across examples
        self.waited.append(name)
        r = self.api.post(
            f"/runs/{run}/wait-for-event",
            json={
                "event_name": name,
                "timeout_seconds": timeout,
                "task_id": run.rsplit("_", 1)[0].replace("run", "task"),
                "step_name": name,
            },
        )
        result = self.model.apply(
            w.ParkAwait(self.now(), mid, attempt, EVENT_SCOPE, name, self.now() + timedelta(seconds=timeout))
        )
        if isinstance(result, w.Stale):
            assert r.status_code == 409 and r.json()["code"] == "STALE_RUN", r.text
        else:
            assert (r.status_code, result) == (202, w.Parked(mid, "awaiting")), r.text

    @precondition(lambda self: self.waited)
    @rule(data=st.data())
    def emit(self, data):
        name = data.draw(st.sampled_from(self.waited))
        assert self.api.post("/events", json={"event_name": name, "payload": 1}).status_code == 201
        self.model.apply(ops.DeliverSignal(self.now(), EVENT_SCOPE, name, 1))
        self.waited.remove(name)  # never waited on again: a wait for an existing event does not park

    @rule(seconds=st.integers(0, 40))
    def advance(self, seconds):
        self.clock.advance(seconds)

    # --- ordinary jobs beside the HTTP tasks, and a worker's sweeper ------------------------------------

    @rule(max_attempts=st.integers(1, 2))
    def enqueue_job(self, max_attempts):
        spec = ops.JobSpec(self.jobs_queue, "plain", {"n": len(self.jobs)}, {}, max_attempts=max_attempts)
        [real] = self.api.belay.store.apply(ops.Enqueue(self.now(), (spec,))).outcomes
        [mine] = self.model.apply(ops.Enqueue(self.now(), (spec,))).outcomes
        self.jobs[real.id] = mine.id

    @rule(limit=st.integers(1, 2), ttl=st.sampled_from([10, 30]))
    def worker_claim(self, limit, ttl):
        op = w.Claim(self.now(), self.jobs_queue, "worker-1", limit, timedelta(seconds=ttl))
        real = self.api.belay.store.apply(op).jobs
        mine = self.model.apply(op).jobs
        assert [(self.jobs[j.id], j.attempt) for j in real] == [(j.id, j.attempt) for j in mine]
        self.leases += [(j.id, self.jobs[j.id], j.attempt) for j in real]

    @precondition(lambda self: self.leases)
    @rule(data=st.data(), ok=st.booleans())
    def worker_ack(self, data, ok):
        real_id, mid, attempt = data.draw(st.sampled_from(self.leases))
        outcome = w.Succeed(None) if ok else w.Fail("boom", None, self.now() + timedelta(seconds=5))
        real = self.api.belay.store.apply(w.Ack(self.now(), real_id, attempt, outcome))
        mine = self.model.apply(w.Ack(self.now(), mid, attempt, outcome))
        assert type(real) is type(mine)

    @rule()
    def worker_reclaim(self):
        """A `belay worker`'s sweeper pass (impl/runtime/node.py: w.Reclaim with its reclaim_backoff) over the
        whole database: HTTP tasks and ordinary jobs alike, as any contract-following SDK does."""
        op = w.Reclaim(self.now(), w.Backoff())
        real = self.api.belay.store.apply(op)
        mine = self.model.apply(op)
        ids = {**{db: m for db, (m, _) in self.tasks.items()}, **self.jobs}
        assert sorted(ids[i] for i in real.retried if i in ids) == sorted(mine.retried)
        assert sorted(ids[i] for i in real.failed if i in ids) == sorted(mine.failed)
        http = {m for m, _ in self.tasks.values()}
        assert not http & set(mine.failed), "a worker's reclaim failed an HTTP task"

    @rule()
    def sweep(self):
        """The HTTP server's sweep: the contract's §6 reclaim of the HTTP tasks alone, claimable at once
        (in the model, Reclaim's outcome for those rows, with no backoff); ordinary jobs untouched."""
        now = self.now()
        report = self.api.belay.sweep_once(now)
        ours = {self.tasks[i][0] for i in report.requeued if i in self.tasks}
        touched = {*report.requeued, *report.failed, *report.timed_out, *report.pruned_tasks}
        assert not touched & set(self.jobs), "the HTTP sweep touched an ordinary job"
        assert not {i for i in report.failed if i in self.tasks}, "an HTTP task's expiry spent its budget"
        expired = {
            j.id
            for j in self.model.state.jobs.values()
            if j.queue in self.queues.values() and j.state == "running" and j.lease_until <= now
        }
        assert ours == expired
        jobs = dict(self.model.state.jobs)
        for mid in expired:
            assert jobs[mid].attempt < jobs[mid].max_attempts  # §6: the retry branch
            jobs[mid] = replace(
                jobs[mid],
                state="ready",
                ready_at=now,
                lease_until=None,
                leased_by=None,
                errors=[*jobs[mid].errors, w.error_entry(jobs[mid].attempt, now, "lease_expired", None)],
            )
        self.model.state = replace(self.model.state, jobs=MappingProxyType(jobs))

    @invariant()
    def job_rows_agree(self):
        pairs = [*((db, m) for db, (m, _) in self.tasks.items()), *self.jobs.items()]
        for db_id, mid in pairs:
            row = self.api.belay.store.apply(ops.ReadJob(db_id))
            mine = self.model_job(mid)
            assert {f: getattr(row, f) for f in COMPARED} == {f: getattr(mine, f) for f in COMPARED}, db_id
            assert [e["error"] for e in row.errors] == [e["error"] for e in mine.errors]

    @invariant()
    def stats_agree(self):
        for name in self.queues.values():
            stats = self.api.get(f"/queues/{name}/stats").json()
            jobs = [j for j in self.model.state.jobs.values() if j.queue == name]
            assert stats["claimed_runs"] == sum(j.state == "running" for j in jobs)
            assert stats["completed_runs"] == sum(j.state == "succeeded" for j in jobs)


def test_http_api_and_model_agree_on_the_task_lifecycle(db_url):
    clock = FakeClock()
    with serve_api(db_url, clock=clock) as api:
        HttpVersusModel.api, HttpVersusModel.clock = api, clock
        run_state_machine_as_test(
            HttpVersusModel,
            settings=settings(
                max_examples=int(os.environ.get("BELAY_HTTP_MODEL_EXAMPLES", "40")),
                stateful_step_count=30,
                deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
            ),
        )
