"""The final snapshot saved beside a run's history (state.json.gz) and read back, so a captured history can
be re-judged later (`python -m soak.judges.replay <run-dir>`, `python -m soak.judges.refine <run-dir>`).
"""

from __future__ import annotations

import contextlib
import gzip
import itertools
import pickle
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from model.state import State, from_rows
from soak.judges.replay.findings import CONVERT, TABLE_ATTR

# --- persistence of the initial state (a State holds read-only mappings, which do not pickle) -------------


STATE_FORMAT = 2  # a stream of pickles: header, then ("table", rows) chunks, then None
STATE_TABLES = ("jobs", "steps", "events", "signals", "rate", "queues", "crons")


def save_state(state: State, path: Path) -> None:
    """A gzip-compressed stream of pickles, written table by table in chunks of rows (a long run's state
    is never one list in memory). gzip level 3: a two-hour soak's final state (381k jobs) is 124 MB as a
    plain pickle, 18 MB so (4 s)."""
    tmp = path.with_name(path.name + ".part")
    with gzip.open(tmp, "wb", compresslevel=3) as f:

        def dump(obj: Any) -> None:  # one pickle per frame (its own memo): read back with pickle.load
            f.write(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))

        rows = {attr: len(getattr(state, attr)) for attr in STATE_TABLES}  # load_state's choice, without a list
        dump({"format": STATE_FORMAT, "meta": (state.version, state.contract_major, state.next_id), "rows": rows})
        for attr in STATE_TABLES:
            chunk: list[Any] = []
            for row in getattr(state, attr).values():
                chunk.append(row)
                if len(chunk) >= 2000:
                    dump((attr, chunk))
                    chunk = []
            if chunk:
                dump((attr, chunk))
        dump(None)
    tmp.replace(path)


def load_state(path: Path, big: Any = None, big_over: int = 10_000) -> State:
    """The state save_state wrote (or an older run's single pickle, gzip or plain). With `big` (a
    DiskTable builder), jobs, steps and events past `big_over` rows are streamed into it, not into dicts."""
    with open(path, "rb") as raw:
        compressed = raw.read(2) == b"\x1f\x8b"
        raw.seek(0)
        with gzip.open(raw, "rb") if compressed else contextlib.nullcontext(raw) as f:
            head = pickle.load(f)
            if not (isinstance(head, dict) and head.get("format") == STATE_FORMAT):  # older runs: one dict
                v, c, n = head.pop("meta")
                return from_rows(*(head[a] for a in STATE_TABLES), version=v, contract_major=c, next_id=n)
            v, c, n = head["meta"]
            frames = _Frames(f)
            lists: dict[str, list[Any]] = {}
            mapped: dict[str, Any] = {}
            for attr in STATE_TABLES:  # save_state wrote the tables in this order
                rows = frames.rows_of(attr)
                if big is None or attr not in KEY_OF:
                    lists[attr] = list(rows)
                    continue
                key = KEY_OF[attr]
                if attr in head.get("rows", {}):  # counted when saved: no list of the first big_over rows
                    if head["rows"][attr] < big_over:
                        lists[attr] = list(rows)
                    else:
                        mapped[attr] = big((key(r), r) for r in rows)
                    continue
                first = list(itertools.islice(rows, big_over))  # a file saved before the counts
                if len(first) < big_over:
                    lists[attr] = first
                else:
                    mapped[attr] = big((key(r), r) for r in itertools.chain(first, rows))
    small = from_rows(*(lists.get(a, ()) for a in STATE_TABLES), version=v, contract_major=c, next_id=n)
    return replace(small, **mapped)  # the big tables as built, the rest as from_rows made them


class _Frames:
    """save_state's ("table", rows) frames, read one at a time."""

    def __init__(self, f: Any) -> None:
        self.f = f
        self.head: tuple[str, list[Any]] | None = pickle.load(f)

    def rows_of(self, attr: str) -> Iterator[Any]:
        while self.head is not None and self.head[0] == attr:
            rows = self.head[1]
            self.head = pickle.load(self.f)
            yield from rows


KEY_OF = {TABLE_ATTR[t]: CONVERT[t][1] for t in ("belay_jobs", "belay_steps", "belay_events")}  # the big ones
