"""Memory and report size over a run (issue 13: a long soak must stay bounded, and say so with figures).

The harness samples its own resident set and every live worker's every `every` seconds (from
`/proc/<pid>/status`, VmRSS; a worker binary that `exec`s keeps the pid the harness started). Workers are
killed and restarted all run long, so a worker figure is per *incarnation*: the summary gives the workers'
RSS at the first sample and at the last, the largest any incarnation reached, and the RSS of the
longest-lived incarnation with its age — the number that would grow if a worker leaked.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MiB = 1024 * 1024
WARM_S = 60.0


def _status_bytes(pid: int | str, field: bytes) -> int | None:
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def rss_bytes(pid: int | str = "self") -> int | None:
    """VmRSS of a process in bytes, None when it is gone (or has no memory: a zombie)."""
    return _status_bytes(pid, b"VmRSS:")


def peak_rss_bytes(pid: int | str = "self") -> int | None:
    """VmHWM: the largest resident set the process has had (the end-of-run check included)."""
    return _status_bytes(pid, b"VmHWM:")


def check_phase(mem: dict[str, Any], name: str) -> None:
    """Note the harness's peak RSS so far at the end of one step of the end-of-run check (snapshot,
    ledger, history, checkers, report): the summary says which step raised the peak."""
    peak = peak_rss_bytes()
    if mem and peak is not None:
        mem.setdefault("check_phases", []).append([name, round(peak / MiB, 1)])


def add_check_peak(mem: dict[str, Any]) -> dict[str, Any]:
    """The harness's lifetime peak RSS, read after the end-of-run check: the samples stop before it, and
    the check (snapshot, replay, trace validation, checkers) is where a long run's memory went."""
    peak = peak_rss_bytes()
    if mem and peak is not None:
        mem["harness_rss_mib"]["peak_with_check"] = round(peak / MiB, 1)
    return mem


@dataclass
class MemorySampler:
    every: float = 30.0
    samples: list[dict[str, Any]] = field(default_factory=list)
    _last: float = float("-inf")
    _born: dict[tuple[int, int], float] = field(default_factory=dict)  # (slot, incarnation) → first seen

    def maybe_sample(self, slots: list[Any], now: float | None = None, force: bool = False) -> None:
        now = time.monotonic() if now is None else now
        if not force and now - self._last < self.every:
            return
        self._last = now
        workers = []
        for s in slots:
            proc = getattr(s, "proc", None)
            if proc is None or proc.poll() is not None:
                continue
            rss = rss_bytes(proc.pid)
            if rss is None:
                continue
            key = (s.index, s.incarnation)
            born = self._born.setdefault(key, now)
            workers.append({"slot": s.index, "incarnation": s.incarnation, "age": now - born, "rss": rss})
        self.samples.append({"t": now, "harness": rss_bytes() or 0, "workers": workers})
        trace_top(now)
        if len(self.samples) > 4000:  # bounded even for a day-long run: keep every other old sample
            self.samples = self.samples[:2000:2] + self.samples[2000:]

    def summary(self) -> dict[str, Any]:
        if not self.samples:
            return {}
        first, last = self.samples[0], self.samples[-1]

        def mib(b: float) -> float:
            return round(b / MiB, 1)

        all_workers = [w for s in self.samples for w in s["workers"]]
        oldest = max(all_workers, key=lambda w: w["age"], default=None)
        at10 = next((s for s in self.samples if s["t"] - first["t"] >= 600), None)
        out: dict[str, Any] = {
            "samples": len(self.samples),
            "harness_rss_mib": {
                "start": mib(first["harness"]),
                "end": mib(last["harness"]),
                "max": mib(max(s["harness"] for s in self.samples)),
                **({"at_10_min": mib(at10["harness"])} if at10 is not None else {}),
            },
            "worker_rss_mib": {
                "start": [mib(w["rss"]) for w in first["workers"]],
                "end": [mib(w["rss"]) for w in last["workers"]],
                "max": mib(max((w["rss"] for w in all_workers), default=0)),
            },
        }
        if oldest is not None:
            mine = [
                w
                for s in self.samples
                for w in s["workers"]
                if (w["slot"], w["incarnation"]) == (oldest["slot"], oldest["incarnation"])
            ]
            # its first reading once warm (a minute in: imports and pools are loaded), else its first
            born_rss = next((w["rss"] for w in mine if w["age"] >= WARM_S), mine[0]["rss"])
            out["oldest_worker"] = {
                "slot": oldest["slot"],
                "incarnation": oldest["incarnation"],
                "age_s": round(oldest["age"]),
                "rss_mib_first_seen": mib(born_rss),
                "rss_mib_at_oldest": mib(oldest["rss"]),
            }
        return out


_TRACE_BASE: list[Any] = []  # the snapshot later ones are compared with (the second sample: warm)


def trace_top(now: float, lines: int = 25) -> None:
    """Under `python -X tracemalloc=N` with BELAY_SOAK_TRACEMALLOC=<file>: append to that file, at every
    sample, the allocation sites (tracebacks of N frames) that grew most since the second sample — what
    grows with the run."""
    import os
    import tracemalloc

    path = os.environ.get("BELAY_SOAK_TRACEMALLOC")
    if not path or not tracemalloc.is_tracing():
        return
    snap = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
    if len(_TRACE_BASE) < 2:
        _TRACE_BASE.append(snap)
        return
    with open(path, "a") as f:
        f.write(f"--- t={now:.0f} traced {tracemalloc.get_traced_memory()[0] / MiB:.1f} MiB\n")
        for st in snap.compare_to(_TRACE_BASE[1], "traceback")[:lines]:
            f.write(f"{st.size_diff / MiB:+8.2f} MiB {st.count_diff:+9d}\n")
            for frame in st.traceback.format()[-12:]:
                f.write(f"        {frame}\n")


def dir_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def describe(mem: dict[str, Any], report_bytes: int) -> str:
    """One summary line: harness and worker RSS at start and end, and the report's size on disk."""
    parts = [f"report size {report_bytes / MiB:.1f} MiB"]
    if mem:
        h, w = mem["harness_rss_mib"], mem["worker_rss_mib"]
        text = f"harness RSS {h['start']} → {h['end']} MiB (max {h['max']}"
        if "at_10_min" in h:
            text += f", at 10 min {h['at_10_min']}"
        if "peak_with_check" in h:
            text += f"; peak with the end-of-run check {h['peak_with_check']}"
            if mem.get("check_phases"):
                text += " — peak after " + ", ".join(f"{n} {v}" for n, v in mem["check_phases"])
        parts.insert(0, text + ")")
        parts.insert(1, f"worker RSS at start {w['start']} MiB, at end {w['end']} MiB (max {w['max']})")
        if "oldest_worker" in mem:
            o = mem["oldest_worker"]
            parts.insert(
                2,
                f"longest-lived worker (slot {o['slot']}, {o['age_s']} s) "
                f"{o['rss_mib_first_seen']} → {o['rss_mib_at_oldest']} MiB",
            )
    return "; ".join(parts)
