"""The broken-worker catalogue (soak/broken/) and the harness's handling of a worker that cannot stay up.

Fast, in CI: the catalogue's shape, `--worker /bin/false` ending INVALID within a minute with a clear
message, and the CI subset of variants (`fast=True`) each caught with its expected row. The full matrix
is `python -m soak.broken` (~20 min; set BELAY_SOAK_TESTS=1 to run it here)."""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from soak.broken import VARIANTS

ROOT = Path(__file__).resolve().parents[1]
ROWS = {f"I{i}" for i in range(1, 10)} | {f"P{i}" for i in range(1, 21)} | {"refine"}


def test_the_catalogue_has_at_least_33_variants_each_expecting_a_known_row_and_importable():
    assert len(VARIANTS) >= 33  # 16 before issue 30, 17 more with it
    before = _impl_classes()
    for name, v in VARIANTS.items():
        assert set(v.expects) <= ROWS and v.expects, name
        module = importlib.import_module(f"soak.broken.{name}")
        assert module.__doc__ and "Expected verdict: invalid" in module.__doc__, name
        # a variant patches impl/ only when run as its own worker process, never at import: two did, and
        # every in-process Worker of the test session after this test stopped running jobs
        assert _impl_classes() == before, f"importing soak.broken.{name} changed impl/"


def _impl_classes() -> dict[str, dict[str, object]]:
    """Every attribute of every class in impl/'s worker-side modules (what a variant could patch)."""
    import inspect

    from impl import client, worker
    from impl.runtime import ack_group, config, executor, node, producer, termination, watchdog
    from impl.store import client_store, worker_store

    modules = (ack_group, config, executor, node, producer, termination, watchdog, client_store, worker_store)
    return {
        f"{m.__name__}.{name}": dict(vars(cls))
        for m in (*modules, worker, client)
        for name, cls in inspect.getmembers(m, inspect.isclass)
        if cls.__module__ == m.__name__
    }


