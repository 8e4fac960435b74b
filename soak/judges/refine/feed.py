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

import multiprocessing
import pickle
from collections.abc import Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple

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


def decoded(transactions: Iterable[Transaction]) -> Iterator[Decoded]:
    """In this process (what `Validator.step` does with a Transaction)."""
    decoder = Decoder(lazy_old=True)
    for tx in transactions:
        yield decode_tx(decoder, tx)


def _produce(path: str, conn: Any) -> None:
    """The second process: decode the capture file and send batches of Decoded; b"" ends, an exception is
    sent as ("error", exc)."""
    batch: list[Decoded] = []
    try:
        decoder = Decoder(lazy_old=True)
        for tx in read_transactions(Path(path)):
            batch.append(decode_tx(decoder, tx))
            if len(batch) >= BATCH:
                conn.send_bytes(pickle.dumps(batch, protocol=5))
                batch = []
        if batch:
            conn.send_bytes(pickle.dumps(batch, protocol=5))
        conn.send_bytes(b"")
    except BaseException as exc:  # noqa: BLE001 - handed to the validator, which raises it
        try:  # the transactions before the failing one first, as the validator would have seen them
            if batch:
                conn.send_bytes(pickle.dumps(batch, protocol=5))
            conn.send_bytes(pickle.dumps(("error", exc), protocol=5))
        except Exception:  # noqa: BLE001 - the exception itself may not pickle
            conn.send_bytes(pickle.dumps(("error", RuntimeError(repr(exc))), protocol=5))
    finally:
        conn.close()


def decode_ahead(path: Path) -> Iterator[Decoded]:
    """The transactions of capture file `path`, decoded by a second process (spawned, so safe in a process
    with threads) while the caller validates the ones before."""
    ctx = multiprocessing.get_context("spawn")
    ours, theirs = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_produce, args=(str(path), theirs), daemon=True, name="belay-refine-decode")
    proc.start()
    theirs.close()
    try:
        while True:
            data = ours.recv_bytes()
            if not data:
                break
            got = pickle.loads(data)
            if isinstance(got, tuple) and got and got[0] == "error":
                raise got[1]
            yield from got
        proc.join()
    finally:
        ours.close()
        if proc.is_alive():
            proc.kill()
            proc.join()
