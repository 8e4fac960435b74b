"""The upstream Python client (clients/python of cornelmarck/durable-execution) and its two examples
against `belay serve`, every public method of DurableClient called, every answer checked against the
OpenAPI (upstream_support.SpecChecker) and its meaning checked here.

    BELAY_UPSTREAM=/work/upstream/checkout .venv/bin/pytest tests/upstream/test_upstream_python.py -q

Skipped, with the reason, when $BELAY_UPSTREAM is unset. The upstream code is imported from the
checkout, never copied. The examples run unmodified as `python <example> <command>` with one thing
changed around them: DurableClient's default base URL (http://localhost:8080 in the examples) is set to
the test's server before the example's code runs.
"""

from __future__ import annotations

import inspect
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from upstream_support import SpecChecker, belay_serve, upstream_dir

UPSTREAM, WHY = upstream_dir("clients/python/durable/client.py", "examples/event.py")
pytestmark = pytest.mark.skipif(UPSTREAM is None, reason=WHY)

if UPSTREAM is not None:
    sys.path.insert(0, str(UPSTREAM / "clients" / "python"))
    import durable
    from durable import DurableClient, DurableError
    from durable import types as T


class Recorder:
    """A DurableClient whose public method calls are counted and whose answers are spec-checked."""

    def __init__(self, base: str, checker: SpecChecker) -> None:
        self.client = DurableClient(base)
        self.client._http.event_hooks["response"].append(checker.hook)
        self.called: set[str] = set()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.client, name)
        if callable(attr) and not name.startswith("_"):
            self.called.add(name)
        return attr


def public_methods() -> set[str]:
    return {n for n, f in inspect.getmembers(DurableClient, inspect.isfunction) if not n.startswith("_")}


@pytest.fixture
def server(db_url: str) -> Iterator[str]:
    with belay_serve(db_url) as base:
        yield base


@pytest.fixture
def checker() -> Iterator[SpecChecker]:
    c = SpecChecker()
    yield c
    c.assert_clean()


@pytest.fixture
def c(server: str, checker: SpecChecker) -> Iterator[Recorder]:
    r = Recorder(server, checker)
    yield r
    r.client.close()


def ts(text: str | None) -> datetime:
    assert text is not None
    return datetime.fromisoformat(text)


def now_iso(plus: float = 0.0) -> str:
    return (datetime.now(UTC) + timedelta(seconds=plus)).isoformat().replace("+00:00", "Z")


def error_of(call: Any, *args: Any) -> DurableError:
    with pytest.raises(DurableError) as info:
        call(*args)
    return info.value


def claim_one(c: Recorder, queue: str, timeout: int = 30, within: float = 10.0) -> Any:
    """Claim until one run is handed out (the sweeper makes expired/scheduled/woken runs claimable)."""
    deadline = time.monotonic() + within
    while True:
        tasks = c.claim_tasks(queue, T.ClaimTasksRequest(limit=1, claim_timeout=timeout)).tasks
        if tasks:
            assert len(tasks) == 1
            return tasks[0]
        assert time.monotonic() < deadline, f"nothing became claimable in {queue} within {within}s"
        time.sleep(0.1)


def runs(c: Recorder, task_id: str) -> list[tuple[str, int, str, str | None]]:
    return [(r.id, r.attempt, r.status, r.error) for r in c.list_runs(task_id=task_id).runs]


# --- every method ------------------------------------------------------------------------------


