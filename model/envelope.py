"""The Belay value envelope (wire contract §2): encoding and decoding of bytea values.

``belay_steps.value`` and ``belay_jobs.result`` hold bytes in one of two encodings,
told apart by the first byte:

* ``131`` — Erlang External Term Format (``term_to_binary/1``), written by the
  Elixir reference implementation.  Decoded here, never written.
* anything else — UTF-8 JSON.  This is the only encoding this module writes.
  JSON never begins with byte 131 (0x83 cannot start a UTF-8 sequence), so the
  discriminator is exact.

Step values are capped at 1 MiB (``STEP_VALUE_CAP``); job results are not.

Python mapping of decoded ETF terms (decisions, see also the tests):

* integers (small, 32-bit, bignums) -> ``int``; floats -> ``float``.
* atoms: ``true``/``false`` -> ``True``/``False``; ``nil`` (Elixir) -> ``None``;
  every other atom, ``undefined`` included -> ``Atom(name)``, a ``str`` subclass
  (so ``Atom("ok") == "ok"``; the type tells them apart).
* binaries -> ``str`` when valid UTF-8 (Elixir strings are binaries), else ``bytes``.
* STRING_EXT -> ``list[int]``: Erlang writes any list of small integers this way,
  e.g. ``[1,2,3]``, so a list of ints is the honest meaning; charlists are rare.
* proper lists -> ``list``; improper lists -> ``ImproperList(items, tail)``;
  tuples -> ``tuple``; maps -> ``dict``.  Unhashable map keys are frozen:
  lists -> tuples, maps -> ``frozenset`` of (key, value) pairs (order-free, and
  unlike ``sorted`` it works for mixed key types).  If two keys of one map
  become equal in Python (``a`` vs ``<<"a">>``, ``1`` vs ``1.0``, ``true`` vs ``1``,
  ``[1]`` vs ``{1}``) that map is kept as ``Opaque`` rather than losing an entry.
* PIDs, ports, references, funs, exports and bitstrings -> ``Opaque(raw)``
  where ``raw`` is byte 131 + that subterm's bytes: a standalone ETF binary
  (``binary_to_term`` gives the subterm back), so ``Opaque.raw`` always starts
  with 131 and can be stored again as a value.
* anything else we cannot read — unknown tag, truncated input, trailing bytes,
  lying lengths, nesting deeper than ``_MAX_DEPTH``, bad zlib data — makes the
  *whole* value ``Opaque(data)`` (contract: "foreign ETF MAY be surfaced as
  opaque bytes").  ETF decoding never raises.

Pure: no I/O, no clock, no randomness.
"""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ETF_VERSION",
    "STEP_VALUE_CAP",
    "Atom",
    "EnvelopeError",
    "ImproperList",
    "Opaque",
    "StepValueTooLarge",
    "decode",
    "encode",
    "encode_step_value",
]

STEP_VALUE_CAP = 1024 * 1024  # 1 MiB cap on belay_steps.value (contract §2)
ETF_VERSION = 131  # first byte of every term_to_binary/1 output
_MAX_DEPTH = 256  # deeper ETF nesting surfaces as Opaque instead of recursing on
_MAX_INFLATED = 256 * 1024 * 1024  # compressed terms claiming more are Opaque (zip bombs)


class EnvelopeError(ValueError):
    """A value cannot be encoded, or stored bytes are neither ETF nor valid JSON."""


class StepValueTooLarge(EnvelopeError):
    """An encoded step value exceeds STEP_VALUE_CAP."""

    def __init__(self, size: int, cap: int = STEP_VALUE_CAP) -> None:
        self.size, self.cap = size, cap
        super().__init__(
            f"step value encodes to {size} bytes, over the {cap}-byte cap on "
            f"belay_steps.value (wire contract §2); store a reference to the data "
            f"(e.g. an object-store key or row id) or a smaller value instead"
        )


