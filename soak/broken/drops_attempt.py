"""Broken: successful results leave out `"attempt"` (PROTOCOL.md §2), so the checker cannot attribute
the ack that finished a job to the attempt that held it.

Expected verdict: invalid, P8."""

from __future__ import annotations

from impl.worker import Registry
from soak.reference_worker import main, registry


def without_attempt(fn):
    def run(ctx, input):
        value = fn(ctx, input)
        if isinstance(value, dict):
            value = {k: v for k, v in value.items() if k != "attempt"}  # BUG
        return value

    return run


def broken_registry() -> Registry:
    reg = Registry()
    for name, kind in registry.kinds.items():
        reg.kind(name, queue=kind.queue, backoff=kind.backoff)(without_attempt(kind.fn))
    return reg


if __name__ == "__main__":
    main(reg=broken_registry())