def test_every_public_method_of_the_python_client(server: str, checker: SpecChecker, c: Recorder) -> None:
    # context manager and close
    with DurableClient(server) as other:
        assert isinstance(other.list_queues(), T.ListQueuesResponse)
    c.called |= {"close"}  # close() is what __exit__ calls; the fixture calls it on c as well

    # queues
    made = c.create_queue(T.CreateQueueRequest(name="py", cleanup=T.CleanupPolicy(task_ttl_seconds=60)))
    assert made.name == "py" and ts(made.created_at) <= datetime.now(UTC) + timedelta(seconds=5)
    assert made.cleanup is not None and made.cleanup.task_ttl_seconds == 60
    assert error_of(c.create_queue, T.CreateQueueRequest(name="py")).status_code == 409
    c.create_queue(T.CreateQueueRequest(name="other"))
    assert {q.name for q in c.list_queues().queues} == {"py", "other"}
    stats = c.get_queue_stats("py")
    assert (stats.queue_name, stats.pending_runs, stats.claimed_runs, stats.completed_runs) == ("py", 0, 0, 0)
    assert stats.oldest_pending_run_age_seconds is None
    assert error_of(c.get_queue_stats, "nope").status_code == 404

    # a workflow run and a task in it
    wf = c.create_workflow_run(
        T.CreateWorkflowRunRequest(workflow_name="pipeline", workflow_version="1", inputs={"a": 1}, tags={"k": "v"})
    )
    assert wf.workflow_name == "pipeline" and wf.status == "pending" and wf.workflow_run_id
    up = c.update_workflow_run(wf.workflow_run_id, T.UpdateWorkflowRunRequest(status="running", started_at=now_iso()))
    assert up.workflow_run_id == wf.workflow_run_id and up.status == "running" and ts(up.updated_at)
    strategy = T.RetryStrategy(kind=T.RetryStrategyKind.FIXED, base_seconds=0)
    created = c.create_task(
        "py",
        T.CreateTaskRequest(
            task_name="work",
            params={"n": 1},
            headers={"h": "v"},
            retry_strategy=strategy,
            max_attempts=2,
            workflow_run_id=wf.workflow_run_id,
        ),
    )
    assert created.task_id and created.run_id and created.workflow_run_id == wf.workflow_run_id
    c.create_task("other", T.CreateTaskRequest(task_name="elsewhere"))

    listed = c.list_tasks(queue_name="py", task_name="work").tasks
    assert [(t.id, t.task_name, t.status, t.queue_name, t.max_attempts, t.completed_at) for t in listed] == [
        (created.task_id, "work", "pending", "py", 2, None)
    ]
    assert c.list_tasks(queue_name="py", task_name="elsewhere").tasks == []
    assert {t.queue_name for t in c.list_tasks().tasks} == {"py", "other"}
    assert c.get_queue_stats("py").pending_runs == 1
    assert c.get_queue_stats("py").oldest_pending_run_age_seconds is not None
    assert runs(c, created.task_id) == [(created.run_id, 1, "pending", None)]

    # the first run: claimed, a checkpoint, failed -> a retry
    first = claim_one(c, "py")
    assert (first.run_id, first.task_id, first.attempt, first.task_name, first.max_attempts) == (
        created.run_id,
        created.task_id,
        1,
        "work",
        2,
    )
    assert first.params == {"n": 1} and first.headers == {"h": "v"}
    assert first.retry_strategy == {"kind": "fixed", "base_seconds": 0} or first.retry_strategy == strategy
    assert c.get_queue_stats("py").claimed_runs == 1
    assert runs(c, created.task_id) == [(first.run_id, 1, "claimed", None)]
    # a claimed task is pending in the clients' TaskStatus (pending | completed | failed | canceled)
    assert [T.TaskStatus(t.status) for t in c.list_tasks(queue_name="py").tasks] == [T.TaskStatus.PENDING]
    unfinished = [t.id for t in c.list_tasks(status=T.TaskStatus.PENDING).tasks]
    assert created.task_id in unfinished and len(unfinished) == 2
    assert error_of(c.get_checkpoint, created.task_id, "progress").status_code == 404
    cp = c.set_checkpoint(
        created.task_id, "progress", T.SetCheckpointRequest(state={"done": 1}, owner_run=first.run_id)
    )
    assert (cp.task_id, cp.step_name) == (created.task_id, "progress") and ts(cp.updated_at)
    got = c.get_checkpoint(created.task_id, "progress")
    assert (got.task_id, got.step_name, got.state) == (created.task_id, "progress", {"done": 1})
    failed = c.fail_run(first.run_id, T.FailRunRequest(error="boom"))
    assert (failed.run_id, failed.status, failed.attempt) == (first.run_id, "failed", 1)
    assert failed.next_run_id and failed.next_run_id != first.run_id and ts(failed.next_attempt_at)
    assert error_of(c.fail_run, first.run_id, T.FailRunRequest(error="again")).status_code == 409

    # the retry: the checkpoint survives, the stale run is refused, completion
    second = claim_one(c, "py")
    assert (second.run_id, second.attempt, second.max_attempts) == (failed.next_run_id, 2, 2)
    assert c.get_checkpoint(created.task_id, "progress").state == {"done": 1}
    stale = T.SetCheckpointRequest(state={"stale": True}, owner_run=first.run_id)
    assert error_of(c.set_checkpoint, created.task_id, "progress", stale).status_code == 409
    assert error_of(c.complete_run, first.run_id, T.CompleteRunRequest(result=1)).status_code == 409
    done = c.complete_run(second.run_id, T.CompleteRunRequest(result={"ok": True}))
    assert (done.run_id, done.status) == (second.run_id, "completed")
    assert runs(c, created.task_id) == [(first.run_id, 1, "failed", "boom"), (second.run_id, 2, "completed", None)]
    (task,) = c.list_tasks(queue_name="py", status="completed").tasks
    assert task.id == created.task_id and task.status == "completed" and ts(task.completed_at)
    assert c.get_queue_stats("py").completed_runs == 1
    assert c.update_workflow_run(wf.workflow_run_id, T.UpdateWorkflowRunRequest(status="completed")).status == (
        "completed"
    )

    # schedule: the same run comes back at run_at under the id scheduleRun returns, no attempt spent
    c.create_task("py", T.CreateTaskRequest(task_name="later"))
    held = claim_one(c, "py")
    sched = c.schedule_run(held.run_id, T.ScheduleRunRequest(run_at=now_iso(1.0)))
    assert ts(sched.scheduled_at) > datetime.now(UTC) - timedelta(seconds=1)
    assert [(r.id, r.status) for r in c.list_runs(task_id=held.task_id).runs] == [(sched.run_id, "sleeping")]
    assert c.claim_tasks("py", T.ClaimTasksRequest(limit=5, claim_timeout=30)).tasks == []
    back = claim_one(c, "py")
    assert (back.task_id, back.run_id, back.attempt, back.max_attempts) == (held.task_id, sched.run_id, 1, 1)
    c.complete_run(back.run_id, T.CompleteRunRequest())

    # wait-for-event: 202 sleeping, the event wakes the run, the wait then resolves with the payload
    c.create_task("py", T.CreateTaskRequest(task_name="waiter"))
    w = claim_one(c, "py")
    wait = T.WaitForEventRequest(event_name="go", timeout_seconds=60, task_id=w.task_id, step_name="s")
    slept = c.wait_for_event(w.run_id, wait)
    assert slept.status == "sleeping" and slept.message
    assert [r.task_id for r in c.list_runs(status="sleeping").runs] == [w.task_id]
    (waiting_task,) = c.list_tasks(queue_name="py", task_name="waiter").tasks
    assert T.TaskStatus(waiting_task.status) == T.TaskStatus.PENDING  # not finished
    emitted = c.emit_event(T.EmitEventRequest(event_name="go", payload={"v": 7}))
    assert emitted.event_id and emitted.event_name == "go" and ts(emitted.created_at)
    woken = claim_one(c, "py")
    assert (woken.task_id, woken.attempt, woken.max_attempts) == (w.task_id, 1, 1)
    resolved = c.wait_for_event(woken.run_id, wait)
    assert (resolved.status, resolved.payload) == ("resolved", {"v": 7})
    c.complete_run(woken.run_id, T.CompleteRunRequest(result="approved"))
    assert c.list_runs(status="sleeping").runs == []
    assert [s for (_, _, s, _) in runs(c, w.task_id)] == ["completed"]

    # delete: 409 while a task is unfinished, 204 once only finished ones remain, then 404
    assert error_of(c.delete_queue, "other").status_code == 409
    c.delete_queue("py")
    assert "py" not in {q.name for q in c.list_queues().queues}
    assert error_of(c.delete_queue, "py").status_code == 404

    assert c.called | {"close"} == public_methods(), public_methods() - c.called
    every = {op["operationId"] for _, _, op in checker.routes}  # the spec's 16 and the listTasks extension
    assert {op for op, _ in checker.seen} == every, every - {op for op, _ in checker.seen}


