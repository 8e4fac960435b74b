"""Every conformance case (properties/conformance) against both stores, plus tests of the library itself.

`test_conformance[<store>-<section> <behaviour>]` runs one case on a fresh store: the in-memory model
(`ModelStore`) or PostgreSQL (`PgStore` on a fresh migrated database from the `db_url` fixture, closed
after). A real disagreement between the stores or with the contract is recorded in KNOWN with the
contract's expectation kept in the case, and runs as xfail(strict=True) so a fix shows up as XPASS.

The library tests prove the suite can fail: `exercise` flags stores with planted bugs, precisely.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from types import MappingProxyType

import psycopg
import pytest

from impl.store import PgStore
from model import ops
from model import worker_ops as w
from model.store import ModelStore
from properties.conformance import AREAS, CASES, Case, NotApplicable, Report, exercise

STORES = ("model", "pg")

# (store, case id) -> why it fails: a disagreement found by this suite and not yet fixed (none today).
KNOWN: dict[tuple[str, str], str] = {}


class ConformancePgStore(PgStore):
    """PgStore plus the suite's optional `caller_connection` hook (a psycopg connection whose first
    statement opens a transaction), so the transactional-enqueue case can check commit/rollback."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.url = url

    @contextmanager
    def caller_connection(self) -> Iterator[psycopg.Connection]:
        with psycopg.connect(self.url) as conn:
            yield conn


# ---------------------------------------------------------------------------------------------
# parametrization: one test per (store, case), ids that read as sentences

_NO_ESCAPE = "disable_test_id_escaping_and_forfeit_all_rights_to_community_support"


@contextmanager
def _readable_ids(config: pytest.Config) -> Iterator[None]:
    """Keep '§' in these ids (pytest escapes non-ASCII ids by default); for this parametrization only.
    Falls back to escaped ids if pytest's ini cache ever changes shape."""
    cache = getattr(config, "_inicache", None)
    if not isinstance(cache, dict):
        yield
        return
    missing = object()
    previous = cache.get(_NO_ESCAPE, missing)
    cache[_NO_ESCAPE] = True
    try:
        yield
    finally:
        if previous is missing:
            cache.pop(_NO_ESCAPE, None)
        else:
            cache[_NO_ESCAPE] = previous


def _params() -> list:
    params = []
    for store in STORES:
        for c in CASES:
            reason = KNOWN.get((store, c.id))
            marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
            params.append(pytest.param(store, c, id=f"{store}-{c.id}", marks=marks))
    return params


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if {"store_kind", "conformance_case"} <= set(metafunc.fixturenames):
        with _readable_ids(metafunc.config):
            metafunc.parametrize(("store_kind", "conformance_case"), _params())


def test_conformance(store_kind: str, conformance_case: Case, request: pytest.FixtureRequest, now) -> None:
    try:
        if store_kind == "model":
            conformance_case(ModelStore(), now)
        else:
            with ConformancePgStore(request.getfixturevalue("db_url")) as store:
                conformance_case(store, now)
    except NotApplicable as exc:
        pytest.skip(str(exc))


def test_known_disagreements_name_real_cases() -> None:
    ids = {c.id for c in CASES}
    assert all(store in STORES and case_id in ids for store, case_id in KNOWN), KNOWN


# ---------------------------------------------------------------------------------------------
# the library


def _clean_on_model(c: Case) -> bool:
    """Cases the model passes today (the planted-bug tests must see only the bug they planted)."""
    return ("model", c.id) not in KNOWN


def test_the_suite_covers_every_area_with_sixty_or_more_cases() -> None:
    assert len(CASES) >= 60
    assert {c.area for c in CASES} == set(AREAS)
    assert len({c.id for c in CASES}) == len(CASES)
    assert all(c.section.startswith("§") for c in CASES)


def test_exercise_on_the_model_passes_every_applicable_case() -> None:
    report = exercise(ModelStore, only=_clean_on_model)
    assert isinstance(report, Report)
    assert report.ok, report.table()
    assert len(report.outcomes) == len(CASES) - sum(1 for store, _ in KNOWN if store == "model")
    # The model cannot join a caller's transaction, so only the commit/rollback case is not applicable.
    assert [o.id for o in report.skipped] == [
        "§5.1 transactional enqueue commits and rolls back with the caller's transaction"
    ]
    table = report.table()
    assert table.splitlines()[-1] == report.summary()
    assert "PASSED   §7    a stale ack after reclaim changes nothing" in table
    assert all(o.seconds >= 0 and o.message == "" for o in report.passed)
    report.raise_for_failures()


