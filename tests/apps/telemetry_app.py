"""Kinds for tests/test_telemetry.py (in-process and `belay worker --app tests.apps.telemetry_app`)."""

from __future__ import annotations

from impl.worker import Fail, Registry

QUEUE = "tq"
registry = Registry()


@registry.kind("ok", queue=QUEUE)
def ok(ctx, input):
    return ctx.step("work", lambda: {"done": True})


@registry.kind("boom", queue=QUEUE)
def boom(ctx, input):
    raise Fail("boom")
