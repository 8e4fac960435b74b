"""Tests for model.envelope — the wire contract §2 value envelope.

ETF inputs come from two real encoders:
* the ``erlpack`` package (``erlpack.pack``), driven directly and by Hypothesis;
* committed fixtures captured from Erlang/OTP 25 ``term_to_binary/1`` (the source
  term is in the comment beside each byte string).  OTP 26+ writes atoms as
  SMALL_ATOM_UTF8_EXT (119) by default; the fixtures marked ``minor_version 2``
  reproduce that form.
"""

from __future__ import annotations

import json
import math
import time
import zlib

import erlpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from model.envelope import (
    STEP_VALUE_CAP,
    Atom,
    EnvelopeError,
    ImproperList,
    Opaque,
    StepValueTooLarge,
    decode,
    encode,
    encode_step_value,
)


def etf(*octets: int) -> bytes:
    return bytes(octets)


def assert_identical(actual, expected) -> None:
    """Equality that also checks types (so True != 1, 1 != 1.0, Atom != str, -0.0 != 0.0)."""
    assert type(actual) is type(expected), (actual, expected)
    if isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected), (actual, expected)
        for a, e in zip(actual, expected, strict=True):
            assert_identical(a, e)
    elif isinstance(expected, dict):
        assert actual.keys() == expected.keys(), (actual, expected)
        actual_keys = {k: k for k in actual}
        for key, value in expected.items():
            assert_identical(actual_keys[key], key)
            assert_identical(actual[key], value)
    elif isinstance(expected, float):
        assert actual == expected and math.copysign(1, actual) == math.copysign(1, expected)
    else:
        assert actual == expected


# ------------------------------------------------------------------ JSON


def test_json_round_trips_nested_values():
    value = {"b": [1, -2, 2.5, None, True, False, "é日本"], "a": {"x": {}, "y": []}}
    assert_identical(decode(encode(value)), value)


def test_encode_writes_compact_utf8_json_in_insertion_order():
    assert encode({"b": 1, "a": ["é", 2.0]}) == '{"b":1,"a":["é",2.0]}'.encode()


def test_encode_writes_tuples_as_lists():
    assert decode(encode({"t": (1, 2)})) == {"t": [1, 2]}


@pytest.mark.parametrize(
    "bad, type_name",
    [
        ({1, 2}, "set"),
        (b"raw", "bytes"),
        (object(), "object"),
        (1j, "complex"),
        ({"nested": [frozenset()]}, "frozenset"),
    ],
)
def test_encode_rejects_non_json_values_naming_the_offending_type(bad, type_name):
    with pytest.raises(EnvelopeError, match=type_name):
        encode(bad)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -math.inf, [1, {"x": math.nan}]])
def test_encode_rejects_nan_and_infinity(bad):
    with pytest.raises(EnvelopeError, match="not JSON-encodable"):
        encode(bad)


@pytest.mark.parametrize("bad", [{1: "a"}, {"ok": {None: 1}}, [{(1, 2): 3}], {True: 1}])
def test_encode_rejects_non_string_dict_keys_instead_of_silently_stringifying(bad):
    with pytest.raises(EnvelopeError, match="not a str"):
        encode(bad)


def test_encode_rejects_circular_and_absurdly_deep_values_and_lone_surrogates():
    cyclic: list = []
    cyclic.append(cyclic)
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    for bad in (cyclic, deep, "\ud800"):
        with pytest.raises(EnvelopeError):
            encode(bad)


def test_envelope_errors_are_value_errors():
    assert issubclass(EnvelopeError, ValueError)
    assert issubclass(StepValueTooLarge, EnvelopeError)


def test_decode_of_none_is_none():
    assert decode(None) is None


def test_decode_accepts_memoryview_and_bytearray():
    assert decode(memoryview(b'{"a":1}')) == {"a": 1}
    assert decode(bytearray(b"[1]")) == [1]
    assert decode(memoryview(etf(131, 97, 7))) == 7