class Atom(str):
    """An Erlang atom other than true/false/nil."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"Atom({str.__repr__(self)})"


@dataclass(frozen=True)
class Opaque:
    """ETF Python has no meaning for (or could not parse), kept verbatim; raw[0] == 131."""

    raw: bytes


@dataclass(frozen=True)
class ImproperList:
    """An Erlang improper list ``[items... | tail]`` whose tail is not a list."""

    items: tuple[Any, ...]
    tail: Any


# ---------------------------------------------------------------- JSON side


def _not_json(obj: Any) -> Any:
    raise EnvelopeError(
        f"value of type {type(obj).__name__} is not JSON-serializable; envelope "
        f"values must be None, bool, int, finite float, str, list/tuple or "
        f"dict with str keys"
    )


def _check_keys(value: Any) -> None:
    # json.dumps would silently turn {1: x} into {"1": x}; a replayed step would differ.
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise EnvelopeError(
                    f"dict key {key!r} of type {type(key).__name__} is not a str; JSON object keys must be strings"
                )
            _check_keys(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _check_keys(item)


# What json.dumps(value, **these options) builds on every call, built once (encoders keep no state
# between calls): a drain encodes one result per job (issue 17).
_ENCODER = json.JSONEncoder(
    separators=(",", ":"), ensure_ascii=False, allow_nan=False, sort_keys=False, default=_not_json
)


def encode(value: Any) -> bytes:
    """Encode ``value`` as compact UTF-8 JSON (tuples become lists)."""
    try:
        _check_keys(value)
        return _ENCODER.encode(value).encode("utf-8")
    except EnvelopeError:
        raise
    except UnicodeEncodeError as exc:
        raise EnvelopeError(f"value contains a string that is not valid Unicode (lone surrogate?): {exc}") from None
    except (ValueError, TypeError, RecursionError) as exc:  # NaN, cycles, nesting, huge ints
        raise EnvelopeError(f"value is not JSON-encodable: {exc}") from None


def encode_step_value(value: Any) -> bytes:
    """Encode a step value, enforcing the 1 MiB cap on belay_steps.value."""
    data = encode(value)
    if len(data) > STEP_VALUE_CAP:
        raise StepValueTooLarge(len(data))
    return data


def _reject_constant(name: str) -> Any:
    raise EnvelopeError(f"stored JSON contains {name}, which is not valid JSON")


def _finite_float(text: str) -> float:
    number = float(text)
    if number in (float("inf"), float("-inf")):
        raise EnvelopeError(f"stored JSON number {text} overflows a float")
    return number


def decode(data: bytes | bytearray | memoryview | None) -> Any:
    """Decode an envelope: None -> None, byte 131 -> ETF, otherwise UTF-8 JSON."""
    if data is None:
        return None
    data = bytes(data)
    if data[:1] == bytes([ETF_VERSION]):
        return _decode_etf(data)
    try:
        return json.loads(data.decode("utf-8"), parse_constant=_reject_constant, parse_float=_finite_float)
    except EnvelopeError:
        raise
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError
        raise EnvelopeError(
            f"stored value is neither ETF (first byte 131) nor valid UTF-8 JSON ({len(data)} bytes): {exc}"
        ) from None


# ---------------------------------------------------------------- ETF side


class _Malformed(Exception):
    """Internal: the bytes are not a term we can read; the value becomes Opaque."""


_ATOM_TAGS = {
    100: ("latin-1", 2),
    115: ("latin-1", 1),  # ATOM_EXT, SMALL_ATOM_EXT
    118: ("utf-8", 2),
    119: ("utf-8", 1),
}  # ATOM_UTF8_EXT, SMALL_ATOM_UTF8_EXT
_SPECIAL_ATOMS = {"true": True, "false": False, "nil": None}


def _decode_etf(data: bytes) -> Any:
    try:
        reader = _Reader(data, 1)
        if reader.remaining() and data[1] == 80:  # COMPRESSED: u32 size + zlib data
            reader.pos = 2
            reader = _Reader(_inflate(reader.u32(), data[6:]), 0)
        value = reader.term(0)
        if reader.remaining():
            raise _Malformed("trailing bytes after the term")
        return value
    except (_Malformed, RecursionError, zlib.error, ValueError):
        return Opaque(data)


def _inflate(size: int, compressed: bytes) -> bytes:
    if not 0 < size <= _MAX_INFLATED:
        raise _Malformed(f"implausible uncompressed size {size}")
    inflater = zlib.decompressobj()
    body = inflater.decompress(compressed, size)
    if len(body) != size or not inflater.eof or inflater.unused_data:
        raise _Malformed("compressed term does not match its declared size")
    return body


def _hashable(value: Any) -> Any:
    """Freeze a decoded term so it can be a dict key."""
    if isinstance(value, (list, tuple)):
        return tuple(_hashable(item) for item in value)
    if isinstance(value, dict):
        return frozenset((key, _hashable(item)) for key, item in value.items())
    if isinstance(value, ImproperList):
        return ImproperList(_hashable(value.items), _hashable(value.tail))
    return value


class _Reader:
    def __init__(self, buf: bytes, pos: int) -> None:
        self.buf, self.pos = buf, pos

    def remaining(self) -> int:
        return len(self.buf) - self.pos

    def take(self, n: int) -> bytes:
        if n > self.remaining():  # checked before slicing: lying lengths cost nothing
            raise _Malformed(f"declared length {n} exceeds the {self.remaining()} bytes left")
        chunk = self.buf[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def u8(self) -> int:
        return self.take(1)[0]

    def u16(self) -> int:
        return int.from_bytes(self.take(2), "big")

    def u32(self) -> int:
        return int.from_bytes(self.take(4), "big")

    def count(self, n: int, min_bytes_each: int) -> int:
        if n * min_bytes_each > self.remaining():
            raise _Malformed(f"declared {n} elements cannot fit in {self.remaining()} bytes")
        return n

    def atom_name(self, tag: int) -> str:
        encoding, width = _ATOM_TAGS[tag]
        length = self.u8() if width == 1 else self.u16()
        return self.take(length).decode(encoding)  # UnicodeDecodeError -> Opaque

    def node(self) -> None:  # the node atom inside a PID/port/reference
        tag = self.u8()
        if tag not in _ATOM_TAGS:
            raise _Malformed(f"expected a node atom, got tag {tag}")
        self.atom_name(tag)

    def term(self, depth: int) -> Any:
        if depth > _MAX_DEPTH:
            raise _Malformed("term nested too deeply")
        start, tag = self.pos, self.u8()
        if tag == 97:  # SMALL_INTEGER_EXT: u8
            return self.u8()
        if tag == 98:  # INTEGER_EXT: signed 32-bit big-endian
            return int.from_bytes(self.take(4), "big", signed=True)
        if tag == 70:  # NEW_FLOAT_EXT: IEEE 754 double, big-endian
            return struct.unpack(">d", self.take(8))[0]
        if tag == 99:  # FLOAT_EXT: 31-byte NUL-padded "%.20e" string
            return float(self.take(31).rstrip(b"\0").decode("ascii"))
        if tag in (110, 111):  # SMALL_BIG_EXT (u8 n) / LARGE_BIG_EXT (u32 n): sign, n LE digits
            n = self.u8() if tag == 110 else self.u32()
            sign = self.u8()
            if sign not in (0, 1):
                raise _Malformed(f"bignum sign byte {sign}")
            magnitude = int.from_bytes(self.take(n), "little")
            return -magnitude if sign else magnitude
        if tag in _ATOM_TAGS:  # ATOM_EXT, SMALL_ATOM_EXT, ATOM_UTF8_EXT, SMALL_ATOM_UTF8_EXT
            name = self.atom_name(tag)
            return _SPECIAL_ATOMS[name] if name in _SPECIAL_ATOMS else Atom(name)
        if tag in (104, 105):  # SMALL_TUPLE_EXT (u8 arity) / LARGE_TUPLE_EXT (u32 arity)
            arity = self.count(self.u8() if tag == 104 else self.u32(), 1)
            return tuple([self.term(depth + 1) for _ in range(arity)])
        if tag == 106:  # NIL_EXT: []
            return []
        if tag == 107:  # STRING_EXT: u16 length, bytes = a list of small ints
            return list(self.take(self.u16()))
        if tag == 108:  # LIST_EXT: u32 length, elements, tail
            items = [self.term(depth + 1) for _ in range(self.count(self.u32(), 1))]
            tail = self.term(depth + 1)
            if isinstance(tail, list):
                return items + tail
            if isinstance(tail, ImproperList):
                return ImproperList(tuple(items) + tail.items, tail.tail)
            return ImproperList(tuple(items), tail)
        if tag == 109:  # BINARY_EXT: u32 length, bytes
            raw = self.take(self.u32())
            try:
                return raw.decode("utf-8")
            except UnicodeDecodeError:
                return raw
        if tag == 116:  # MAP_EXT: u32 arity, key/value pairs
            arity = self.count(self.u32(), 2)
            result = {}
            for _ in range(arity):
                key = _hashable(self.term(depth + 1))
                result[key] = self.term(depth + 1)
            if len(result) != arity:  # keys that differ in Erlang collided in Python
                return self.opaque(start)
            return result
        self._skip_opaque(tag, depth)
        return self.opaque(start)

    def opaque(self, start: int) -> Opaque:
        # Prefix the version byte so every Opaque.raw is a standalone ETF binary.
        return Opaque(bytes([ETF_VERSION]) + self.buf[start : self.pos])

    def _skip_opaque(self, tag: int, depth: int) -> None:
        """Step over a term Python has no value for; unknown tags are malformed."""
        if tag == 77:  # BIT_BINARY_EXT: u32 length, u8 bits in last byte, bytes
            length = self.u32()
            self.take(1 + length)
        elif tag in (88, 103, 89, 102, 120, 101):
            self.node()
            self.take(
                {
                    88: 12,  # NEW_PID_EXT: id, serial, creation (u32 each)
                    103: 9,  # PID_EXT: id, serial (u32), creation (u8)
                    89: 8,  # NEW_PORT_EXT: id, creation (u32)
                    102: 5,  # PORT_EXT: id (u32), creation (u8)
                    120: 12,  # V4_PORT_EXT: id (u64), creation (u32)
                    101: 5,
                }[tag]
            )  # REFERENCE_EXT: id (u32), creation (u8)
        elif tag in (90, 114):  # NEWER_REFERENCE_EXT / NEW_REFERENCE_EXT: u16 n, node, creation, n ids
            n = self.u16()
            self.node()
            self.take((4 if tag == 90 else 1) + 4 * n)
        elif tag == 113:  # EXPORT_EXT: module atom, function atom, arity
            for _ in range(3):
                self.term(depth + 1)
        elif tag == 112:  # NEW_FUN_EXT: u32 total size (counting itself), then the rest
            size = self.u32()
            if size < 4:
                raise _Malformed(f"NEW_FUN_EXT size {size}")
            self.take(size - 4)
        else:  # LOCAL_EXT, FUN_EXT, ATOM_CACHE_REF, nested COMPRESSED, garbage...
            raise _Malformed(f"unsupported ETF tag {tag}")
