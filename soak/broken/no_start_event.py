"""Broken: the `slow` kind skips step 1 of PROTOCOL §3.8 — it emits no `{"phase": "start", …}` event — and
otherwise behaves. Nothing a final row shows is wrong; what goes is the evidence: I1's lease-renewal rule and
I4's duplicate-execution count read which node ran an attempt from that event, so without it they judge
nothing and would read as passed.

Expected verdict: invalid, P20 (an attempt that ran without its start event)."""

from __future__ import annotations

import soak.reference_worker as ref
from impl.worker import JobContext

_emit = JobContext.emit


def emit(self, payload, *args, **kwargs):
    if isinstance(payload, dict) and payload.get("phase") == "start":
        return None  # BUG: the evidence PROTOCOL §3.8 promises is never written
    return _emit(self, payload, *args, **kwargs)


if __name__ == "__main__":
    JobContext.emit = emit  # type: ignore[method-assign]
    ref.main()
