"""A Registry with kinds on two queues ('slow' and 'fast'), for tests/test_worker_queues.py:
`belay worker --queues slow` must run 'slow' only (and fire only the crons of 'slow')."""

from __future__ import annotations

from impl.worker import Registry

registry = Registry()


@registry.kind("slow_job", queue="slow")
def slow_job(ctx, input):
    return {"ran": "slow"}


@registry.kind("fast_job", queue="fast")
def fast_job(ctx, input):
    return {"ran": "fast"}