def test_exercise_on_the_model_fails_exactly_the_known_model_disagreements() -> None:
    report = exercise(ModelStore)
    assert {o.id for o in report.failed} == {case_id for store, case_id in KNOWN if store == "model"}


def test_exercise_runs_on_postgres_through_a_context_manager_factory(databases) -> None:
    @contextmanager
    def fresh_pg() -> Iterator[ConformancePgStore]:
        with databases.fresh() as url, ConformancePgStore(url) as store:
            yield store

    report = exercise(fresh_pg, only="§8.5")
    assert report.ok, report.table()
    assert len(report.outcomes) == sum(1 for c in CASES if c.section == "§8.5")


def test_exercise_selects_by_section_area_or_predicate() -> None:
    by_section = exercise(ModelStore, only="§8")
    assert {o.section for o in by_section.outcomes} == {"§8.1", "§8.2", "§8.3", "§8.4", "§8.5", "§8.6", "§8.7"}
    by_area = exercise(ModelStore, only=["acks", "steps"])
    assert {o.area for o in by_area.outcomes} == {"acks", "steps"}
    one = exercise(ModelStore, only=lambda c: c.id == "§7 a stale ack after reclaim changes nothing")
    assert [o.id for o in one.outcomes] == ["§7 a stale ack after reclaim changes nothing"]
    with pytest.raises(ValueError, match="selects no conformance case"):
        exercise(ModelStore, only="§99")


def test_exercise_gives_every_case_its_own_store_and_closes_it() -> None:
    made: list[ClosingStore] = []

    class ClosingStore(ModelStore):
        closed = False

        def close(self) -> None:
            self.closed = True

    def factory() -> ClosingStore:
        made.append(ClosingStore())
        return made[-1]

    report = exercise(factory, only=lambda c: c.section == "§6" and _clean_on_model(c))
    assert report.ok, report.table()
    assert len(made) == len(report.outcomes) and all(s.closed for s in made)


class FenceIgnoringStore(ModelStore):
    """Planted bug: an ack of an old attempt lands on the running one (the §7 fence ignores attempt)."""

    def apply(self, op, conn=None):
        if isinstance(op, w.Ack):
            job = self.state.jobs.get(op.job_id)
            if job is not None and job.state == "running" and job.attempt != op.attempt:
                op = replace(op, attempt=job.attempt)
        return super().apply(op, conn)


class StickyCancelStore(ModelStore):
    """Planted bug: retry keeps cancel_requested, so a cooperatively cancelled job can never run (§8.6)."""

    def apply(self, op, conn=None):
        before = self.state.jobs.get(op.job_id) if isinstance(op, ops.Retry) else None
        result = super().apply(op, conn)
        if before is not None and before.cancel_requested and isinstance(result, ops.Retried):
            jobs = dict(self.state.jobs)
            jobs[op.job_id] = replace(jobs[op.job_id], cancel_requested=True)
            self.state = replace(self.state, jobs=MappingProxyType(jobs))
        return result


def test_the_report_flags_a_store_that_ignores_the_ack_fence() -> None:
    report = exercise(FenceIgnoringStore, only=_clean_on_model)
    assert not report.ok
    assert [o.id for o in report.failed] == ["§7 a stale ack after reclaim changes nothing"]
    (failure,) = report.failed
    assert "expected: Stale(job_id=" in failure.message and "actual:   Acked(" in failure.message
    assert "FAILED   §7    a stale ack after reclaim changes nothing" in report.table()
    with pytest.raises(AssertionError, match="stale ack after reclaim"):
        report.raise_for_failures()


def test_the_report_flags_a_store_whose_retry_keeps_cancel_requested() -> None:
    report = exercise(StickyCancelStore, only=_clean_on_model)
    assert [o.id for o in report.failed] == [
        "§8.6 retrying clears cancel_requested, which survived the cooperative cancel"
    ]
    assert "the operator's retry clears cancel_requested" in report.failed[0].message


def test_a_store_raising_where_a_value_is_expected_fails_with_the_exception_named() -> None:
    class NoReclaimStore(ModelStore):
        def apply(self, op, conn=None):
            if isinstance(op, w.Reclaim):
                raise TypeError("the store does not implement Reclaim")
            return super().apply(op, conn)

    report = exercise(NoReclaimStore, only=lambda c: c.section == "§6" and _clean_on_model(c))
    failed = {o.id: o.message for o in report.failed}
    assert "§6 reclaim takes at most `limit` expired leases, lowest ids first" in failed
    assert all(m == "TypeError: the store does not implement Reclaim" for m in failed.values())