def soak(tmp_path: Path, worker: str, *options: str, timeout: float = 300) -> tuple[subprocess.CompletedProcess, dict]:
    out = subprocess.run(
        [sys.executable, "-m", "soak.run", "--worker", worker, "--report", str(tmp_path), "--no-progress", *options],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    results = tmp_path / "latest" / "results.json"
    assert results.exists(), out.stdout[-3000:] + out.stderr[-3000:]
    return out, json.loads(results.read_text())


def test_a_worker_that_cannot_stay_up_ends_the_run_invalid_within_a_minute(tmp_path: Path):
    t0 = time.monotonic()
    out, results = soak(tmp_path, "/bin/false", "--duration", "60", "--seed", "3")
    assert time.monotonic() - t0 < 60
    assert out.returncode == 1 and results["verdict"] == "invalid"
    assert "could not stay up" in results["duties"]["P1"]["first_counterexample"]
    assert "could not stay up" in out.stdout
    assert len(list((tmp_path / "latest" / "workers").glob("*.log"))) < 40  # backoff, not thousands of restarts


FAST = {
    "exits_on_db_loss": (
        "--duration",
        "14",
        "--db-restart-every",
        "4",
        "--kill-every",
        "0",
        "--stop-every",
        "0",
        "--term-every",
        "0",
        "--heal",
        "2",
        "--drain-timeout",
        "10",
    )
}


@pytest.mark.parametrize("name", sorted(FAST))
def test_a_fast_broken_variant_is_caught_with_its_row(tmp_path: Path, name: str):
    out, results = soak(tmp_path, f'"$BELAY_SOAK_PYTHON" -m soak.broken.{name}', *FAST[name], "--seed", "5")
    rows = {**results["invariants"], **results["duties"]}
    invalid = {k for k, v in rows.items() if v["verdict"] == "invalid"}
    assert results["verdict"] == "invalid" and invalid & set(VARIANTS[name].expects), (invalid, out.stdout[-3000:])


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("BELAY_SOAK_TESTS"), reason="set BELAY_SOAK_TESTS=1 to run the ~20 min matrix")
def test_every_broken_variant_is_caught(tmp_path: Path):
    out = subprocess.run(
        [sys.executable, "-m", "soak.broken", "--report", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    assert out.returncode == 0, out.stdout


# --- the inventory of duties (docs/certification.md, issue 30) --------------------------------------------

INVENTORY = ROOT / "docs" / "certification.md"
# Rows a worker could break for which no variant exists yet: a new gap must be added here on purpose.
GAPS: set[str] = set()  # the last nine closed by issue 30 item 2 (claims_early … no_call_deadlines)


def inventory_rows() -> list[dict[str, str]]:
    rows = []
    for line in INVENTORY.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and re.fullmatch(r"[WOS]\d+(\.\d+)?", cells[0]):
            rows.append(dict(zip(("id", "source", "duty", "judge", "variant"), cells, strict=True)))
    return rows


def judge_ids(judge: str) -> list[str]:
    """The judges of a row: comma-separated ids, each optionally followed by a parenthesised remark or by
    `: remark` (the rest of the cell)."""
    ids = []
    for part in re.sub(r"\s*\([^)]*\)", "", judge).split(","):
        ids.append(part.split(":", 1)[0].strip())
        if ":" in part:
            break
    return ids


def known_judges() -> set[str]:
    from soak.judges import coverage, duties, refine
    from soak.judges.checker import INVARIANTS

    assert callable(getattr(refine, "validate", None)), "the refinement check (soak/judges/refine/) is gone"
    return {"refine", "D1", *INVARIANTS, *duties.DUTIES, *coverage.SCENARIOS}


def test_every_inventory_row_names_an_existing_judge_and_every_breakable_row_a_variant_its_judge_catches():
    from soak.broken.history_only import HISTORY_ONLY

    rows = inventory_rows()
    assert len(rows) >= 80, len(rows)
    assert len({r["id"] for r in rows}) == len(rows), "duplicate row ids"
    judges, named, gaps = known_judges(), set(), set()
    for r in rows:
        judge, variant = r["judge"], r["variant"]
        if judge.startswith("none:"):
            assert len(judge) > len("none: ") + 10, r  # a reason, not a shrug
            assert variant.startswith("n/a:"), r  # nothing to break where nothing is observed
            continue
        ids = judge_ids(judge)
        assert ids and set(ids) <= judges, (r["id"], set(ids) - judges)
        if variant.startswith("gap:"):
            gaps.add(r["id"])
            continue
        if variant.startswith("n/a:"):
            assert len(variant) > len("n/a: ") + 10, r
            continue
        names = re.findall(r"`([a-z0-9_]+)`", variant)
        assert names and variant.replace("`", "").replace(",", " ").split() == names, r
        for name in names:
            named.add(name)
            if name in HISTORY_ONLY:
                assert "refine" in ids, (r["id"], name, "a history-only variant is judged by the history check")
            else:
                assert name in VARIANTS, (r["id"], name)
                assert set(VARIANTS[name].expects) & set(ids), (r["id"], name, VARIANTS[name].expects, ids)
    assert gaps == GAPS, f"gaps changed: new {sorted(gaps - GAPS)}, closed {sorted(GAPS - gaps)}"
    assert set(VARIANTS) <= named, f"catalogue variants missing from the inventory: {sorted(set(VARIANTS) - named)}"
    assert set(HISTORY_ONLY) <= named, sorted(set(HISTORY_ONLY) - named)


def test_every_duty_and_invariant_of_the_checker_has_an_inventory_row():
    from soak.judges import duties

    judged = {j for r in inventory_rows() if not r["judge"].startswith("none:") for j in judge_ids(r["judge"])}
    assert set(duties.DUTIES) <= judged, sorted(set(duties.DUTIES) - judged)
    assert {f"I{i}" for i in range(1, 10)} <= judged


# --- one rule for parks (docs/sdk-guide.md §8, PROTOCOL.md P3): the reference SDK honours a pending
# cancel request at every park and on the resume — the behaviour `ignores_cancel_at_park` breaks.


class _CancelPending:
    """A store whose job has a pending cancel request; it records every operation it is asked for."""

    def __init__(self) -> None:
        self.ops: list[object] = []

    def apply(self, op):
        from model import worker_ops as w

        self.ops.append(op)
        if isinstance(op, w.Preflight):
            return w.BudgetOk(cancel_requested=True)
        raise AssertionError(f"a park with a pending cancel request must not reach {type(op).__name__}")


@pytest.mark.parametrize("park", ["await_signal", "await_children", "sleep"])
def test_a_park_is_a_cancel_boundary_in_the_reference_sdk(park: str):
    from datetime import UTC, datetime

    from impl.worker import CancelRequested, JobContext
    from model import worker_ops as w
    from tests.test_soak_checker import job

    store = _CancelPending()
    ctx = JobContext(job(1, "awaiter", state="running", attempt=2), store, lambda: datetime.now(UTC))
    args = {"await_signal": ("go",), "await_children": (), "sleep": ("nap", 5.0)}[park]
    with pytest.raises(CancelRequested):
        getattr(ctx, park)(*args)
    assert [type(op) for op in store.ops] == [w.Preflight], "the cancel check comes before anything else"


# --- the documents, reconciled (issue 30 item 4): each settled point pinned -------------------------------


def _option_table(heading: str) -> dict[str, list[str]]:
    text = (ROOT / "docs" / "decisions.md").read_text()
    part = text.split(heading, 1)[1].split("\n\n|", 1)[1].split("\n\n", 1)[0]
    rows = {}
    for line in ("|" + part).splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        rows[cells[0].strip("`")] = cells
    return rows


def test_decisions_lists_every_queue_and_cron_option_with_the_models_defaults():
    from model import queues

    q = _option_table("`belay_queues.opts` — merged")
    assert set(q) == set(queues.KNOWN), sorted(set(q) ^ set(queues.KNOWN))
    d = queues.QueueOpts()
    assert q["limit"][2] == str(d.limit_min) == str(d.limit_max)
    assert q["paused"][2] == str(d.paused).lower()
    for key in ("global_limit", "rate", "partition"):
        assert getattr(d, key) is None and q[key][2] == "null", key
    c = _option_table("`belay_crons.opts` (the row's")
    assert set(c) == {"queue", "priority", "max_attempts"}
    # the validating operation (model.ops.PutCron) refuses anything else
    assert "known: queue, priority, max_attempts" in (ROOT / "model" / "ops.py").read_text()
    cron = (ROOT / "model" / "cron.py").read_text()
    for key, default in (("queue", '"default"'), ("priority", "0"), ("max_attempts", "20")):
        assert f'o.get("{key}", {default})' in cron, key
        assert c[key][2].strip("`") == default, (key, c[key][2])


def test_decisions_states_the_wait_spends_no_attempt_rule_in_the_outcome_table():
    text = (ROOT / "docs" / "decisions.md").read_text()
    table = text.split("## §7 ack outcomes", 1)[1].split("## Reserved names", 1)[0]
    for outcome in ("| await(scope", "| await children", "| sleep(until)"):
        row = next(line for line in table.splitlines() if line.startswith(outcome))
        assert "`max_attempts` + 1" in row, row
    assert "A wait spends no attempt" in table


def test_the_docs_say_where_the_contracts_section_10_is_superseded():
    cert = (ROOT / "docs" / "certification.md").read_text()
    assert "§10" in cert and "soak/worker.exs" in cert and "nine" in cert
    assert "supersedes §10 of the contract" in (ROOT / "soak" / "PROTOCOL.md").read_text()


# --- W9.3 (notifications_only): an unfinished drain whose end was idle is a polling-floor failure ---------


def _drain_history(rows_at: float | None = None, drained: bool = False, db_crash: bool = False) -> list[dict]:
    h: list[dict] = [{"t": 0.0, "type": "worker_start", "node": "w1-1", "slot": 1}]
    h += [{"t": t / 2, "type": "lease_sample", "at": t / 2, "rows": []} for t in range(2, 61)]
    if rows_at is not None:
        h.append({"t": rows_at, "type": "lease_sample", "at": rows_at, "rows": [[7, 1, "w1-1", rows_at + 4, "echo"]]})
    if db_crash:
        h += [{"t": 25.0, "type": "db_crash"}, {"t": 26.0, "type": "db_restarted"}]
    h.append({"t": 30.0, "type": "drain_end", "drained": drained})
    return sorted(h, key=lambda e: e["t"])


def test_an_idle_end_of_an_unfinished_drain_is_found_only_when_nothing_ran_and_the_database_was_up():
    from soak.judges.checker import IDLE_S, Timeline, _idle_end_of_drain
    from soak.judges.duties import Evidence

    h = _drain_history()
    assert _idle_end_of_drain(h, Timeline(h)) == (30.0 - IDLE_S, ["w1-1"])
    assert _idle_end_of_drain(h, Timeline(h), Evidence(h, 10.0)) == (30.0 - IDLE_S, ["w1-1"])  # samples on disk
    for h in (_drain_history(rows_at=28.0), _drain_history(drained=True), _drain_history(db_crash=True)):
        assert _idle_end_of_drain(h, Timeline(h)) is None
        assert _idle_end_of_drain(h, Timeline(h), Evidence(h, 10.0)) is None


def test_a_variant_that_crashes_on_its_own_drift_is_not_counted_as_caught(tmp_path):
    """A variant whose code drifted from impl/ (a query parameter renamed) fails for that reason and proves
    nothing: the matrix reports VARIANT BROKEN, not CAUGHT (sleep_without_journal crashed every sleep with
    `query parameter missing: park_credit` for a session before this was checked)."""
    from soak.broken.__main__ import variant_error

    (tmp_path / "workers").mkdir()
    (tmp_path / "workers" / "w1-1.log").write_text("job 5 failed: OperationalError: the connection is lost\n")
    assert variant_error(tmp_path) is None  # a fault the soak injected: not the variant's own error
    (tmp_path / "workers" / "w2-1.log").write_text(
        "error: ProgrammingError: query parameter missing: attempts_ceiling, park_credit\n"
    )
    assert "park_credit" in (variant_error(tmp_path) or "")
