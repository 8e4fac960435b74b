"""The conformance suite (properties/conformance) over an adapter: every case the SDK's level allows,
each on a freshly reset database, with a per-case table.

A case whose operations the SDK does not implement is not applicable (reported as skipped, never as
passed) — except in the `client` area, whose cases judge client operations: there the worker
operations a client-level SDK lacks (claim, ack: how a job gets to `failed` before a retry is judged)
are done by the project's reference store on the same database, and the table says so on that line.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg

from impl.store import PgStore
from impl.store.pgrows import configure_connection
from properties.conformance import DEFAULT_NOW, NotApplicable, select
from properties.conformance.core import Case, Selector, _describe
from properties.sdk.harness import AdapterProcess, SubprocessStore, reset


@dataclass(frozen=True)
class CaseRun:
    case: Case
    status: str  # passed | failed | skipped
    message: str
    seconds: float
    judged: Counter[str] = field(default_factory=Counter)
    assisted: Counter[str] = field(default_factory=Counter)


@dataclass(frozen=True)
class ConformanceRun:
    sdk: str
    level: str
    runs: tuple[CaseRun, ...]

    def of(self, status: str) -> tuple[CaseRun, ...]:
        return tuple(r for r in self.runs if r.status == status)

    @property
    def ok(self) -> bool:
        return not self.of("failed")

    def summary(self) -> str:
        assisted = sum(1 for r in self.of("passed") if r.assisted)
        return (
            f"conformance over the adapter ({self.sdk}, {self.level} level): {len(self.of('passed'))} passed "
            f"({assisted} with worker setup by the reference), {len(self.of('failed'))} failed, "
            f"{len(self.of('skipped'))} not applicable, of {len(self.runs)} cases in {sum(r.seconds for r in self.runs):.1f}s"
        )

    def table(self) -> str:
        width = max((len(r.case.section) for r in self.runs), default=2)
        lines = []
        for r in self.runs:
            status = {"skipped": "N/A"}.get(r.status, r.status.upper())
            note = ""
            if r.status == "passed" and r.assisted:
                note = "  [reference did: " + ", ".join(f"{k}×{v}" for k, v in sorted(r.assisted.items())) + "]"
            lines.append(f"{status:7}  {r.case.section:<{width}}  {r.case.name}  ({r.seconds * 1000:.0f} ms){note}")
            if r.status != "passed" and r.message:
                lines.extend("           " + line for line in r.message.splitlines()[:14])
        lines.append(self.summary())
        return "\n".join(lines)


def _not_applicable(exc: BaseException) -> NotApplicable | None:
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, NotApplicable):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def run_conformance(
    adapter: AdapterProcess, url: str, *, only: Selector = None, now: datetime = DEFAULT_NOW
) -> ConformanceRun:
    runs = []
    with psycopg.connect(url, autocommit=True) as harness, PgStore(url, pool_size=2) as reference:
        configure_connection(harness)
        for c in select(only):
            started = time.perf_counter()
            status, message = "passed", ""
            store: SubprocessStore | None = None
            try:
                adapter.ensure()
                reset(harness)
                store = SubprocessStore(adapter, harness, reference if c.area == "client" else None)
                try:
                    c.fn(store, now)
                finally:
                    store.close()
            except Exception as exc:  # noqa: BLE001 - a case failing, or the adapter breaking the protocol
                na = _not_applicable(exc)
                if na is not None:
                    status, message = "skipped", str(na)
                else:
                    status, message = "failed", _describe(exc)
            runs.append(
                CaseRun(
                    c,
                    status,
                    message,
                    time.perf_counter() - started,
                    Counter(store.judged) if store else Counter(),
                    Counter(store.assisted) if store else Counter(),
                )
            )
    return ConformanceRun(adapter.sdk, adapter.level, tuple(runs))


def judged_ops(run: ConformanceRun) -> Counter[str]:
    total: Counter[str] = Counter()
    for r in run.runs:
        total.update(r.judged)
    return total


__all__: list[Any] = ["CaseRun", "ConformanceRun", "judged_ops", "run_conformance"]