@pytest.mark.parametrize("bad", [b"", b"{", b"\xff\xfe", b"hello", b'{"a":1} x', b"\xef\xbb\xbf1"])
def test_decode_rejects_bytes_that_are_neither_etf_nor_json(bad):
    with pytest.raises(EnvelopeError, match="neither ETF"):
        decode(bad)


@pytest.mark.parametrize("bad", [b"NaN", b"[Infinity]", b'{"x":-Infinity}', b"1e400"])
def test_decode_rejects_non_finite_numbers_in_stored_json(bad):
    with pytest.raises(EnvelopeError):
        decode(bad)


# ------------------------------------------------------------------ step value cap


def test_step_value_cap_is_one_mebibyte():
    assert STEP_VALUE_CAP == 1024 * 1024


def test_step_value_of_exactly_one_mebibyte_is_accepted():
    value = "a" * (STEP_VALUE_CAP - 2)  # plus two quote characters
    data = encode_step_value(value)
    assert len(data) == STEP_VALUE_CAP
    assert decode(data) == value


def test_step_value_one_byte_over_the_cap_is_rejected_naming_its_size():
    value = "a" * (STEP_VALUE_CAP - 1)
    with pytest.raises(StepValueTooLarge) as info:
        encode_step_value(value)
    message = str(info.value)
    assert str(STEP_VALUE_CAP + 1) in message and str(STEP_VALUE_CAP) in message
    assert "reference" in message
    assert info.value.size == STEP_VALUE_CAP + 1 and info.value.cap == STEP_VALUE_CAP


