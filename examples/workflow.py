"""A workflow and a fan-out: members that run after their dependencies, and a parent that spawns
children and awaits their results.

    .venv/bin/python -m examples.workflow     # on $BELAY_DATABASE_URL, else an embedded PostgreSQL

1. `enqueue_workflow` stores three members at once: `fetch`, then `count` and `shout`, which depend on it
   and are held until it succeeds (a failed or cancelled dependency dooms them instead).
2. `fan_out` spawns one `square` child per number, parks until every child is terminal, and sums their
   results. Spawning is journaled: a re-run after a crash gets the same children, not new ones.
"""

from __future__ import annotations

from impl.client import Client, result_value
from impl.runtime import Worker, WorkerConfig
from impl.worker import Registry
from model.ops import JobSpec, WorkflowMember

registry = Registry()
TEXT = "the protocol is the schema"


@registry.kind("fetch")
def fetch(ctx, input):
    return ctx.step("read", lambda: input["text"])


@registry.kind("count")
def count(ctx, input):
    return len(input["text"].split())


@registry.kind("shout")
def shout(ctx, input):
    return input["text"].upper()


@registry.kind("square")
def square(ctx, input):
    return input["n"] * input["n"]


@registry.kind("fan_out")
def fan_out(ctx, input):
    ctx.spawn("squares", [JobSpec("default", "square", {"n": n}) for n in input["numbers"]])
    children = ctx.await_children()  # parks durably; the job resumes when every child is terminal
    return sum(result_value(child) for child in children)


def main(url: str, schema: str = "public") -> dict:
    worker = Worker(url, registry, WorkerConfig(), schema=schema).start()
    try:
        with Client(url, schema=schema) as client:
            client.enqueue_workflow(
                "wf-hello",
                [
                    WorkflowMember("fetch", JobSpec("default", "fetch", {"text": TEXT})),
                    WorkflowMember("count", JobSpec("default", "count", {"text": TEXT}), deps=("fetch",)),
                    WorkflowMember("shout", JobSpec("default", "shout", {"text": TEXT}), deps=("fetch",)),
                ],
            )
            members = {}
            for job in client.workflow("wf-hello"):
                members[job.wf_name] = client.await_result(job.id, timeout=30)
            parent = client.enqueue("default", "fan_out", {"numbers": [1, 2, 3, 4]})
            fanned = client.await_result(parent.id, timeout=30)
    finally:
        worker.stop()
    for name, job in [*members.items(), ("fan_out", fanned)]:
        if job.state != "succeeded":
            raise RuntimeError(f"{name} ended {job.state}: {job.errors}")
    if not all(members["fetch"].finished_at <= members[m].started_at for m in ("count", "shout")):
        raise RuntimeError("a dependent started before its dependency had finished")
    return {
        "workflow": {name: result_value(job) for name, job in members.items()},
        "sum of squares": result_value(fanned),
    }


if __name__ == "__main__":
    from examples._database import database

    with database("workflow") as (url, schema):
        print(main(url, schema))
