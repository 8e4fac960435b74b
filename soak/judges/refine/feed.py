"""The decoding half of the trace validation (soak/judges/refine/), apart from the state it judges against:
each captured transaction's pgoutput messages decoded and its rows converted to the model's row types
(`RowDecoder`), optionally in a second process that runs ahead of the validator (`decode_ahead`).

Decoding depends on nothing but the stream itself (Relation messages announce the columns later row
messages use; an update's old tuple is checked against the row's last version in the stream, as bytes), so
it can run ahead: the validator (validator.py `Validator.rows_from`) then only compares the decoded rows
with the rows it holds. In a second process the decoding (a third of the validation's CPU) overlaps the
model simulation on another core; the validator receives the same `Decoded` values it would have made
itself (pickled in batches), so every judgement is unchanged (tests/test_refine.py runs a history both ways
and compares the results).
"""

from __future__ import annotations

import os
import pickle
import struct
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import IO, Any, NamedTuple

from soak.judges.replay import CONVERT
from soak.record.capture import Transaction, read_transactions
from soak.record.pgoutput import UNCHANGED, Change, Decoder, Truncate
from soak.record.spill import HOT, SpillDict

BATCH = 256  # transactions per message between the processes


class Decoded(NamedTuple):
    """One transaction, decoded. `items`, in message order: ("gap", text) for a TRUNCATE or an update whose
    unchanged TOAST values have no old row to come from, ("meta", new row dict) for belay_meta, ("row", table,
    kind, new, old, stale) for a row of a model table, `new`/`old` converted (CONVERT):

    - `new`: the row as the change left it (None for a delete); an update with unchanged TOAST values has
      them taken from its old tuple;
    - `stale`: the change carried an old tuple that differs from the row's last version in the stream so
      far (or the stream never showed the row) — the validator then compares `old` with the row it holds;
    - `old`: the converted old tuple of a delete, or of a stale update; None otherwise (the old tuple is the
      last version the validator holds, so it is not sent)."""

    lsn: int
    at: datetime
    xid: int
    items: list[tuple[Any, ...]]


class RowDecoder:
    """Decodes a capture's transactions in order. Stateful twice over: Relation messages announce the columns
    later row messages use (pgoutput), and each row's last TupleData is kept (`raw`, spilled to disk past
    `hot` rows) so that an update's old tuple is compared with it as bytes — only a stale one is converted
    and handed to the validator. Both depend on nothing but the stream, so this can run ahead of the
    validation in a second process (`decode_ahead`)."""

    def __init__(self, hot: int = HOT) -> None:
        self.decoder = Decoder(lazy_old=True)
        self.raw: SpillDict = SpillDict(hot=hot)  # (table, key) → the TupleData of the row's last version

    def decode(self, tx: Transaction) -> Decoded:
        items: list[tuple[Any, ...]] = []
        raw = self.raw
        for m in tx.messages:
            c = self.decoder.decode(m)
            if isinstance(c, Truncate):
                items.append(("gap", f"TRUNCATE of {', '.join(r.name for r in c.relations)}"))
                continue
            if not isinstance(c, Change):
                continue
            table = c.table
            if table == "belay_meta":
                items.append(("meta", c.new))
                continue
            conv = CONVERT.get(table)
            if conv is None:
                continue
            make, key_of = conv
            old_raw = c.old_raw
            if c.new is not None and c.unchanged:  # unchanged TOAST values: taken from the old tuple
                if old_raw is None:
                    items.append(("gap", f"{table}: an update with unchanged TOAST values and no old row"))
                    continue
                oldrow = self.decoder.load(old_raw, c.relation)
                new = make({k: (oldrow[k] if v is UNCHANGED else v) for k, v in c.new.items()})
            else:
                new = make(c.new) if c.new is not None else None
            old = make(c.old) if c.old is not None else None
            rk = (table, key_of(new if new is not None else old))
            stale = old_raw is not None and raw.get(rk) != old_raw
            if stale and old is None and old_raw is not None:
                old = make(self.decoder.load(old_raw, c.relation))
            items.append(("row", table, c.kind, new, old, stale))
            if c.new_raw is not None:
                raw[rk] = c.new_raw
            else:
                raw.pop(rk, None)
        raw.spill()
        return Decoded(tx.commit_lsn, tx.commit_time, tx.xid, items)

    def close(self) -> None:
        self.raw.close()


_LEN = struct.Struct(">Q")
ROOT = Path(__file__).resolve().parents[3]  # the repository: the second process imports this code, not another copy


def _send(out: IO[bytes], data: bytes) -> None:
    out.write(_LEN.pack(len(data)))
    out.write(data)


def produce(path: Path, out: IO[bytes]) -> None:
    """The second process: decode the capture file and write batches of Decoded (a length, then a pickle);
    a zero length ends the stream, an exception is sent as ("error", exc) after the batch before it."""
    batch: list[Decoded] = []
    decoder = RowDecoder()
    try:
        for tx in read_transactions(path):
            batch.append(decoder.decode(tx))
            if len(batch) >= BATCH:
                _send(out, pickle.dumps(batch, protocol=5))
                batch = []
        if batch:
            _send(out, pickle.dumps(batch, protocol=5))
        _send(out, b"")
    except Exception as exc:  # noqa: BLE001 - handed to the validator, which raises it
        if batch:  # the transactions before the failing one first, as the validator would have seen them
            _send(out, pickle.dumps(batch, protocol=5))
        try:
            _send(out, pickle.dumps(("error", exc), protocol=5))
        except Exception:  # noqa: BLE001 - the exception itself may not pickle
            _send(out, pickle.dumps(("error", RuntimeError(repr(exc))), protocol=5))
    finally:
        decoder.close()
    out.flush()


def _read(stream: IO[bytes], n: int) -> bytes:
    data = stream.read(n)
    if len(data) != n:
        raise EOFError(f"the decoding process ended early ({len(data)} of {n} bytes)")
    return data


def decode_ahead(path: Path) -> Iterator[Decoded]:
    """The transactions of capture file `path`, decoded by a second process (`python -m
    soak.judges.refine.ahead`, started fresh: safe whatever the calling process is — threads, a script
    without a __main__ guard) while the caller validates the ones before."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    proc = subprocess.Popen(
        [sys.executable, "-m", "soak.judges.refine.ahead", str(Path(path).resolve())],
        stdout=subprocess.PIPE,
        cwd=ROOT,
        env=env,
    )
    assert proc.stdout is not None
    try:
        while True:
            (n,) = _LEN.unpack(_read(proc.stdout, _LEN.size))
            if not n:
                break
            got = pickle.loads(_read(proc.stdout, n))
            if isinstance(got, tuple) and got and got[0] == "error":
                raise got[1]
            yield from got
        proc.wait()
    finally:
        proc.stdout.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
