"""One JSON codec for the shared vocabulary (model/ops.py, model/worker_ops.py, model/rows.py), derived
from the dataclass fields: no case is written by hand per operation (docs/sdk-adapter.md "Values").

    to_wire(value)          a Python value -> JSON-ready data
    from_wire(data, hint)   JSON data -> a Python value of the type `hint` (a type annotation)

On the wire: a dataclass is an object {"type": "<ClassName>", <field>: <value>, ...} with every field
its constructor takes (fields with init=False, like Succeed.encoded, are not sent); a datetime is an
ISO-8601 string with a UTC offset; a timedelta is a number of seconds; bytes are base64; tuples,
lists and frozensets are arrays; a Mapping is an object; a field typed `Any` (job input, payloads, step
values) is the JSON value itself, never interpreted. Decoding is type-directed by the field
annotations and strict: a missing or unknown field, a wrong JSON type, an unknown "type" name or a
naive timestamp raises `WireError`, which the harness reports as an unknown result naming the request.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import types
import typing
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Any

from model import cron, ops, queues, rows
from model import worker_ops as w


class WireError(ValueError):
    """JSON that is not a value of the vocabulary (the message says where and what)."""


def _vocabulary() -> dict[str, type]:
    found: dict[str, type] = {}
    for module in (ops, w, rows, queues, cron):
        for name, obj in vars(module).items():
            if isinstance(obj, type) and dataclasses.is_dataclass(obj) and not name.startswith("_"):
                if obj.__module__ != module.__name__:
                    continue  # re-exported: registered by its own module
                if name in found and found[name] is not obj:
                    raise RuntimeError(f"two vocabulary dataclasses are named {name}")
                found[name] = obj
    return found


TYPES: dict[str, type] = _vocabulary()
CLIENT_OPS = tuple(
    n
    for n in (
        "CheckCompat",
        "Enqueue",
        "EnqueueWorkflow",
        "DeliverSignal",
        "Steer",
        "ClearSignal",
        "Cancel",
        "Retry",
        "PutQueue",
        "PutCron",
        "ReadJob",
        "ReadSteps",
        "ReadEvents",
        "ReadWorkflow",
        "ReadSignals",
    )
)
WORKER_OPS = (
    "Claim",
    "Renew",
    "Reclaim",
    "Ack",
    "AckMany",
    "AckClaim",
    "ParkAwait",
    "Sleep",
    "ReadStep",
    "Preflight",
    "RecordStep",
    "EmitEvent",
    "Spawn",
    "SpawnChildren",
    "AwaitChildren",
    "Reconcile",
    "FireCrons",
    "Prune",
)
ALL_OPS = CLIENT_OPS + WORKER_OPS
# Error classes a reply may name (docs/sdk-adapter.md "Errors"); anything else is a finding.
ERROR_CLASSES = ("InvalidInput", "IncompatibleSchema", "Overflow", "Unsupported")


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def wire_fields(cls: type) -> tuple[str, ...]:
    """The fields an operation carries on the wire: every constructor field but those marked
    `metadata={"wire": False}` — the reference's own mechanisms, not the contract's (EmitEvent.once: the
    reference's retry of an emit; an SDK retries its emits its own way or not at all, sdk-guide §7)."""
    return tuple(f.name for f in dataclasses.fields(cls) if f.init and f.metadata.get("wire", True))


# ---------------------------------------------------------------------------------------------
# encoding


def to_wire(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out: dict[str, Any] = {"type": type(value).__name__}
        for name in wire_fields(type(value)):
            out[name] = to_wire(getattr(value, name))
        return out
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise WireError(f"a naive datetime cannot go on the wire: {value!r}")
        return value.astimezone(UTC).isoformat()
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
        return int(seconds) if seconds == int(seconds) else seconds
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, Mapping):
        return {str(k): to_wire(v) for k, v in value.items()}
    if isinstance(value, (frozenset, set)):
        return sorted((to_wire(v) for v in value), key=repr)
    if isinstance(value, (tuple, list)):
        return [to_wire(v) for v in value]
    raise WireError(f"no wire form for {type(value).__name__}: {value!r}")


# ---------------------------------------------------------------------------------------------
# decoding


def _kind(data: Any) -> str:
    return "null" if data is None else type(data).__name__


def from_wire(data: Any, hint: Any = None, where: str = "result") -> Any:
    """Decode `data` as a value of `hint`; None means: any vocabulary value (a tagged object, an array
    of them, or null)."""
    if hint is None:
        if isinstance(data, list):
            return tuple(from_wire(v, None, f"{where}[{i}]") for i, v in enumerate(data))
        if data is None:
            return None
        return _dataclass(data, tuple(TYPES.values()), where)
    if hint is Any:
        return data
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(hint)
        if data is None:
            if type(None) in options:
                return None
            raise WireError(f"{where}: null is not allowed here")
        rest = [o for o in options if o is not type(None)]
        classes = tuple(o for o in rest if isinstance(o, type) and dataclasses.is_dataclass(o))
        if classes and isinstance(data, dict) and "type" in data:
            return _dataclass(data, classes, where)
        if len(rest) == 1:
            return from_wire(data, rest[0], where)
        raise WireError(f"{where}: {_kind(data)} matches none of {hint}")
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _dataclass(data, (hint,), where)
    if origin in (tuple, list, frozenset, set) or hint in (tuple, list):
        if not isinstance(data, list):
            raise WireError(f"{where}: expected an array, got {_kind(data)}")
        args = typing.get_args(hint)
        if origin is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
            if len(args) != len(data):
                raise WireError(f"{where}: expected {len(args)} items, got {len(data)}")
            return tuple(from_wire(v, a, f"{where}[{i}]") for i, (v, a) in enumerate(zip(data, args, strict=True)))
        item = args[0] if args else Any
        items = [from_wire(v, item, f"{where}[{i}]") for i, v in enumerate(data)]
        return {tuple: tuple, list: list, frozenset: frozenset, set: set}.get(origin or hint, tuple)(items)
    if origin in (dict, Mapping) or hint in (dict, Mapping) or origin is typing.get_origin(Mapping[str, Any]):
        if not isinstance(data, dict):
            raise WireError(f"{where}: expected an object, got {_kind(data)}")
        args = typing.get_args(hint)
        value_hint = args[1] if len(args) == 2 else Any
        return {k: from_wire(v, value_hint, f"{where}.{k}") for k, v in data.items()}
    if hint is datetime:
        if not isinstance(data, str):
            raise WireError(f"{where}: expected an ISO-8601 timestamp string, got {_kind(data)}")
        try:
            parsed = datetime.fromisoformat(data)
        except ValueError:
            raise WireError(f"{where}: {data!r} is not an ISO-8601 timestamp") from None
        if parsed.tzinfo is None:
            raise WireError(f"{where}: timestamp {data!r} has no UTC offset")
        return parsed.astimezone(UTC)
    if hint is timedelta:
        if isinstance(data, bool) or not isinstance(data, (int, float)):
            raise WireError(f"{where}: expected a number of seconds, got {_kind(data)}")
        return timedelta(seconds=data)
    if hint is bytes:
        if not isinstance(data, str):
            raise WireError(f"{where}: expected base64 text, got {_kind(data)}")
        try:
            return base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise WireError(f"{where}: {data[:40]!r} is not base64") from None
    if hint is bool:
        if not isinstance(data, bool):
            raise WireError(f"{where}: expected true or false, got {_kind(data)}")
        return data
    if hint is int:
        if isinstance(data, bool) or not isinstance(data, int):
            raise WireError(f"{where}: expected an integer, got {_kind(data)} {data!r}")
        return data
    if hint is float:
        if isinstance(data, bool) or not isinstance(data, (int, float)):
            raise WireError(f"{where}: expected a number, got {_kind(data)}")
        return data
    if hint is str:
        if not isinstance(data, str):
            raise WireError(f"{where}: expected a string, got {_kind(data)} {data!r}")
        return data
    if hint is type(None):
        if data is not None:
            raise WireError(f"{where}: expected null")
        return None
    raise WireError(f"{where}: the codec has no rule for {hint!r}")


def _dataclass(data: Any, allowed: tuple[type, ...], where: str) -> Any:
    if not isinstance(data, dict):
        raise WireError(f'{where}: expected an object with a "type", got {_kind(data)} {str(data)[:80]}')
    name = data.get("type")
    cls = TYPES.get(name) if isinstance(name, str) else None
    if cls is None:
        raise WireError(f"{where}: unknown type {name!r}")
    if cls not in allowed:
        raise WireError(f"{where}: a {name} is not allowed here (expected {' | '.join(c.__name__ for c in allowed)})")
    names = wire_fields(cls)
    missing = [n for n in names if n not in data]
    extra = sorted(set(data) - set(names) - {"type"})
    if missing or extra:
        raise WireError(
            f"{where}: {name} "
            + "; ".join(
                part
                for part in (f"missing {missing}" if missing else "", f"unknown fields {extra}" if extra else "")
                if part
            )
        )
    hints = _hints(cls)
    values = {n: from_wire(data[n], hints[n], f"{where}.{n}") for n in names}
    return cls(**values)


def decode_op(message: dict[str, Any]) -> Any:
    """A request's operation: {"op": "<ClassName>", "args": {...}} -> the op (validated by its class)."""
    name = message.get("op")
    if name not in ALL_OPS:
        raise WireError(f"unknown operation {name!r}")
    args = message.get("args")
    if not isinstance(args, dict):
        raise WireError(f'{name}: "args" must be an object')
    return _dataclass({**args, "type": name}, (TYPES[name],), name)


def encode_op(op: Any) -> dict[str, Any]:
    data = to_wire(op)
    name = data.pop("type")
    return {"op": name, "args": data}
