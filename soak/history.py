"""The run's history: every fault, phase and driver action with its wall-clock time (epoch seconds).

Thread-safe; appended to `history.jsonl` in the report folder as it happens (so a killed harness still
leaves its fault log behind). With a file nothing stays in memory (issue 27: the periodic lease, priority
and step-journal samples grow with the backlog and the journal, the driver's actions with the length of
the run — in memory they were most of the harness's growth); `stream()` reads the events back one at a
time, `snapshot()` as a list for the checker. Without a file everything stays in memory. Secrets never
enter it: callers pass URLs through `impl.provision.redact`.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any


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
        with open(self.path, encoding="utf-8") as f:
            for i, line in enumerate(f):
                if i >= n:
                    break
                yield json.loads(line)

    def snapshot_in_memory(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.events)

    def snapshot(self) -> list[dict[str, Any]]:
        """The whole history as a list (samples included)."""
        return list(self.stream()) if self.path is not None else self.snapshot_in_memory()

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None