# --- the run model the OpenAPI describes, through the client ----------------------------------


def test_an_expired_claim_is_claimable_again_with_its_attempts_intact_and_the_stale_holder_refused(c) -> None:
    c.create_queue(T.CreateQueueRequest(name="exp"))
    made = c.create_task("exp", T.CreateTaskRequest(task_name="slow"))  # max_attempts 1 (the default)
    gone = claim_one(c, "exp", timeout=1)
    again = claim_one(c, "exp", timeout=30)  # after the 1 s claim timeout and a sweep
    assert (again.task_id, again.attempt, again.max_attempts) == (made.task_id, 1, 1)
    for call, args in (
        (c.complete_run, (gone.run_id, T.CompleteRunRequest(result=1))),
        (c.fail_run, (gone.run_id, T.FailRunRequest(error="late"))),
        (c.schedule_run, (gone.run_id, T.ScheduleRunRequest(run_at=now_iso(5)))),
        (c.set_checkpoint, (made.task_id, "s", T.SetCheckpointRequest(state=1, owner_run=gone.run_id))),
    ):
        assert error_of(call, *args).status_code == 409, call
    c.complete_run(again.run_id, T.CompleteRunRequest(result=2))
    assert [(a, s) for (_, a, s, _) in runs(c, made.task_id)] == [(1, "completed")]
    (task,) = c.list_tasks(queue_name="exp").tasks
    assert task.status == "completed"


