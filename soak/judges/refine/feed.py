"""The decoding half of the trace validation (soak/judges/refine/), apart from the state it judges against:
each captured transaction's pgoutput messages decoded and its rows converted to the model's row types
(`decode_tx`), optionally in a second process that runs ahead of the validator (`decode_ahead`).

Decoding depends on nothing but the stream itself (Relation messages announce the columns later row
messages use), so it can run ahead: the validator (validator.py `Validator.rows_from`) then only compares
the decoded rows with the rows it holds. In a second process the decoding (a quarter of the validation's
CPU) overlaps the model simulation on another core; the validator receives the same `Decoded` values it
would have made itself (pickled in batches), so every judgement is unchanged (tests/test_refine.py runs a
history both ways and compares the results).
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
from soak.record.pgoutput import Change, Decoder, Truncate

BATCH = 256  # transactions per message between the processes


class Decoded(NamedTuple):
    """One transaction, decoded. `items`, in message order: ("gap", text) for a TRUNCATE, ("meta", new row
    dict) for belay_meta, ("row", table, kind, relation, new, new_dict, old, old_raw, new_raw) for a row of a
    model table — `new`/`old` converted (CONVERT), except an update with unchanged TOAST values, whose
    `new_dict` (UNCHANGED placeholders included) the validator merges with the old row it holds."""

    lsn: int
    at: datetime
    xid: int
    items: list[tuple[Any, ...]]


def decode_tx(decoder: Decoder, tx: Transaction) -> Decoded:
    items: list[tuple[Any, ...]] = []
    for m in tx.messages:
        c = decoder.decode(m)
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
        make = conv[0]
        if c.new is not None and c.unchanged:
            new, new_dict = None, c.new
        else:
            new, new_dict = (make(c.new) if c.new is not None else None), None
        old = make(c.old) if c.old is not None else None
        items.append(("row", table, c.kind, c.relation, new, new_dict, old, c.old_raw, c.new_raw))
    return Decoded(tx.commit_lsn, tx.commit_time, tx.xid, items)


_LEN = struct.Struct(">Q")
ROOT = Path(__file__).resolve().parents[3]  # the repository: the second process imports this code, not another copy


def _send(out: IO[bytes], data: bytes) -> None:
    out.write(_LEN.pack(len(data)))
    out.write(data)


def produce(path: Path, out: IO[bytes]) -> None:
    """The second process: decode the capture file and write batches of Decoded (a length, then a pickle);
    a zero length ends the stream, an exception is sent as ("error", exc) after the batch before it."""
    batch: list[Decoded] = []
    try:
        decoder = Decoder(lazy_old=True)
        for tx in read_transactions(path):
            batch.append(decode_tx(decoder, tx))
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
