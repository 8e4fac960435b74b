"""The Durable Execution API and its pure model (properties/http_model.py) driven side by side.

Every route that writes is a rule (createQueue, deleteQueue, createTask, claimTasks, completeRun,
failRun, scheduleRun, waitForEvent, setCheckpoint, emitEvent, createWorkflowRun, updateWorkflowRun),
plus the clock and the sweeper. Each rule sends one request to the real service (in-process server
on real PostgreSQL, impl/http/testing.py) and asks the model the same question; status and body must
agree. After every step the listed state is compared too: queue stats, GET /tasks per queue, GET
/runs per task (paged one run at a time as well: no skip, no repeat) and every checkpoint of every
task. Tasks share task names, step names, event names and queues, so anything scoped wrongly — a
checkpoint read across tasks, an event woken in the wrong queue — shows as a shrunk counterexample.

The examples share one server and database, emptied at the start of each (a scoping bug would
otherwise read an earlier example's rows, and Hypothesis could not replay and shrink it); each has
its own queue and event names too and starts a day after the previous one on the shared fake clock.
"""

from __future__ import annotations

import os
import uuid
from datetime import timedelta
from typing import Any

import psycopg
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from impl.http.testing import FakeClock, serve_api
from model import worker_ops as w
from properties.http_model import ApiModel, iso

STEPS = ("fetch", "load")  # step names every task uses
STRATEGIES = [None, {"kind": "fixed", "base_seconds": 5}, {"kind": "exponential", "base_seconds": 2, "factor": 3}]
MAX_TASKS = 6
TABLES = ("belay_jobs", "belay_steps", "belay_events", "belay_signals", "belay_queues")
RUN_KEYS = ("id", "attempt", "status", "error", "wait_timed_out")
TASK_KEYS = ("id", "queue_name", "task_name", "status", "state", "attempt", "max_attempts", "params", "created_at")


