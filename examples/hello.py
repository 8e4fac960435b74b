"""Hello, Belay: an app with one kind, a worker, an enqueue, and the result awaited.

    .venv/bin/python -m examples.hello     # on $BELAY_DATABASE_URL, else an embedded PostgreSQL

The same registry runs as a worker fleet: `belay worker --app examples.hello` (from the repository root).
"""

from __future__ import annotations

from impl.client import Client, result_value
from impl.runtime import Worker, WorkerConfig
from impl.worker import Registry

registry = Registry()


@registry.kind("greet", queue="default")
def greet(ctx, input):
    greeting = ctx.step("compose", lambda: f"hello, {input['name']}")  # journaled: never runs twice
    return {"greeting": greeting}


def main(url: str, schema: str = "public") -> dict:
    worker = Worker(url, registry, WorkerConfig(), schema=schema).start()  # claims from the kinds' queues
    try:
        with Client(url, schema=schema) as client:
            job = client.enqueue("default", "greet", {"name": "Belay"})
            done = client.await_result(job.id, timeout=30)  # listens for the result, polls as a fallback
            if done.state != "succeeded":
                raise RuntimeError(f"job {job.id} ended {done.state}: {done.errors}")
            return result_value(done)
    finally:
        worker.stop()


if __name__ == "__main__":
    from examples._database import database

    with database("hello") as (url, schema):
        print(main(url, schema))