def test_a_wait_that_times_out_is_marked_and_answers_408_which_the_client_raises(c) -> None:
    c.create_queue(T.CreateQueueRequest(name="to"))
    c.create_task("to", T.CreateTaskRequest(task_name="waits"))
    held = claim_one(c, "to")
    wait = T.WaitForEventRequest(event_name="never", timeout_seconds=1, task_id=held.task_id, step_name="s")
    assert c.wait_for_event(held.run_id, wait).status == "sleeping"
    back = claim_one(c, "to")  # the deadline makes it claimable
    assert back.task_id == held.task_id and back.attempt == 1
    err = error_of(c.wait_for_event, back.run_id, wait)
    # the spec's 408 {status: timeout}: the client raises it as an error (its `status >= 400` rule)
    assert err.status_code == 408
    assert c.list_runs(status="sleeping").runs == []
    c.fail_run(back.run_id, T.FailRunRequest(error="approval timeout"))
    assert [(s, e) for (_, _, s, e) in runs(c, held.task_id)] == [("failed", "approval timeout")]


def test_a_wait_for_an_event_already_emitted_resolves_at_once(c) -> None:
    c.create_queue(T.CreateQueueRequest(name="ev"))
    c.emit_event(T.EmitEventRequest(event_name="ready", payload=[1, 2]))
    c.create_task("ev", T.CreateTaskRequest(task_name="t"))
    held = claim_one(c, "ev")
    got = c.wait_for_event(held.run_id, T.WaitForEventRequest("ready", 10, held.task_id, "s"))
    assert (got.status, got.payload) == ("resolved", [1, 2])


def test_listings_page_with_the_clients_cursor_without_skipping_or_repeating(c) -> None:
    c.create_queue(T.CreateQueueRequest(name="pg"))
    ids = {c.create_task("pg", T.CreateTaskRequest(task_name=f"t{i}")).task_id for i in range(5)}
    seen: list[str] = []
    cursor = None
    while True:
        page = c.list_tasks(queue_name="pg", cursor=cursor, limit=2)
        assert len(page.tasks) <= 2
        seen += [t.id for t in page.tasks]
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert sorted(seen) == sorted(ids) and len(seen) == 5
    run_ids: list[str] = []
    cursor = None
    while True:
        rpage = c.list_runs(cursor=cursor, limit=2)
        run_ids += [r.id for r in rpage.runs]
        if rpage.next_cursor is None:
            break
        cursor = rpage.next_cursor
    assert len(run_ids) == len(set(run_ids)) == 5


def test_a_long_poll_claim_returns_when_a_task_arrives(c, server: str) -> None:
    c.create_queue(T.CreateQueueRequest(name="lp"))
    timer = threading.Timer(0.5, lambda: c.create_task("lp", T.CreateTaskRequest(task_name="x")))
    started = time.monotonic()
    timer.start()
    got = c.claim_tasks("lp", T.ClaimTasksRequest(limit=1, claim_timeout=30, long_poll_seconds=5)).tasks
    timer.join()
    assert len(got) == 1 and time.monotonic() - started < 4.5


def test_validation_and_missing_resources_answer_the_error_schema(c) -> None:
    c.create_queue(T.CreateQueueRequest(name="v"))
    bad = error_of(c.create_task, "v", T.CreateTaskRequest(task_name="x", max_attempts=0))
    assert bad.status_code == 400 and bad.body.code and bad.body.error
    assert error_of(c.create_task, "absent", T.CreateTaskRequest(task_name="x")).status_code == 404
    assert error_of(c.claim_tasks, "v", T.ClaimTasksRequest(limit=0, claim_timeout=1)).status_code == 400
    assert error_of(c.complete_run, "run_nope", T.CompleteRunRequest()).status_code == 404
    assert error_of(c.update_workflow_run, "wfr_nope", T.UpdateWorkflowRunRequest(status="running")).status_code == 404


