"""The run's history: every fault, phase and driver action with its wall-clock time (epoch seconds).

Thread-safe; kept in memory for the checker and appended to `history.jsonl` in the report folder as it
happens (so a killed harness still leaves its fault log behind). Secrets never enter it: callers pass
URLs through `impl.provision.redact`.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any


class History:
    def __init__(self, path: Path | None = None) -> None:
        self.events: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.file = open(path, "a", encoding="utf-8") if path is not None else None  # noqa: SIM115 -- open for the history's lifetime, closed by close()

    def record(self, type: str, **fields: Any) -> dict[str, Any]:
        event = {"t": time.time(), "type": type, **fields}
        with self.lock:
            self.events.append(event)
            if self.file is not None:
                self.file.write(json.dumps(event, default=str) + "\n")
                self.file.flush()
        return event

    def of(self, *types: str) -> list[dict[str, Any]]:
        with self.lock:
            return [e for e in self.events if e["type"] in types]

    def snapshot(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.events)

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None
