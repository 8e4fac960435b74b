"""Broken: parks (await a signal, await children, sleep) are not step boundaries — a cancel requested
while the job ran is not checked before the park nor on the resume, so the woken job runs to success.

Expected verdict: invalid, P3 (a job with a pending cancel request parked, was woken and succeeded)."""

from __future__ import annotations

from impl import worker as sdk
from soak.reference_worker import main


def _without_boundary(method):
    def patched(self, *args, **kwargs):
        original = self._boundary
        self._boundary = lambda: None  # BUG: no cancel check at the park or the resume
        try:
            return method(self, *args, **kwargs)
        finally:
            self._boundary = original

    return patched


if __name__ == "__main__":
    for name in ("await_signal", "await_children", "sleep"):
        setattr(sdk.JobContext, name, _without_boundary(getattr(sdk.JobContext, name)))
    main()