def test_retry_strategies_space_the_retries_as_specified(c) -> None:
    c.create_queue(T.CreateQueueRequest(name="rs"))
    exp = T.RetryStrategy(kind=T.RetryStrategyKind.EXPONENTIAL, base_seconds=0.5, factor=2, max_seconds=1.5)
    made = c.create_task("rs", T.CreateTaskRequest(task_name="flaky", retry_strategy=exp, max_attempts=4))
    delays = []
    for attempt in (1, 2, 3):
        held = claim_one(c, "rs")
        assert (held.task_id, held.attempt, held.max_attempts) == (made.task_id, attempt, 4)
        before = datetime.now(UTC)
        failed = c.fail_run(held.run_id, T.FailRunRequest(error=f"e{attempt}"))
        assert failed.attempt == attempt and failed.next_run_id
        delays.append((ts(failed.next_attempt_at) - before).total_seconds())
    # 0.5 · 2^(n-1), capped at 1.5: 0.5, 1.0, 1.5 (less the time the fail request took)
    for got, want in zip(delays, (0.5, 1.0, 1.5), strict=True):
        assert want - 0.3 <= got <= want + 0.05, delays
    last = claim_one(c, "rs")
    assert last.attempt == 4
    final = c.fail_run(last.run_id, T.FailRunRequest(error="e4"))
    assert final.next_run_id is None and final.next_attempt_at is None
    assert [(a, s) for (_, a, s, _) in runs(c, made.task_id)] == [(n, "failed") for n in (1, 2, 3, 4)]
    assert c.list_tasks(queue_name="rs").tasks[0].status == "failed"


def test_start_and_execution_timeouts_cancel_the_task(c) -> None:
    c.create_queue(T.CreateQueueRequest(name="tt"))
    unclaimed = c.create_task("tt", T.CreateTaskRequest(task_name="late", start_timeout=1))
    time.sleep(1.5)
    assert c.claim_tasks("tt", T.ClaimTasksRequest(limit=5, claim_timeout=30)).tasks == []
    (task,) = c.list_tasks(queue_name="tt").tasks
    assert (task.id, task.status) == (unclaimed.task_id, "canceled") and ts(task.completed_at)
    ((_, _, status, error),) = runs(c, unclaimed.task_id)
    assert status == "failed" and error is not None and "start_timeout" in error

    running = c.create_task("tt", T.CreateTaskRequest(task_name="long", execution_timeout=1, max_attempts=3))
    held = claim_one(c, "tt")
    assert held.task_id == running.task_id
    time.sleep(1.5)
    refused = error_of(c.complete_run, held.run_id, T.CompleteRunRequest(result=1))
    assert refused.status_code == 409
    assert [t.status for t in c.list_tasks(queue_name="tt", task_name="long").tasks] == ["canceled"]


def test_a_checkpoint_with_extend_claim_by_keeps_the_claim_past_its_timeout(c) -> None:
    c.create_queue(T.CreateQueueRequest(name="ext"))
    c.create_task("ext", T.CreateTaskRequest(task_name="t"))
    held = claim_one(c, "ext", timeout=1)
    c.set_checkpoint(
        held.task_id, "s", T.SetCheckpointRequest(state={"i": 1}, owner_run=held.run_id, extend_claim_by=10)
    )
    time.sleep(2)  # past the 1 s claim timeout, and several sweeps
    assert c.claim_tasks("ext", T.ClaimTasksRequest(limit=1, claim_timeout=30)).tasks == []
    assert c.complete_run(held.run_id, T.CompleteRunRequest(result=1)).status == "completed"


def test_one_event_wakes_every_run_waiting_for_it(c) -> None:
    c.create_queue(T.CreateQueueRequest(name="fan"))
    made = {c.create_task("fan", T.CreateTaskRequest(task_name=f"w{i}")).task_id for i in range(3)}
    for _ in range(3):
        held = claim_one(c, "fan")
        wait = T.WaitForEventRequest(event_name="all", timeout_seconds=60, task_id=held.task_id, step_name="s")
        assert c.wait_for_event(held.run_id, wait).status == "sleeping"
    assert {r.task_id for r in c.list_runs(status="sleeping").runs} == made
    c.emit_event(T.EmitEventRequest(event_name="all", payload="go"))
    woken = {claim_one(c, "fan").task_id for _ in range(3)}
    assert woken == made and c.list_runs(status="sleeping").runs == []


