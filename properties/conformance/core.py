"""The conformance machinery: the case registry, `exercise`, and the printable `Report`.

A case is a plain function `case(store, now) -> None` that drives a store only through
`store.apply(op)` (the shared vocabulary of model/ops.py and model/worker_ops.py) and raises
AssertionError with a message that says what the contract expected and what the store did. Cases are
registered with `@case("§7", "a stale ack after reclaim changes nothing")`: the contract section and
a behaviour sentence, which together are the case's id.

A case that needs a capability the store does not offer raises `NotApplicable` (reported as
skipped, never as passed): see `require`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

CaseFn = Callable[[Any, datetime], None]

# The instant cases start from when the caller gives none (cases advance it with timedelta).
DEFAULT_NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)


class NotApplicable(Exception):
    """The store lacks a capability the case needs; the case is reported as skipped."""


@dataclass(frozen=True)
class Case:
    """One registered conformance case."""

    section: str  # the contract section it checks, e.g. "§7"
    name: str  # a behaviour sentence
    area: str  # the module it lives in: client, claims, acks, steps, children, cron_retention
    fn: CaseFn

    @property
    def id(self) -> str:
        return f"{self.section} {self.name}"

    def __call__(self, store: Any, now: datetime) -> None:
        self.fn(store, now)


CASES: list[Case] = []


def case(section: str, name: str) -> Callable[[CaseFn], CaseFn]:
    """Register `fn` as a conformance case for `section`, named by a behaviour sentence."""
    if not section.startswith("§"):
        raise ValueError(f"a case's section names the contract section, like '§7'; got {section!r}")

    def register(fn: CaseFn) -> CaseFn:
        area = fn.__module__.rsplit(".", 1)[-1]
        new = Case(section, name, area, fn)
        if any(c.id == new.id for c in CASES):
            raise ValueError(f"two conformance cases share the id {new.id!r}")
        CASES.append(new)
        return fn

    return register


def require(store: Any, capability: str) -> None:
    """Skip the calling case unless `store` offers `capability` (an attribute: truthy flag or hook)."""
    if not getattr(store, capability, None):
        raise NotApplicable(f"the store does not offer {capability!r}")


# ---------------------------------------------------------------------------------------------
# selection


Selector = None | str | Iterable[str] | Callable[[Case], bool]


def _matches(c: Case, selector: str, areas: set[str]) -> bool:
    """A string selects by section ('§7'; '§8' takes §8.x too), by area ('acks'), else by id substring."""
    if selector in areas:
        return selector == c.area
    if selector.startswith("§"):
        return selector == c.section or c.section.startswith(selector + ".")
    return selector in c.id


def select(only: Selector = None, cases: Iterable[Case] | None = None) -> list[Case]:
    """The cases `only` picks (all when None); a selector that picks nothing is an error."""
    pool = list(CASES if cases is None else cases)
    if only is None:
        return pool
    if callable(only):
        chosen = [c for c in pool if only(c)]
    else:
        selectors = [only] if isinstance(only, str) else list(only)
        areas = {c.area for c in pool}
        chosen = [c for c in pool if any(_matches(c, s, areas) for s in selectors)]
    if not chosen:
        raise ValueError(f"only={only!r} selects no conformance case (try a section like '§7' or an area like 'acks')")
    return chosen


# ---------------------------------------------------------------------------------------------
# running


@contextmanager
def opened(store_factory: Callable[[], Any]) -> Iterator[Any]:
    """A fresh store from the factory: entered if it is a context manager, else closed after."""
    made = store_factory()
    if hasattr(made, "__enter__") and hasattr(made, "__exit__"):
        with made as entered:
            yield made if entered is None else entered
        return
    try:
        yield made
    finally:
        close = getattr(made, "close", None)
        if callable(close):
            close()


@dataclass(frozen=True)
class Outcome:
    """What one case did on one store."""

    section: str
    name: str
    area: str
    status: str  # passed | failed | skipped
    message: str  # empty when passed
    seconds: float

    @property
    def id(self) -> str:
        return f"{self.section} {self.name}"

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    @property
    def failed(self) -> bool:
        return self.status == "failed"


@dataclass(frozen=True)
class Report:
    """Per-case outcomes of one `exercise` run, with a printable table."""

    outcomes: tuple[Outcome, ...]

    @property
    def passed(self) -> tuple[Outcome, ...]:
        return tuple(o for o in self.outcomes if o.status == "passed")

    @property
    def failed(self) -> tuple[Outcome, ...]:
        return tuple(o for o in self.outcomes if o.status == "failed")

    @property
    def skipped(self) -> tuple[Outcome, ...]:
        return tuple(o for o in self.outcomes if o.status == "skipped")

    @property
    def ok(self) -> bool:
        """No case failed (skipped cases do not count against a store)."""
        return not self.failed

    def summary(self) -> str:
        seconds = sum(o.seconds for o in self.outcomes)
        return (
            f"{len(self.passed)} passed, {len(self.failed)} failed, {len(self.skipped)} skipped "
            f"of {len(self.outcomes)} cases in {seconds:.2f}s"
        )

    def table(self, *, messages: bool = True) -> str:
        """One line per case (status, section, name, seconds); failure messages indented below."""
        width = max((len(o.section) for o in self.outcomes), default=2)
        lines = []
        for o in self.outcomes:
            lines.append(f"{o.status.upper():7}  {o.section:<{width}}  {o.name}  ({o.seconds * 1000:.0f} ms)")
            if messages and o.message and not o.passed:
                lines.extend("           " + line for line in o.message.splitlines())
        lines.append(self.summary())
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()

    def raise_for_failures(self) -> None:
        """Raise AssertionError listing every failed case (for use inside another test suite)."""
        if self.failed:
            raise AssertionError("conformance failures:\n" + Report(self.failed).table())


def _describe(exc: BaseException) -> str:
    if isinstance(exc, AssertionError):
        return str(exc) or "assertion failed (no message)"
    return f"{type(exc).__name__}: {exc}"


def run_case(c: Case, store_factory: Callable[[], Any], now: datetime = DEFAULT_NOW) -> Outcome:
    """Run one case on its own fresh store and report what happened (never raises)."""
    started = time.perf_counter()
    status, message = "passed", ""
    try:
        with opened(store_factory) as store:
            c.fn(store, now)
    except NotApplicable as exc:
        status, message = "skipped", str(exc)
    except Exception as exc:  # noqa: BLE001 -- a case failing, or a store raising where the contract expects a value
        status, message = "failed", _describe(exc)
    return Outcome(c.section, c.name, c.area, status, message, time.perf_counter() - started)


def exercise(store_factory: Callable[[], Any], *, only: Selector = None, now: datetime = DEFAULT_NOW) -> Report:
    """Run every selected case on a fresh store from `store_factory` and report per case.

    `store_factory()` returns a fresh, empty, migrated store with `apply(op, conn=None)`: a context
    manager, or an object with an optional `close()`. `only` picks cases by section ('§7'; '§8' also
    takes '§8.x'), area ('acks'), id substring, a list of those, or a predicate on `Case`.
    """
    return Report(tuple(run_case(c, store_factory, now) for c in select(only)))
