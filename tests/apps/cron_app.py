"""A Registry that declares static crons beside its kinds (Registry.cron), for tests/test_cron_cli.py."""

from __future__ import annotations

from impl.worker import Registry

registry = Registry()


@registry.kind("report", queue="reports")
def report(ctx, input):
    return {"reported": input}


registry.cron("nightly", "0 3 * * *", "report", {"scope": "all"})  # queue: the kind's ('reports')
registry.cron("every-minute", "* * * * *", "report", queue="other", priority=2)