class ApiVersusModel(RuleBasedStateMachine):
    api: Any = None
    clock: Any = None
    db_url: str = ""

    def __init__(self) -> None:
        super().__init__()
        with psycopg.connect(self.db_url, autocommit=True) as conn:
            conn.execute(f"TRUNCATE {', '.join(TABLES)}")
        self.clock.advance(86400)
        self.model = ApiModel()
        prefix = uuid.uuid4().hex[:8]
        self.queue_names = [f"{prefix}-a", f"{prefix}-b"]
        self.events = [f"{prefix}-go", f"{prefix}-stop"]
        self.runs: list[str] = []  # every run id either side has handed out
        self.task_ids: list[int] = []  # every task created, deleted ones too
        self.workflows: list[str] = []
        for name in self.queue_names:
            self.create_queue_named(name)

    def now(self):
        return self.clock()

    def expect_error(self, r, answer) -> None:
        status, code = answer
        assert r.status_code == status, (r.status_code, r.text, answer)
        assert r.json()["code"] == code, (r.text, answer)

    def create_queue_named(self, name: str) -> None:
        r = self.api.post("/queues", json={"name": name})
        status, body = self.model.create_queue(self.now(), name)
        if status != 201:
            self.expect_error(r, (status, body))
        else:
            assert r.status_code == 201 and r.json()["name"] == name, r.text

    def pick_run(self, data) -> str:
        """Mostly a live run (the model knows which), sometimes any run handed out (likely stale,
        waiting or of a deleted task)."""
        live = sorted(t.run(t.claims) for t in self.model.tasks.values() if t.state == "running")
        if not live:
            return data.draw(st.sampled_from(self.runs))
        return data.draw(st.one_of(st.sampled_from(live), st.sampled_from(live), st.sampled_from(self.runs)))

    # --- queues -------------------------------------------------------------------------------------

    @rule(which=st.integers(0, 1))
    def create_queue(self, which):
        self.create_queue_named(self.queue_names[which])

    @rule(which=st.integers(0, 1))
    def delete_queue(self, which):
        name = self.queue_names[which]
        r = self.api.delete(f"/queues/{name}")
        status, body = self.model.delete_queue(self.now(), name)
        if status == 204:
            assert r.status_code == 204, r.text
        else:
            self.expect_error(r, (status, body))

    # --- tasks and runs -----------------------------------------------------------------------------

    @initialize()
    def one_task_per_queue(self):
        """Every example starts with a task of max_attempts 1 in each queue: claims, expiries and both
        sweepers then meet a task whose budget a single spent attempt would end (issue 53)."""
        for which in (0, 1):
            self.create_task(which, "ingest", 1, None, False, None)

    @precondition(lambda self: len(self.task_ids) < MAX_TASKS)
    @rule(
        which=st.integers(0, 1),
        task_name=st.sampled_from(["ingest", "report"]),
        max_attempts=st.integers(1, 3),
        strategy=st.sampled_from(STRATEGIES),
        in_workflow=st.booleans(),
        data=st.data(),
    )
    def create_task(self, which, task_name, max_attempts, strategy, in_workflow, data):
        queue = self.queue_names[which]
        body: dict[str, Any] = {
            "task_name": task_name,
            "params": {"n": len(self.task_ids)},
            "max_attempts": max_attempts,
        }
        if strategy is not None:
            body["retry_strategy"] = strategy
        if in_workflow and self.workflows:
            body["workflow_run_id"] = data.draw(st.sampled_from(self.workflows))
        r = self.api.post(f"/queues/{queue}/tasks", json=body)
        refused = self.model.create_task_check(queue, body.get("workflow_run_id"))
        if refused is not None:
            self.expect_error(r, refused)
            return
        assert r.status_code == 201, r.text
        task_id = int(r.json()["task_id"].removeprefix("task_"))
        assert r.json() == self.model.adopt_task(self.now(), task_id, queue, body)[1]
        self.task_ids.append(task_id)
        self.runs.append(r.json()["run_id"])

    @rule(which=st.integers(0, 1), limit=st.integers(1, 3), timeout=st.sampled_from([1, 5, 30]))
    def claim(self, which, limit, timeout):
        queue = self.queue_names[which]
        r = self.api.post(f"/queues/{queue}/tasks/claim", json={"limit": limit, "claim_timeout": timeout})
        if queue not in self.model.queues:
            self.expect_error(r, (404, "QUEUE_NOT_FOUND"))
            return
        assert r.status_code == 200, r.text
        candidates = self.model.claimable(self.now(), queue)
        got = r.json()["tasks"]
        taken = [int(t["task_id"].removeprefix("task_")) for t in got]
        assert len(set(taken)) == len(taken) == min(limit, len(candidates)), (taken, candidates)
        assert set(taken) <= candidates, (taken, candidates)
        for task, task_id in zip(got, taken, strict=True):
            assert task == self.model.apply_claim(self.now(), task_id, timeout)
            self.runs.append(task["run_id"])

    @precondition(lambda self: self.runs)
    @rule(data=st.data())
    def complete(self, data):
        run = self.pick_run(data)
        r = self.api.post(f"/runs/{run}/complete", json={"result": {"run": run}})
        self.compare(r, self.model.complete(self.now(), run))

    @precondition(lambda self: self.runs)
    @rule(data=st.data())
    def fail(self, data):
        run = self.pick_run(data)
        r = self.api.post(f"/runs/{run}/fail", json={"error": f"boom in {run}"})
        self.compare(r, self.model.fail(self.now(), run, f"boom in {run}"))

    @precondition(lambda self: self.runs)
    @rule(data=st.data(), seconds=st.integers(0, 20))
    def schedule(self, data, seconds):
        run = self.pick_run(data)
        at = self.now() + timedelta(seconds=seconds)
        r = self.api.post(f"/runs/{run}/schedule", json={"run_at": iso(at)})
        self.compare(r, self.model.schedule(self.now(), run, at))

    @precondition(lambda self: self.runs)
    @rule(data=st.data(), event=st.integers(0, 1), step=st.sampled_from(STEPS), timeout=st.sampled_from([5, 20]))
    def wait_for_event(self, data, event, step, timeout):
        run = self.pick_run(data)
        name = self.events[event]
        task = "task_" + run.split("_")[1]
        r = self.api.post(
            f"/runs/{run}/wait-for-event",
            json={"event_name": name, "timeout_seconds": timeout, "task_id": task, "step_name": step},
        )
        self.compare(r, self.model.wait_for_event(self.now(), run, name, timeout, step))

    @precondition(lambda self: self.runs and self.task_ids)
    @rule(data=st.data(), step=st.sampled_from(STEPS), value=st.integers(0, 9), extend=st.sampled_from([None, 60]))
    def set_checkpoint(self, data, step, value, extend):
        """Mostly the run's own task; sometimes another task (its owner_run is then foreign)."""
        run = self.pick_run(data)
        own = int(run.split("_")[1])
        task_id = data.draw(st.one_of(st.just(own), st.sampled_from(self.task_ids)))
        state = {"value": value, "by": run}
        body: dict[str, Any] = {"state": state, "owner_run": run}
        if extend is not None:
            body["extend_claim_by"] = extend
        r = self.api.put(f"/tasks/task_{task_id}/checkpoints/{step}", json=body)
        answer = self.model.set_checkpoint(self.now(), task_id, step, state, run)
        self.compare(r, answer)
        if answer[0] == 200 and extend is not None:
            task = self.model.tasks[task_id]
            assert task.lease_until is not None
            task.lease_until = max(task.lease_until, self.now() + timedelta(seconds=extend))

    @rule(event=st.integers(0, 1), payload=st.integers(0, 9))
    def emit(self, event, payload):
        name = self.events[event]
        r = self.api.post("/events", json={"event_name": name, "payload": {"p": payload}})
        status, body = self.model.emit(self.now(), name, {"p": payload})
        assert r.status_code == status, r.text
        assert {k: r.json()[k] for k in body} == body

    # --- workflow runs ------------------------------------------------------------------------------

    @precondition(lambda self: len(self.workflows) < 2)
    @rule()
    def create_workflow_run(self):
        r = self.api.post("/workflow-runs", json={"workflow_name": "pipeline"})
        assert r.status_code == 201, r.text
        _, body = self.model.adopt_workflow(r.json()["workflow_run_id"], "pipeline")
        assert {k: r.json()[k] for k in body} == body
        self.workflows.append(r.json()["workflow_run_id"])

    @precondition(lambda self: self.workflows)
    @rule(data=st.data(), status=st.sampled_from([None, "running", "completed", "failed", "canceled"]))
    def update_workflow_run(self, data, status):
        workflow = data.draw(st.sampled_from(self.workflows))
        body = {} if status is None else {"status": status}
        r = self.api.patch(f"/workflow-runs/{workflow}", json=body)
        self.compare(r, self.model.update_workflow(self.now(), workflow, status))

    # --- time ---------------------------------------------------------------------------------------

    @rule(seconds=st.integers(1, 30), sweep=st.sampled_from(["worker", "server", "worker", None]))
    def advance(self, seconds, sweep):
        """Time passes; mostly a sweeper runs then too: the served app's (every second) or a `belay
        worker`'s on the same database."""
        self.clock.advance(seconds)
        if sweep == "server":
            self.sweep()
        elif sweep == "worker":
            self.worker_sweep()

    @rule()
    def sweep(self):
        report = self.api.belay.sweep_once(self.now())
        ours = {i for i in report.requeued if i in self.model.tasks}
        assert ours == self.model.sweep(self.now())
        assert not [i for i in report.failed if i in self.model.tasks], "an HTTP task spent an attempt on expiry"

    @rule()
    def worker_sweep(self):
        """A `belay worker` on the same database reclaims expired leases: the contract's §6 reclaim with
        the runtime's backoff (impl/runtime/node.py reclaim_backoff), over every job (issue 53)."""
        backoff = w.Backoff()
        done = self.api.belay.store.apply(w.Reclaim(self.now(), backoff))
        assert not [i for i in done.failed if i in self.model.tasks], "a worker's reclaim failed an HTTP task"
        ours = {i for i in done.retried if i in self.model.tasks}
        now = self.now()
        assert ours == self.model.sweep(now, lambda claim: backoff.retry_at(now, claim) - now)

    # --- comparison ---------------------------------------------------------------------------------

    def compare(self, r, answer) -> None:
        status, body = answer
        if isinstance(body, str):
            self.expect_error(r, answer)
            return
        assert r.status_code == status, (r.status_code, r.text, answer)
        got = r.json()
        assert {k: got.get(k) for k in body} == body, (got, body)

    @invariant()
    def listed_state_agrees(self):
        now = self.now()
        for queue in self.queue_names:
            r = self.api.get(f"/queues/{queue}/stats")
            if queue not in self.model.queues:
                self.expect_error(r, (404, "QUEUE_NOT_FOUND"))
                continue
            got = r.json()
            assert {k: got[k] for k in ("queue_name", "pending_runs", "claimed_runs", "completed_runs")} == (
                self.model.stats(now, queue)
            )
            listed = self.api.get("/tasks", params={"queue_name": queue, "limit": 1000}).json()["tasks"]
            expected = sorted(
                (self.model.task_summary(now, t) for t in self.model.tasks.values() if t.queue == queue),
                key=lambda t: int(t["id"].removeprefix("task_")),
            )
            assert [{k: t[k] for k in (*TASK_KEYS, "completed_at")} for t in listed] == [
                {k: t[k] for k in (*TASK_KEYS, "completed_at")} for t in expected
            ]
        for task_id in self.task_ids:
            r = self.api.get("/runs", params={"task_id": f"task_{task_id}"})
            assert r.status_code == 200, r.text
            listed = r.json()["runs"]
            if task_id not in self.model.tasks:
                assert listed == [], "a deleted queue's task still lists runs"
                continue
            assert [{k: x[k] for k in RUN_KEYS if k in x} for x in listed] == self.model.runs(now, task_id)
            for step in STEPS:
                r = self.api.get(f"/tasks/task_{task_id}/checkpoints/{step}")
                self.compare(r, self.model.get_checkpoint(task_id, step))

    @precondition(lambda self: self.task_ids)
    @rule()
    def page_through_runs(self):
        """GET /runs one run per page, following next_cursor from before this example's first task:
        the pages are exactly the full listing of our tasks, in order — nothing skipped or repeated."""
        ours = set(self.model.tasks)
        full = [x["id"] for t in sorted(ours) for x in self.model.runs(self.now(), t)]
        first = min(self.task_ids)
        paged: list[str] = []
        cursor: str | None = f"{first - 1:016x}{2**31 - 1:08x}"  # the documented form: just before ours
        for _ in range(200):
            r = self.api.get("/runs", params={"limit": 2, "cursor": cursor})
            assert r.status_code == 200, r.text
            page = r.json()
            paged += [x["id"] for x in page["runs"] if int(x["task_id"].removeprefix("task_")) in ours]
            cursor = page.get("next_cursor")
            if cursor is None:
                break
        assert paged == full


def test_http_api_and_its_model_agree(db_url):
    clock = FakeClock()
    examples = int(os.environ.get("BELAY_HTTP_MODEL_EXAMPLES", "25"))
    with serve_api(db_url, clock=clock) as api:
        ApiVersusModel.api, ApiVersusModel.clock, ApiVersusModel.db_url = api, clock, db_url
        run_state_machine_as_test(
            ApiVersusModel,
            settings=settings(
                max_examples=examples,
                stateful_step_count=30,
                deadline=None,
                derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
            ),
        )
