"""The run's history: every fault, phase and driver action with its wall-clock time (epoch seconds).

Thread-safe; appended to `history.jsonl` in the report folder as it happens (so a killed harness still
leaves its fault log behind). With a file nothing stays in memory (issue 27: the periodic lease, priority
and step-journal samples grow with the backlog and the journal, the driver's actions with the length of
the run — in memory they were most of the harness's growth); `stream()` reads the events back one at a
time, `snapshot()` as a list for the checker. Without a file everything stays in memory. Secrets never
enter it: callers pass URLs through `impl.provision.redact`.

`close()` gzips the file (`history.jsonl.gz`; a two-hour soak's 83 MB log was 7.9 MB so, issue 27) and
removes the plain one; `read_events` reads either, and a log cut short by a killed harness up to its
last whole line.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

GZ = ".gz"


def events_path(where: Path | str) -> Path | None:
    """The run's event log: `where` is a report folder or a history.jsonl path; the plain file while it
    exists (a run still going, or one killed while its log was being compressed), else the .gz."""
    p = Path(where)
    if p.is_dir():
        p = p / "history.jsonl"
    if p.suffix == GZ:
        p = p.with_suffix("")
    for candidate in (p, p.with_name(p.name + GZ)):
        if candidate.exists():
            return candidate
    return None


def read_events(path: Path | str | None, limit: int | None = None) -> Iterator[dict[str, Any]]:
    """The events of a history.jsonl or history.jsonl.gz, in order (at most `limit`); a line cut short
    by a killed writer (no newline yet, or a gzip stream without its end) ends the log."""
    if path is None:
        return
    p = Path(path)
    f = gzip.open(p, "rt", encoding="utf-8") if p.suffix == GZ else open(p, encoding="utf-8")  # noqa: SIM115 -- closed below
    n = 0
    try:
        while limit is None or n < limit:
            try:
                line = f.readline()
            except EOFError:  # a gzip stream without its end: what came before it is the log
                return
            if not line.endswith("\n"):
                return
            n += 1
            yield json.loads(line)
    finally:
        f.close()


class History:
    def __init__(self, path: Path | None = None) -> None:
        self.events: list[dict[str, Any]] = []  # every event when there is no file; none with one
        self.lock = threading.Lock()
        self.path = path
        self.file = open(path, "a", encoding="utf-8") if path is not None else None  # noqa: SIM115 -- open for the history's lifetime, closed by close()
        self.written = 0  # events in the file

    def record(self, type: str, **fields: Any) -> dict[str, Any]:
        event = {"t": time.time(), "type": type, **fields}
        line = json.dumps(event, default=str) + "\n" if self.file is not None else ""
        with self.lock:
            if self.file is not None:
                self.file.write(line)
                self.file.flush()
                self.written += 1
            else:
                self.events.append(event)
        return event

    def of(self, *types: str) -> list[dict[str, Any]]:
        """Events of these types recorded so far."""
        return [e for e in self.stream() if e["type"] in types]

    def stream(self) -> Iterator[dict[str, Any]]:
        """Every event recorded so far, in order, one at a time (read back from the file)."""
        if self.path is None:
            yield from self.snapshot_in_memory()
            return
        with self.lock:
            if self.file is not None:
                self.file.flush()
            n = self.written
        yield from read_events(self.path, limit=n)

    def snapshot_in_memory(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.events)

    def snapshot(self, skip: tuple[str, ...] = ()) -> list[dict[str, Any]]:
        """The whole history as a list (samples included), but events of the `skip` types."""
        events = self.stream() if self.path is not None else iter(self.snapshot_in_memory())
        return [e for e in events if e.get("type") not in skip] if skip else list(events)

    def of_types(self, types: tuple[str, ...]) -> Iterator[dict[str, Any]]:
        """The events of these types, streamed (the checker reads a run's samples so, issue 27)."""
        return (e for e in self.stream() if e.get("type") in types)

    def close(self, compress: bool = True) -> None:
        """Close the file and (by default) replace it by its gzip (written aside, then renamed: a kill
        meanwhile leaves the plain log, which readers prefer)."""
        with self.lock:
            if self.file is None:
                return
            self.file.close()
            self.file = None
            if not compress or self.path is None or self.path.suffix == GZ:
                return
            gz = self.path.with_name(self.path.name + GZ)
            part = gz.with_name(gz.name + ".part")
            with open(self.path, "rb") as src, gzip.open(part, "wb", compresslevel=6) as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            os.replace(part, gz)
            self.path.unlink()
            self.path = gz