def test_cap_counts_utf8_bytes_not_characters():
    value = "é" * (STEP_VALUE_CAP // 2)  # 2 bytes each: just over the cap
    with pytest.raises(StepValueTooLarge):
        encode_step_value(value)


def test_job_results_are_not_size_capped():
    assert len(encode("a" * (2 * STEP_VALUE_CAP))) > STEP_VALUE_CAP


# ------------------------------------------------------------------ ETF from erlpack


# erlpack's own bytes were inspected before writing these: ints 0..255 are
# SMALL_INTEGER_EXT, other 32-bit ints INTEGER_EXT, beyond that SMALL_BIG_EXT
# (it overflows past -2**63..2**64-1); floats NEW_FLOAT_EXT; str and bytes are
# BINARY_EXT; True/False/None are the atoms true/false/nil (SMALL_ATOM_EXT).
@pytest.mark.parametrize(
    "value, expected",
    [
        (0, 0),
        (255, 255),
        (256, 256),
        (-1, -1),
        (2**31 - 1, 2**31 - 1),
        (-(2**31), -(2**31)),
        (2**31, 2**31),
        (-(2**31) - 1, -(2**31) - 1),
        (2**64 - 1, 2**64 - 1),
        (-(2**63), -(2**63)),
        (1.5, 1.5),
        (-0.0, -0.0),
        (1e300, 1e300),
        ("hi", "hi"),
        ("", ""),
        ("héllo 日本", "héllo 日本"),
        (b"raw", "raw"),  # a binary that is valid UTF-8 decodes as str
        (b"\xff\x00", b"\xff\x00"),  # invalid UTF-8 stays bytes
        (erlpack.Atom("ok"), Atom("ok")),
        (erlpack.Atom("undefined"), Atom("undefined")),
        (True, True),
        (False, False),
        (None, None),
        ([], []),
        ((), ()),
        ({}, {}),
        ([1, [2, [3]]], [1, [2, [3]]]),
        ({"a": [1, {"b": (2, "c")}], "z": None}, {"a": [1, {"b": (2, "c")}], "z": None}),
        ({1: 2, (1, 2): [3]}, {1: 2, (1, 2): [3]}),  # non-binary keys survive; tuple keys stay tuples
    ],
)
def test_decodes_terms_written_by_erlpack(value, expected):
    data = erlpack.pack(value)
    assert data[0] == 131
    assert_identical(decode(data), expected)


def test_erlpack_writes_none_as_the_atom_nil_which_decodes_to_none():
    assert erlpack.pack(None) == etf(131, 115, 3, 110, 105, 108)
    assert decode(erlpack.pack(None)) is None


def test_atom_is_a_str_with_a_telling_repr():
    atom = decode(erlpack.pack(erlpack.Atom("ok")))
    assert isinstance(atom, str) and atom == "ok" and repr(atom) == "Atom('ok')"


# ------------------------------------------------------------------ ETF from Erlang/OTP 25

PID_BYTES = etf(  # c:pid(0,80,0) on a non-distributed node: NEW_PID_EXT (88)
    88, 100, 0, 13, *b"nonode@nohost", 0, 0, 0, 80, 0, 0, 0, 0, 0, 0, 0, 0
)

ERLANG_FIXTURES = [
    # term_to_binary(#{a => 1})
    (etf(131, 116, 0, 0, 0, 1, 100, 0, 1, 97, 97, 1), {Atom("a"): 1}),
    # term_to_binary([1,2,3]) -- STRING_EXT: a list of small ints stays a list of ints
    (etf(131, 107, 0, 3, 1, 2, 3), [1, 2, 3]),
    # term_to_binary([1, 300]) -- LIST_EXT of SMALL_INTEGER_EXT and INTEGER_EXT
    (etf(131, 108, 0, 0, 0, 2, 97, 1, 98, 0, 0, 1, 44, 106), [1, 300]),
    # term_to_binary(<<"hi">>)
    (etf(131, 109, 0, 0, 0, 2, 104, 105), "hi"),
    # term_to_binary(<<"héllo"/utf8>>) -- an Elixir string
    (etf(131, 109, 0, 0, 0, 6, 104, 195, 169, 108, 108, 111), "héllo"),
    # term_to_binary(<<255, 0>>) -- not UTF-8, stays bytes
    (etf(131, 109, 0, 0, 0, 2, 255, 0), b"\xff\x00"),
    # term_to_binary(<<>>)
    (etf(131, 109, 0, 0, 0, 0), ""),
    # term_to_binary({ok, 1}) -- ATOM_EXT (100)
    (etf(131, 104, 2, 100, 0, 2, 111, 107, 97, 1), (Atom("ok"), 1)),
    # term_to_binary({ok, 1}, [{minor_version, 2}]) -- SMALL_ATOM_UTF8_EXT (119), OTP 26+ default
    (etf(131, 104, 2, 119, 2, 111, 107, 97, 1), (Atom("ok"), 1)),
    # term_to_binary('café') -- ATOM_EXT is Latin-1
    (etf(131, 100, 0, 4, 99, 97, 102, 233), Atom("café")),
    # term_to_binary('日本') -- SMALL_ATOM_UTF8_EXT
    (etf(131, 119, 6, 230, 151, 165, 230, 156, 172), Atom("日本")),
    # term_to_binary([true, false, nil, undefined])
    (
        etf(
            131,
            108,
            0,
            0,
            0,
            4,
            100,
            0,
            4,
            116,
            114,
            117,
            101,
            100,
            0,
            5,
            102,
            97,
            108,
            115,
            101,
            100,
            0,
            3,
            110,
            105,
            108,
            100,
            0,
            9,
            117,
            110,
            100,
            101,
            102,
            105,
            110,
            101,
            100,
            106,
        ),
        [True, False, None, Atom("undefined")],
    ),
    # term_to_binary([])
    (etf(131, 106), []),
    # term_to_binary(#{})
    (etf(131, 116, 0, 0, 0, 0), {}),
    # term_to_binary(100000) -- INTEGER_EXT
    (etf(131, 98, 0, 1, 134, 160), 100000),
    # term_to_binary(-5) -- INTEGER_EXT
    (etf(131, 98, 255, 255, 255, 251), -5),
    # term_to_binary(1 bsl 70) -- SMALL_BIG_EXT
    (etf(131, 110, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 64), 2**70),
    # term_to_binary(-(1 bsl 70)) -- SMALL_BIG_EXT, sign byte 1
    (etf(131, 110, 9, 1, 0, 0, 0, 0, 0, 0, 0, 0, 64), -(2**70)),
    # term_to_binary(1 bsl 2048) -- LARGE_BIG_EXT, 257 digit bytes (264 bytes in all)
    (etf(131, 111, 0, 0, 1, 1, 0, *([0] * 256), 1), 2**2048),
    # term_to_binary(1.5) -- NEW_FLOAT_EXT
    (etf(131, 70, 63, 248, 0, 0, 0, 0, 0, 0), 1.5),
    # term_to_binary(-0.1) -- NEW_FLOAT_EXT
    (etf(131, 70, 191, 185, 153, 153, 153, 153, 153, 154), -0.1),
    # term_to_binary(1.5, [{minor_version, 0}]) -- FLOAT_EXT, "1.50000000000000000000e+00" + NULs
    (etf(131, 99, *b"1.50000000000000000000e+00", 0, 0, 0, 0, 0), 1.5),
    # term_to_binary([1|2]) -- improper list
    (etf(131, 108, 0, 0, 0, 1, 97, 1, 97, 2), ImproperList((1,), 2)),
    # term_to_binary([a, b | c])
    (
        etf(131, 108, 0, 0, 0, 2, 100, 0, 1, 97, 100, 0, 1, 98, 100, 0, 1, 99),
        ImproperList((Atom("a"), Atom("b")), Atom("c")),
    ),
    # term_to_binary(#{<<"a">> => [1, {x, 2.5}], <<"b">> => nil}) -- a typical Elixir map
    (
        etf(
            131,
            116,
            0,
            0,
            0,
            2,
            109,
            0,
            0,
            0,
            1,
            97,
            108,
            0,
            0,
            0,
            2,
            97,
            1,
            104,
            2,
            100,
            0,
            1,
            120,
            70,
            64,
            4,
            0,
            0,
            0,
            0,
            0,
            0,
            106,
            109,
            0,
            0,
            0,
            1,
            98,
            100,
            0,
            3,
            110,
            105,
            108,
        ),
        {"a": [1, (Atom("x"), 2.5)], "b": None},
    ),
    # term_to_binary(#{[1] => 2}) -- unhashable list key frozen to a tuple
    (etf(131, 116, 0, 0, 0, 1, 107, 0, 1, 1, 97, 2), {(1,): 2}),
    # term_to_binary(#{#{a => 1} => b}) -- map key frozen to a frozenset of pairs
    (
        etf(131, 116, 0, 0, 0, 1, 116, 0, 0, 0, 1, 100, 0, 1, 97, 97, 1, 100, 0, 1, 98),
        {frozenset({(Atom("a"), 1)}): Atom("b")},
    ),
    # term_to_binary(lists:duplicate(20, hello), [compressed]) -- COMPRESSED (80)
    (
        etf(
            131,
            80,
            0,
            0,
            0,
            166,
            120,
            156,
            203,
            97,
            96,
            96,
            16,
            73,
            97,
            96,
            205,
            72,
            205,
            201,
            201,
            31,
            172,
            116,
            22,
            0,
            8,
            136,
            50,
            175,
        ),
        [Atom("hello")] * 20,
    ),
    # term_to_binary(binary:copy(<<"ab">>, 50), [compressed])
    (etf(131, 80, 0, 0, 0, 105, 120, 156, 203, 101, 96, 96, 72, 73, 76, 162, 61, 4, 0, 216, 57, 38, 232), "ab" * 50),
    # term_to_binary(c:pid(0,80,0)) -- NEW_PID_EXT at top level: the whole value is opaque
    (etf(131, *PID_BYTES), Opaque(etf(131, *PID_BYTES))),
    # term_to_binary({ok, c:pid(0,80,0)}) -- only the PID is opaque
    (etf(131, 104, 2, 100, 0, 2, 111, 107, *PID_BYTES), (Atom("ok"), Opaque(etf(131, *PID_BYTES)))),
]


@pytest.mark.parametrize("data, expected", ERLANG_FIXTURES)
def test_decodes_real_erlang_term_to_binary_output(data, expected):
    assert_identical(decode(data), expected)


def test_large_tuple_ext_decodes_to_a_tuple():
    # term_to_binary(erlang:make_tuple(300, 0)) starts <<131,105,0,0,1,44,97,0, ...>>
    data = etf(131, 105, 0, 0, 1, 44) + etf(97, 0) * 300
    assert_identical(decode(data), (0,) * 300)


def test_compressed_term_built_with_zlib_per_the_spec_decodes():
    inner = erlpack.pack({"k": ["v"] * 50})[1:]  # the term without its version byte
    data = etf(131, 80) + len(inner).to_bytes(4, "big") + zlib.compress(inner)
    assert decode(data) == {"k": ["v"] * 50}


# Fixtures of terms Python has no meaning for, each nested so that the term after
# it proves the opaque extent was computed exactly.
@pytest.mark.parametrize(
    "data, opaque_sub, after",
    [
        # term_to_binary({ref, make_ref()}) -- NEWER_REFERENCE_EXT (90)
        (
            etf(
                131,
                104,
                2,
                100,
                0,
                3,
                114,
                101,
                102,
                90,
                0,
                3,
                100,
                0,
                13,
                *b"nonode@nohost",
                0,
                0,
                0,
                0,
                0,
                0,
                56,
                192,
                47,
                244,
                0,
                1,
                195,
                214,
                57,
                92,
            ),
            etf(90, 0, 3, 100, 0, 13, *b"nonode@nohost", 0, 0, 0, 0, 0, 0, 56, 192, 47, 244, 0, 1, 195, 214, 57, 92),
            None,
        ),
        # term_to_binary({<<1,2,3:4>>, x}) -- BIT_BINARY_EXT (77)
        (etf(131, 104, 2, 77, 0, 0, 0, 3, 4, 1, 2, 48, 100, 0, 1, 120), etf(77, 0, 0, 0, 3, 4, 1, 2, 48), Atom("x")),
        # term_to_binary({fun lists:map/2, 1}) -- EXPORT_EXT (113)
        (
            etf(131, 104, 2, 113, 100, 0, 5, *b"lists", 100, 0, 3, *b"map", 97, 2, 97, 1),
            etf(113, 100, 0, 5, *b"lists", 100, 0, 3, *b"map", 97, 2),
            1,
        ),
        # term_to_binary({ok, <<5:3>>}) -- BIT_BINARY_EXT second
        (etf(131, 104, 2, 100, 0, 2, 111, 107, 77, 0, 0, 0, 1, 3, 160), etf(77, 0, 0, 0, 1, 3, 160), None),
    ],
)
def test_terms_without_python_meaning_become_opaque_with_exact_extent(data, opaque_sub, after):
    value = decode(data)
    assert isinstance(value, tuple) and len(value) == 2
    opaque = next(v for v in value if isinstance(v, Opaque))
    assert opaque == Opaque(etf(131) + opaque_sub)
    if after is not None:
        assert_identical(value[1], after)


def test_port_inside_a_list_is_opaque():
    # term_to_binary([hd(erlang:ports())]) -- NEW_PORT_EXT (89)
    port = etf(89, 100, 0, 13, *b"nonode@nohost", 0, 0, 0, 0, 0, 0, 0, 0)
    assert decode(etf(131, 108, 0, 0, 0, 1, *port, 106)) == [Opaque(etf(131, *port))]


def test_fun_inside_a_tuple_is_opaque_and_the_next_element_still_decodes():
    # term_to_binary({ok, fun() -> X end, done}) in a compiled module (X = 7 is constant-folded,
    # so NumFree = 0) -- NEW_FUN_EXT (112), whose Size field (71) counts itself
    fun = etf(
        112,
        0,
        0,
        0,
        71,
        0,
        173,
        175,
        94,
        101,
        9,
        23,
        22,
        21,
        236,
        198,
        14,
        28,
        228,
        114,
        235,
        128,
        0,
        0,
        0,
        1,
        0,
        0,
        0,
        0,
        100,
        0,
        3,
        102,
        120,
        50,
        97,
        1,
        98,
        5,
        109,
        122,
        243,
        88,
        100,
        0,
        13,
        *b"nonode@nohost",
        0,
        0,
        0,
        9,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
    )
    data = etf(131, 104, 3, 100, 0, 2, 111, 107, *fun, 100, 0, 4, *b"done")
    assert decode(data) == (Atom("ok"), Opaque(etf(131, *fun)), Atom("done"))


def test_opaque_raw_is_a_standalone_etf_binary_for_nested_terms():
    (_, opaque) = decode(etf(131, 104, 2, 100, 0, 2, 111, 107, *PID_BYTES))
    assert opaque.raw[0] == 131 and decode(opaque.raw) == opaque


@pytest.mark.parametrize(
    "data",
    [
        # term_to_binary(#{a => 1, <<"a">> => 2}) -- Atom('a') == 'a' in Python
        etf(131, 116, 0, 0, 0, 2, 100, 0, 1, 97, 97, 1, 109, 0, 0, 0, 1, 97, 97, 2),
        # term_to_binary(#{1 => a, 1.0 => b}) -- 1 == 1.0 in Python
        etf(131, 116, 0, 0, 0, 2, 97, 1, 100, 0, 1, 97, 70, 63, 240, 0, 0, 0, 0, 0, 0, 100, 0, 1, 98),
    ],
)
def test_maps_whose_keys_collide_in_python_become_opaque_instead_of_losing_entries(data):
    assert decode(data) == Opaque(data)


# ------------------------------------------------------------------ malformed ETF -> Opaque


@pytest.mark.parametrize(
    "data",
    [
        etf(131),  # version byte only
        etf(131, 121, 0),  # LOCAL_EXT (OTP 26): extent not computable
        etf(131, 1, 2, 3),  # no such tag
        etf(131, 108, 0, 0, 0, 1, 250, 106),  # unknown tag nested in a list
        etf(131, 97, 1, 97, 2),  # trailing bytes after a complete term
        etf(131, 110, 1, 2, 5),  # bignum sign byte 2
        etf(131, 119, 2, 0xC3, 0x28),  # SMALL_ATOM_UTF8_EXT with invalid UTF-8
        etf(131, 99, *b"not a float".ljust(31, b"\0")),  # FLOAT_EXT that is not a number
        etf(131, 88, 97, 1, *([0] * 12)),  # PID whose node is not an atom
        etf(131, 104, 1, 80, 0, 0, 0, 1, 120, 156),  # COMPRESSED nested inside a term
    ],
)
def test_unreadable_etf_surfaces_as_opaque_of_the_whole_input(data):
    assert decode(data) == Opaque(data)


@pytest.mark.parametrize("data, _source", ERLANG_FIXTURES[:-2])
def test_every_truncation_of_a_real_term_is_opaque(data, _source):
    for cut in range(1, len(data)):
        assert decode(data[:cut]) == Opaque(data[:cut]), cut


@pytest.mark.parametrize(
    "data",
    [
        etf(131, 109, 255, 255, 255, 255, 1, 2),  # BINARY_EXT of 4 GiB
        etf(131, 108, 255, 255, 255, 255, 97, 1),  # LIST_EXT of 2**32-1 elements
        etf(131, 116, 255, 255, 255, 255, 97, 1),  # MAP_EXT of 2**32-1 pairs
        etf(131, 105, 255, 255, 255, 255, 106),  # LARGE_TUPLE_EXT of 2**32-1 elements
        etf(131, 111, 255, 255, 255, 255, 0, 1),  # LARGE_BIG_EXT of 4 GiB of digits
        etf(131, 77, 255, 255, 255, 255, 8, 0),  # BIT_BINARY_EXT of 4 GiB
        etf(131, 112, 255, 255, 255, 255, 0),  # NEW_FUN_EXT of 4 GiB
        etf(131, 90, 255, 255, 100, 0, 1, 110, 0, 0, 0, 0),  # NEWER_REFERENCE_EXT of 65535 ids
        etf(131, 80, 255, 255, 255, 255, 120, 156, 3, 0),  # COMPRESSED claiming 4 GiB
    ],
)
def test_huge_declared_lengths_become_opaque_quickly(data):
    started = time.perf_counter()
    assert decode(data) == Opaque(data)
    assert time.perf_counter() - started < 0.5


@pytest.mark.parametrize(
    "data",
    [
        etf(131, 80, 0, 0, 0, 5) + b"not zlib at all",  # corrupt zlib stream
        etf(131, 80, 0, 0, 0, 9) + zlib.compress(etf(97, 1)),  # declared size too big
        etf(131, 80, 0, 0, 0, 1) + zlib.compress(etf(98, 0, 0, 1, 0)),  # declared size too small
        etf(131, 80, 0, 0, 0, 2) + zlib.compress(etf(97, 1)) + b"junk",  # bytes after the stream
        etf(131, 80, 0, 0, 0, 0),  # zero size
        etf(131, 80) + (5).to_bytes(4, "big") + zlib.compress(etf(97, 1, 97, 2, 3)),  # trailing term bytes
    ],
)
def test_bad_compressed_terms_become_opaque(data):
    assert decode(data) == Opaque(data)


def test_zip_bomb_beyond_the_inflate_limit_becomes_opaque_without_inflating():
    claimed = 300 * 1024 * 1024
    data = etf(131, 80) + claimed.to_bytes(4, "big") + zlib.compress(b"\0" * 1024)
    assert decode(data) == Opaque(data)


def test_deeply_nested_etf_becomes_opaque_instead_of_crashing():
    depth = 100_000
    data = etf(131) + etf(108, 0, 0, 0, 1) * depth + etf(106) * (depth + 1)
    assert decode(data) == Opaque(data)


def test_moderately_nested_etf_still_decodes():
    depth = 100
    data = etf(131) + etf(108, 0, 0, 0, 1) * depth + etf(106) * (depth + 1)
    value = decode(data)
    for _ in range(depth):
        assert isinstance(value, list) and len(value) == 1
        value = value[0]
    assert value == []


# ------------------------------------------------------------------ properties

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(blacklist_categories=("Cs",))),
    lambda children: (
        st.lists(children, max_size=5)
        | st.dictionaries(st.text(st.characters(blacklist_categories=("Cs",))), children, max_size=5)
    ),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_json_values_round_trip_through_the_envelope(value):
    data = encode(value)
    assert data[:1] != b"\x83"
    assert json.loads(data) == value
    assert_identical(decode(data), value)


erlpack_text = st.text(st.characters(blacklist_categories=("Cs",)))
erlpack_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | erlpack_text,
    lambda children: (
        st.lists(children, max_size=5)
        | st.dictionaries(erlpack_text, children, max_size=5)
        | st.lists(children, max_size=5).map(tuple)
    ),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(erlpack_values)
def test_values_packed_by_erlpack_decode_to_the_same_python_value(value):
    # erlpack writes str as BINARY_EXT, which decodes back to str; True/False/None
    # as the atoms true/false/nil; lists as LIST_EXT or NIL_EXT; tuples as tuples.
    assert_identical(decode(erlpack.pack(value)), value)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_arbitrary_etf_bytes_never_raise(tail):
    decode(b"\x83" + tail)  # any value or Opaque; an exception fails the test
