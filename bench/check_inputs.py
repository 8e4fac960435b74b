"""A finished soak's end-of-run check inputs, recorded and read back (bench.check_memory --inputs).

    .venv/bin/python -m bench.check_inputs OUT.pickle -- [soak/run.py arguments]   # a soak, its check recorded

The soak's checker (`soak.judges.checker.check`) is called once per run with the post-drain snapshot, the
ledger (both read from the run's own database, which is gone after the run), the history's events, the
trace validation's summary and the streamed lease/priority samples. This runs `soak.run.main` in this
process with `check` wrapped: before the real check runs, its inputs are written to OUT as a stream of
pickles — the big tables (jobs, steps, events, ledger entries) and the samples row by row, never all at
once — and the real check is then fed the samples read back from OUT. The soak's own check result
(`CheckResult.to_json()`) is appended, so a later check of the same inputs can be compared with it field
for field.

`load(path, over)` reads OUT back as the soak had it: a table of `over` rows or more into a DiskTable (what
`--disk-tables-over` does), the ledger into LedgerRows, the samples as a stream.
"""

from __future__ import annotations

import pickle
import sys
from collections.abc import Iterator, Mapping
from dataclasses import fields
from pathlib import Path
from types import MappingProxyType
from typing import Any, BinaryIO

BIG = ("jobs", "steps", "events")  # State fields snapshot_streamed may put on disk


def _stream(f: BinaryIO, items: Any) -> None:
    """Items one pickle each, then a None end mark (rows are never None)."""
    for item in items:
        pickle.dump(item, f, protocol=5)
    pickle.dump(None, f, protocol=5)


def _read(f: BinaryIO) -> Iterator[Any]:
    while (item := pickle.load(f)) is not None:
        yield item


def write(path: Path, state: Any, ledger: Any, history: list, committed: Any, samples: Any) -> Iterator[dict]:
    """Record the inputs; returns the samples read back from the file (a stream, as the soak gives them)."""
    with open(path, "wb") as f:
        small = {x.name: getattr(state, x.name) for x in fields(state) if x.name not in BIG}
        small = {k: dict(v) if isinstance(v, Mapping) else v for k, v in small.items()}
        pickle.dump({"history": list(history), "committed": committed, "state": small}, f, protocol=5)
        for name in BIG:
            table = getattr(state, name)
            pickle.dump(len(table), f, protocol=5)
            _stream(f, table.items())
        pickle.dump(len(ledger.entries), f, protocol=5)
        _stream(f, ledger.entries)
        pickle.dump((tuple(ledger.observations), tuple(ledger.unique)), f, protocol=5)
        _stream(f, samples)
    return _samples(path)


def _skip_to_samples(f: BinaryIO) -> None:
    pickle.load(f)
    for _ in (*BIG, "ledger"):
        pickle.load(f)
        for _row in _read(f):
            pass
    pickle.load(f)


def _samples(path: Path) -> Iterator[dict]:
    with open(path, "rb") as f:
        _skip_to_samples(f)
        yield from _read(f)


def append_result(path: Path, result: Any) -> None:
    with open(path, "ab") as f:
        pickle.dump(result.to_json(), f, protocol=5)


def recorded_result(path: Path) -> dict | None:
    """The soak's own check result (to_json), or None when the recording ended before it."""
    with open(path, "rb") as f:
        _skip_to_samples(f)
        for _row in _read(f):
            pass
        try:
            return pickle.load(f)
        except EOFError:
            return None


def load(path: Path, over: int = 10_000) -> tuple[Any, Any, list, Any, Iterator[dict]]:
    """(state, ledger, history, committed, samples) as the soak held them with --disk-tables-over `over`."""
    from model.state import State
    from soak.judges.inputs import LedgerRows, SoakLedger
    from soak.record.spill import DiskTable

    f = open(path, "rb")  # noqa: SIM115 -- the samples stream reads on from here, closed at its end
    head = pickle.load(f)
    tables: dict[str, Any] = {}
    for name in BIG:
        n = pickle.load(f)
        rows = _read(f)
        tables[name] = DiskTable.build(rows) if n >= over else MappingProxyType(dict(rows))
    n = pickle.load(f)
    entries = _read(f)
    ledger_rows: Any = LedgerRows(DiskTable.build((e.job_id, e) for e in entries)) if n >= over else tuple(entries)
    observations, unique = pickle.load(f)
    state = State(**tables, **head["state"])

    def samples() -> Iterator[dict]:
        try:
            yield from _read(f)
        finally:
            f.close()

    return state, SoakLedger(ledger_rows, observations, unique), head["history"], head["committed"], samples()


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 2 or args[1] != "--":
        raise SystemExit(__doc__.split("\n\n")[1])
    out = Path(args[0])
    import soak.run

    real = soak.run.check

    def recording_check(state, ledger, history, committed=None, samples=()):  # type: ignore[no-untyped-def]
        result = real(state, ledger, history, committed, samples=write(out, state, ledger, history, committed, samples))
        append_result(out, result)
        return result

    soak.run.check = recording_check  # type: ignore[assignment]
    soak.run.main(args[2:])


if __name__ == "__main__":
    main()
