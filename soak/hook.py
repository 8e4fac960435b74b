"""The soak harness's hook: capture during the run, replay and report at the end, always drop the slot.

    hist = HistoryCheck.begin(url, run_dir, run_id, enabled=True)   # before any worker or driver write
    ...                                                               # the soak
    result = hist.finish()            # after workers and driver stopped: drain, snapshot, replay, refine
    hist.add_to_report(run_dir, fault_log)
    hist.close()                      # in `finally`: drops the slot even after a failure

The committed-history verdict is trace validation (soak/judges/refine/, issue 30): every captured
transaction must be explained by an operation of model/ applied to the state before it, and the
validation must end in the final snapshot. The rule replay (soak/judges/replay/) runs first: it
finds capture gaps and taints the jobs they touched (refinement then reports those as unknown, not
invalid), and its §11 predicates over every committed state stay as a second opinion — either one
finding makes the history invalid; the history is valid only when the refinement is.

Files in the run folder: history.bin (the captured transactions, gzip frames), history-initial.pickle
and history-final.pickle (gzip-compressed pickles of the states the replay starts from and must end in) — `python -m
soak.judges.refine <run-dir>` and `python -m soak.judges.replay <run-dir>` re-check them.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import psycopg

from impl.store.snapshot import snapshot, snapshot_streamed
from soak.judges.refine import RefinementResult, feed, validate
from soak.judges.replay import HistoryResult, replay, save_state
from soak.record.capture import Capture, CaptureUnavailable, read_transactions, slot_name
from soak.record.spill import disk_table
from soak.report.timeline import add_to_report

POLL_S = (
    2.0  # slot polls while the soak runs: each call re-reads WAL from the slot's restart point, so fewer is cheaper
)


def combine_exit(code: int, result: HistoryResult | None) -> int:
    """The soak's exit code with the history verdict folded in: an invalid history makes the run invalid."""
    if result is not None and result.verdict == "invalid" and code in (0, 2):
        return 1
    return code


VERDICT_OF_EXIT = {0: "valid", 1: "invalid", 2: "unknown"}


def final_verdict(verdict: str, result: HistoryResult | None) -> tuple[str, int]:
    """(verdict, exit code) of the run: the checks' verdict with the committed history folded in
    (`combine_exit`). The report states this pair, never the checks' verdict alone (issue 51)."""
    code = combine_exit({"valid": 0, "invalid": 1}.get(verdict, 2), result)
    return VERDICT_OF_EXIT.get(code, verdict), code


def merge(rules: HistoryResult, refinement: RefinementResult) -> HistoryResult:
    """The committed-history verdict: the refinement's, made invalid by a rule finding of the replay.

    valid needs both; invalid needs one; anything else (a gap, an unexplained transaction on a tainted
    row, a final snapshot the validation does not reach) is unknown."""
    rules.rules_verdict = rules.verdict
    rules.refinement = refinement.to_json()
    rules.refinement_line = refinement.line()
    rules.refinement_findings = [f.detail() for f in refinement.findings[:5]]
    verdicts = {rules.verdict, refinement.verdict}
    if "invalid" in verdicts:
        rules.verdict = "invalid"
        if refinement.verdict == "invalid" and not rules.findings:
            rules.why = f"trace validation: {refinement.why}"
    elif verdicts == {"valid"}:
        rules.verdict = "valid"
    else:
        rules.verdict = "unknown"
        if refinement.verdict != "valid":
            rules.why = f"trace validation {refinement.verdict}: {refinement.why}" + (
                f"; {rules.why}" if rules.why else ""
            )
    return rules


class HistoryCheck:
    def __init__(self, url: str, run_dir: Path, capture: Capture | None, skipped: str | None) -> None:
        self.url, self.run_dir, self.capture, self.skipped = url, Path(run_dir), capture, skipped
        self.initial = None
        self.result: HistoryResult | None = None
        self.slot_dropped: bool | None = None

    @classmethod
    def begin(
        cls, url: str, run_dir: Path, run_id: str, enabled: bool = True, why_off: str = "turned off (--no-history)"
    ) -> HistoryCheck:
        if not enabled:
            return cls(url, run_dir, None, why_off)
        run_dir = Path(run_dir)
        try:
            cap = Capture.open(url, run_dir / "history.bin", slot_name(run_id), poll_s=POLL_S)
        except CaptureUnavailable as exc:
            return cls(url, run_dir, None, f"the server does not allow logical capture: {exc}")
        hc = cls(url, run_dir, cap, None)
        try:
            with psycopg.connect(url, autocommit=True) as c:
                hc.initial = snapshot(c)
            save_state(hc.initial, run_dir / "history-initial.pickle")
            cap.start()
        except BaseException:
            hc.close()
            raise
        return hc

    @property
    def line_prefix(self) -> str:
        return "history"

    def finish(self, disk_tables_over: int = 10_000) -> HistoryResult:
        """Drain the slot, take the final snapshot, replay. Call once no worker or driver writes any more."""
        if self.capture is None:
            self.result = HistoryResult("skipped", why=self.skipped or "")
            return self.result
        self.capture.stop()
        # The final snapshot must be the state after the last captured commit: a straggler (a killed
        # worker's backend finishing its COMMIT, a process that outlived its kill) may still write. Retake
        # the snapshot until no transaction arrives after it.
        for _ in range(10):
            with psycopg.connect(self.url, autocommit=True) as c:
                final = snapshot_streamed(c, big=disk_table, big_over=disk_tables_over)  # big ones on disk
            time.sleep(0.5)  # a commit in flight during the snapshot lands in the slot meanwhile
            if self.capture.drain() == 0:
                break
        save_state(final, self.run_dir / "history-final.pickle")
        stats = dict(
            self.capture.stats,
            start_lsn=self.capture.start_lsn,
            slot=self.capture.slot,
            bin_bytes=self.capture.path.stat().st_size if self.capture.path.exists() else 0,
        )
        rules = replay(read_transactions(self.capture.path), self.initial, final, stats)
        # On more than one CPU the capture is decoded by a second process while this one validates (the
        # same verdicts, field for field: soak/judges/refine/feed.py) — as `python -m soak.judges.refine` does.
        ahead = (os.cpu_count() or 1) > 1
        refinement = validate(
            feed.decode_ahead(self.capture.path) if ahead else read_transactions(self.capture.path),
            self.run_dir,  # history.jsonl: the harness's cancels and signals (the driver has stopped)
            self.initial,
            taint=set(rules.tainted),
            final_state=final,
        )
        self.result = merge(rules, refinement)
        return self.result

    def add_to_report(self, run_dir: Path, fault_log: list[dict]) -> None:
        if self.result is not None:
            add_to_report(Path(run_dir), self.result, fault_log)

    def close(self) -> bool:
        """Drop the slot and publication (idempotent); True when no slot of ours is left."""
        if self.capture is None:
            return True
        self.slot_dropped = self.capture.close()
        return self.slot_dropped


__all__ = ["HistoryCheck", "combine_exit", "final_verdict", "merge"]