# --- the upstream examples, unmodified ----------------------------------------------------------

_RUNNER = (
    "import runpy, sys; from durable import DurableClient; "
    "DurableClient.__init__.__defaults__ = (sys.argv.pop(1),); "
    "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
)


def example(server: str, name: str, *args: str) -> subprocess.Popen[str]:
    assert UPSTREAM is not None
    path = UPSTREAM / "examples" / name
    env = {**os.environ, "PYTHONPATH": str(UPSTREAM / "clients" / "python"), "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-c", _RUNNER, f"{server}", str(path), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=path.parent,
    )


def finished(proc: subprocess.Popen[str], timeout: float = 30) -> str:
    out, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, out
    return out


def until(check: Any, within: float, what: str) -> Any:
    deadline = time.monotonic() + within
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def interrupt(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=20)
    return out


def field(out: str, key: str) -> str:
    return out.split(f"{key}=")[1].split()[0]


def test_example_checkpointed_steps_runs_and_resumes_after_an_interrupt(server: str, c) -> None:
    # `examples` prints to localhost:8080 by default: the runner points the default at our server
    base = server
    created = finished(example(base, "checkpointed_steps.py", "create"))
    task_id = field(created, "task")
    worker = example(base, "checkpointed_steps.py", "work")

    def progress() -> list[str]:
        try:
            return c.get_checkpoint(task_id, "progress").state.get("completed", [])
        except DurableError:
            return []

    until(lambda: "step1" in progress(), 20, "step1 never checkpointed")
    first = interrupt(worker)  # SIGINT: the example fails its run ("worker interrupted"), max_attempts 3
    assert "interrupted" in first, first
    resumed = example(base, "checkpointed_steps.py", "work")
    until(lambda: c.list_tasks(queue_name="demo", status="completed").tasks, 30, "the task never completed")
    out = interrupt(resumed)
    assert "resumed: ['step1'" in out and "skipping step1 (already done)" in out, out
    assert "done: {" in out, out
    history = runs(c, task_id)
    assert [(a, s) for (_, a, s, _) in history] == [(1, "failed"), (2, "completed")], history
    assert history[0][3] == "worker interrupted"
    state = c.get_checkpoint(task_id, "progress").state
    assert state["completed"] == ["step1", "step2", "step3"] and state["step3"] == "step3_result"


def test_example_event_sleeps_until_approved_then_completes(server: str, c) -> None:
    base = server
    worker = example(base, "event.py", "work")
    created = finished(example(base, "event.py", "create"))
    task_id = field(created, "task")
    until(lambda: c.list_runs(task_id=task_id, status="sleeping").runs, 20, "the task never slept")
    approved = finished(example(base, "event.py", "approve", task_id))
    assert f"emitted event 'approved:{task_id}'" in approved
    until(lambda: c.list_tasks(queue_name="approvals", status="completed").tasks, 20, "never completed")
    out = interrupt(worker)
    assert "sleeping" in out and "approved with payload: {'approved_by': 'admin'}" in out and "done!" in out, out
    assert [s for (_, _, s, _) in runs(c, task_id)] == ["completed"]
    assert c.list_runs(status="sleeping").runs == []
    assert durable.DurableClient is DurableClient


def test_example_event_worker_stopped_while_the_task_sleeps_and_a_new_one_finishes_it(server: str, c) -> None:
    worker = example(server, "event.py", "work")
    task_id = field(finished(example(server, "event.py", "create")), "task")
    until(lambda: c.list_runs(task_id=task_id, status="sleeping").runs, 20, "the task never slept")
    interrupt(worker)  # nothing in hand: the run sleeps on the server
    finished(example(server, "event.py", "approve", task_id))
    assert [r.status for r in c.list_runs(task_id=task_id).runs] == ["pending"]  # woken, nobody has it
    resumed = example(server, "event.py", "work")
    until(lambda: c.list_tasks(queue_name="approvals", status="completed").tasks, 20, "never completed")
    out = interrupt(resumed)
    assert "approved with payload: {'approved_by': 'admin'}" in out and "done!" in out, out
    assert [(r.attempt, r.status) for r in c.list_runs(task_id=task_id).runs] == [(1, "completed")]
