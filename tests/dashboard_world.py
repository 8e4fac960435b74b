"""A small Belay world for the dashboard tests (and their screenshots): queues with options, jobs in
several states, a job with steps, costs, events, errors and children, a workflow with a failed
member, an ignore flag and a doomed member, and a job whose input and error carry HTML/script text.

Everything goes through the store's operations with an explicit `now` (the clock rule).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from impl.store import PgStore
from model import ops
from model import worker_ops as w
from model.cron import CronDef

XSS_INPUT = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'
XSS_ERROR = '<img src=x onerror="window.__pwned = 3"><script>window.__pwned = 4</script>'


@dataclass
class World:
    journal_job: int  # steps with costs, an event, two errors, children
    xss_job: int
    ready_job: int  # the next job of queue "emails" (the tile test finishes it)
    running_job: int  # cancel → cancel_requested
    held_job: int  # cancel → cancelled at once
    workflow_id: str
    workflow_members: dict[str, int]
    cron_jobs: dict[str, list[int]]  # cron name -> the ids of the jobs it fired, by slot


def authorizer(tool: str, arguments: dict, request=None) -> bool:
    """A test authorizer (MCP contract): steering is never allowed; job 0 does not exist anyway."""
    if tool == "steer":
        raise PermissionError("steering is not allowed here")
    return True


def claim_one(store: PgStore, now: datetime, queue: str, node: str = "test-node"):
    claimed = store.apply(w.Claim(now, queue, node, 1))
    assert claimed.jobs, f"nothing to claim in {queue}"
    return claimed.jobs[0]


def build(store: PgStore, now: datetime) -> World:
    t = lambda s: now + timedelta(seconds=s)  # noqa: E731
    store.apply(
        ops.PutQueue(
            t(0),
            "llm",
            {
                "global_limit": 5,
                "rate": {"allowed": 60, "period": 60},
                "partition": {"field": "input", "key": "tenant"},
            },
        )
    )
    store.apply(ops.PutQueue(t(0), "emails", {"limit": 4}))

    # queue "llm": the journal job with budgets, retried twice, with steps, an event and children
    journal = store.apply(
        ops.Enqueue(
            t(1),
            (
                ops.JobSpec(
                    "llm",
                    "summarize",
                    {"url": "https://example.com/a", "tenant": "t1"},
                    max_attempts=5,
                    budget_usd_micros=50_000,
                    budget_tokens=3000,
                ),
            ),
        )
    ).ids[0]
    for attempt, error in ((1, "timeout"), (2, "rate_limited")):
        job = claim_one(store, t(2 * attempt), "llm")
        assert job.id == journal
        store.apply(
            w.Ack(
                t(2 * attempt + 1),
                journal,
                attempt,
                w.Fail(error, f"attempt {attempt} detail", retry_at=t(2 * attempt + 1)),
            )
        )
    job = claim_one(store, t(10), "llm")
    store.apply(w.RecordStep(t(11), journal, "fetch", {"bytes": 5120}, 0, 0))
    store.apply(w.RecordStep(t(12), journal, "llm", {"summary": "short text"}, 30_000, 1800))
    store.apply(w.RecordStep(t(13), journal, "refine", {"summary": "shorter"}, 25_000, 1500))
    store.apply(w.EmitEvent(t(13), journal, {"progress": 0.5}))
    store.apply(
        ops.Enqueue(
            t(14), tuple(ops.JobSpec("llm", "page", {"n": i, "tenant": "t1"}, parent_id=journal) for i in range(3))
        )
    )
    store.apply(ops.DeliverSignal(t(14), f"job:{journal}", "approve", {"by": "ops"}))
    store.apply(w.Ack(t(15), journal, job.attempt, w.Succeed({"summary": "shorter", "pages": 3})))

    # queue "emails": succeeded, failed, the XSS job, a ready one, a running one, a held one
    ids = store.apply(
        ops.Enqueue(
            t(20), tuple(ops.JobSpec("emails", "send", {"to": f"u{i}@example.com"}, max_attempts=1) for i in range(3))
        )
    ).ids
    for i, _jid in enumerate(ids):
        job = claim_one(store, t(21 + i), "emails")
        outcome = w.Succeed({"sent": True}) if i < 2 else w.Fail("smtp_refused", "550 mailbox unavailable")
        store.apply(w.Ack(t(21 + i), job.id, job.attempt, outcome))
    xss = store.apply(
        ops.Enqueue(t(30), (ops.JobSpec("emails", "render", {"template": XSS_INPUT}, max_attempts=1),))
    ).ids[0]
    job = claim_one(store, t(31), "emails")
    assert job.id == xss
    store.apply(w.Ack(t(31), xss, job.attempt, w.Fail(XSS_ERROR, XSS_ERROR)))
    running = store.apply(ops.Enqueue(t(32), (ops.JobSpec("emails", "send", {"to": "slow@example.com"}),))).ids[0]
    claim_one(store, t(33), "emails")
    ready = store.apply(ops.Enqueue(t(34), (ops.JobSpec("emails", "send", {"to": "next@example.com"}),))).ids[0]

    # a workflow: fetch fails; report ignores that; notify does not (doomed); archive waits on notify
    wf = "wf-<b>nightly</b>"
    members = (
        ops.WorkflowMember("fetch", ops.JobSpec("etl", "fetch", max_attempts=1)),
        ops.WorkflowMember("parse", ops.JobSpec("etl", "parse")),
        ops.WorkflowMember("report", ops.JobSpec("etl", "report"), deps=("fetch", "parse"), ignore=("failed",)),
        ops.WorkflowMember("notify", ops.JobSpec("etl", "notify"), deps=("fetch",)),
        ops.WorkflowMember("archive", ops.JobSpec("etl", "archive"), deps=("notify", "report")),
    )
    enq = store.apply(ops.EnqueueWorkflow(t(40), wf, members))
    names = dict(enq.ids)
    for _ in range(2):
        job = claim_one(store, t(41), "etl")
        if job.id == names["fetch"]:
            store.apply(w.Ack(t(42), job.id, job.attempt, w.Fail("upstream_down")))
        else:
            store.apply(w.Ack(t(42), job.id, job.attempt, w.Succeed("parsed")))
    # a held member: it waits on a gate nobody runs (queue "manual" has no worker)
    held = dict(
        store.apply(
            ops.EnqueueWorkflow(
                t(43),
                "wf-waiting",
                (
                    ops.WorkflowMember("gate", ops.JobSpec("manual", "gate")),
                    ops.WorkflowMember("later", ops.JobSpec("etl", "later"), deps=("gate",)),
                ),
            )
        ).ids
    )["later"]
    # crons: a dynamic one that fired twice, a paused one, and a static one (no belay_crons row)
    store.apply(ops.PutCron(t(44), "every-minute", "* * * * *", "tick", {"n": 1}, {"queue": "cron"}))
    store.apply(ops.PutCron(t(44), "paused-hourly", "0 * * * *", "report", {}, {"queue": "cron"}, paused=True))
    static = (CronDef("static-ping", "*/1 * * * *", "ping", queue="cron"),)
    store.apply(w.FireCrons(t(45), t(45) - timedelta(minutes=2), static))
    cron_jobs: dict[str, list[int]] = {}
    with store.pool.connection() as conn:
        for name, job_id in conn.execute(
            "SELECT cron_name, id FROM belay_jobs WHERE cron_name IS NOT NULL ORDER BY cron_name, cron_slot"
        ):
            cron_jobs.setdefault(name, []).append(job_id)
    assert set(cron_jobs) == {"every-minute", "static-ping"}, cron_jobs
    return World(journal, xss, ready, running, held, wf, names, cron_jobs)
