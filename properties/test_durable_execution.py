"""Durable execution on the real runtime agrees with the model (model/durable.py) under real faults.

Hypothesis draws job programs — steps returning any JSON (falsy values, ETF-shaped values, values at and
just over the §2 1 MiB step cap), raises, snoozes, durable sleeps, awaits of signals sent before or after
the park, spawns and awaits of children, events, slow steps longer than the lease ttl — and a fault
schedule (a crash after a step or in the middle of one, a node frozen past its lease and resumed, a
database restart while parked, a cancel request before a step). Each program runs on a real fleet
(properties/durable/harness.py: two worker node processes, an in-process sweeper whose clock runs 0.4 s
ahead, an embedded PostgreSQL) with the faults injected for real; the final row, the journal, how often
each step function ran (counted outside the job), the events and the stale acks must equal the model's
prediction. Contract: §§6–9 (leases, acks, steps, signals, children, cancel) and the operations guide.

Profiles: the default (CI) runs the explicit programs below and BELAY_DURABLE_EXAMPLES generated ones
(default 2, derandomized: about a minute with the fleet start); BELAY_DURABLE_LONG=1 runs 200 random programs (BELAY_DURABLE_EXAMPLES
overrides; BELAY_DURABLE_EXPLICIT=0 skips the explicit ones). A failure prints the shrunk program: save
its JSON and replay it with `python -m properties.durable.replay program.json` (model and fleet).
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, Phase, example, given, note, settings
from hypothesis import strategies as st

from model.durable import predict
from model.envelope import STEP_VALUE_CAP
from properties.durable.harness import Fleet

LONG = os.environ.get("BELAY_DURABLE_LONG") == "1"
EXPLICIT_PHASE = os.environ.get("BELAY_DURABLE_EXPLICIT", "1") == "1"  # 0: generated programs only
EXAMPLES = int(os.environ.get("BELAY_DURABLE_EXAMPLES", "200" if LONG else "2"))
TTL, SKEW = 1.5, 0.4

# --- values ------------------------------------------------------------------------------------------

FALSY = st.sampled_from([0, "", [], False, None, {}, 0.0])
_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12)
# Floats that survive jsonb unchanged (the program travels as the job's jsonb input): no exponent form.
_FLOATS = st.floats(allow_nan=False, allow_infinity=False, width=32).filter(lambda f: "e" not in repr(f))
_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1), _FLOATS, _TEXT)
JSON = st.recursive(
    _SCALARS, lambda kids: st.one_of(st.lists(kids, max_size=4), st.dictionaries(_TEXT, kids, max_size=4)), max_leaves=8
)
# Shapes an Erlang term decodes to (model/envelope.py): small-int lists (STRING_EXT), atom names, nil.
ETF_SHAPED = st.one_of(
    st.lists(st.integers(0, 255), min_size=1, max_size=6),
    st.sampled_from(["nil", "undefined", "ok", "true", [131, 104, 2], {"__struct__": "Elixir.X"}]),
)
# A JSON string of n characters encodes to n + 2 bytes: these sit at the cap and one byte over it.
NEAR_CAP = st.sampled_from([STEP_VALUE_CAP - 2, STEP_VALUE_CAP - 1]).map(lambda n: "v" * n)
VALUES = st.one_of(FALSY, FALSY, JSON, ETF_SHAPED)


@st.composite
def programs(draw: st.DrawFn) -> dict:
    n = draw(st.integers(2, 7))
    ops: list[dict] = []
    spawned = False
    for i in range(n):
        kind = draw(st.sampled_from(["step", "step", "step", "raise", "snooze", "sleep", "await", "spawn", "emit"]))
        if kind == "step":
            value = draw(st.one_of(VALUES, NEAR_CAP) if draw(st.integers(0, 24)) == 0 else VALUES)
            op = {
                "op": "step",
                "name": f"s{i}",
                "value": value,
                "cost": draw(st.sampled_from([[0, 0], [0, 0], [5, 1]])),
            }
            if draw(st.integers(0, 15)) == 0:
                op["slow_ms"] = int((TTL + 0.2) * 1000)  # a step longer than the lease ttl: renewal must hold it
            ops.append(op)
        elif kind in ("raise", "snooze"):
            op = {"op": kind, "on": draw(st.lists(st.integers(1, 4), min_size=1, max_size=2, unique=True))}
            if kind == "snooze":
                op["ms"] = draw(st.sampled_from([10, 50]))
            ops.append(op)
        elif kind == "sleep":
            ops.append({"op": "sleep", "name": f"n{i}", "ms": draw(st.sampled_from([50, 200]))})
        elif kind == "await":
            ops.append(
                {
                    "op": "await",
                    "name": f"g{i}",
                    "payload": draw(VALUES),
                    "when": draw(st.sampled_from(["before", "after"])),
                    "db_restart": draw(st.integers(0, 9)) == 0,
                }
            )
        elif kind == "spawn" and not spawned:
            spawned = True
            ops.append({"op": "spawn", "name": f"k{i}", "values": draw(st.lists(VALUES, min_size=1, max_size=3))})
            ops.append({"op": "await_children"})
        else:
            ops.append({"op": "emit", "payload": draw(VALUES)})
    steps = [i for i, op in enumerate(ops) if op["op"] == "step"]
    faults: list[dict] = []
    if steps:
        for _ in range(draw(st.sampled_from([1, 1, 2, 0]))):
            f = draw(st.sampled_from(["crash_after", "crash_mid", "freeze", "cancel"]))
            if f == "freeze" and any(x["f"] == "freeze" for x in faults):
                continue
            faults.append({"f": f, "at": draw(st.sampled_from(steps)), "attempt": draw(st.sampled_from([1, 1, 2, 3]))})
    budget = draw(st.sampled_from([None, None, None, 7]))
    return {
        "uid": draw(st.uuids()).hex,
        "max_attempts": draw(st.integers(1, 4)),
        "budget_usd": budget,
        "ops": ops,
        "faults": faults,
    }


# Programs every run covers (explicit examples), each aimed at a way the SDK or runtime can go wrong.
EXPLICIT = [
    # Falsy step values replayed after a durable sleep: each step function must still run exactly once.
    {
        "uid": "falsy-replay",
        "max_attempts": 2,
        "budget_usd": None,
        "faults": [],
        "ops": [
            {"op": "step", "name": "s0", "value": 0},
            {"op": "step", "name": "s1", "value": ""},
            {"op": "step", "name": "s2", "value": []},
            {"op": "step", "name": "s3", "value": False},
            {"op": "step", "name": "s4", "value": None},
            {"op": "step", "name": "s5", "value": {}},
            {"op": "sleep", "name": "n", "ms": 50},
            {"op": "emit", "payload": "after the sleep"},
        ],
    },
    # A node frozen in step 1 past its lease: the zombie must stop at step 2's boundary (and never ack).
    {
        "uid": "frozen-zombie",
        "max_attempts": 3,
        "budget_usd": None,
        "faults": [{"f": "freeze", "at": 1, "attempt": 1}],
        "ops": [
            {"op": "step", "name": "s0", "value": 0},
            {"op": "step", "name": "s1", "value": {"k": [1, 2]}},
            {"op": "emit", "payload": None},
            {"op": "step", "name": "s2", "value": "after"},
        ],
    },
    # Crashes in the middle of a step and right after one; the step values are falsy.
    {
        "uid": "crashes",
        "max_attempts": 4,
        "budget_usd": None,
        "faults": [{"f": "crash_mid", "at": 1, "attempt": 1}, {"f": "crash_after", "at": 0, "attempt": 2}],
        "ops": [
            {"op": "step", "name": "s0", "value": ""},
            {"op": "step", "name": "s1", "value": [131, 104, 2]},
            {"op": "step", "name": "s2", "value": False},
        ],
    },
    # A step longer than the lease ttl, beside a sweeper whose clock runs ahead; a signal after the park
    # across a database restart; children; a cancel request before the last step.
    {
        "uid": "slow-signal-children-cancel",
        "max_attempts": 3,
        "budget_usd": None,
        "faults": [{"f": "cancel", "at": 5, "attempt": 3}],
        "ops": [
            {"op": "step", "name": "s0", "value": None, "slow_ms": int((TTL + 0.2) * 1000)},
            {"op": "await", "name": "g1", "payload": 0, "when": "after", "db_restart": True},
            {"op": "await", "name": "g2", "payload": [], "when": "before", "db_restart": False},
            {"op": "spawn", "name": "k", "values": [0, "", {"a": None}]},
            {"op": "await_children"},
            {"op": "step", "name": "s5", "value": 1},
        ],
    },
    # Values at the 1 MiB step cap and one byte over it (that step fails every attempt).
    {
        "uid": "near-cap",
        "max_attempts": 2,
        "budget_usd": 7,
        "faults": [],
        "ops": [
            {"op": "step", "name": "s0", "value": "v" * (STEP_VALUE_CAP - 2), "cost": [5, 1]},
            {"op": "snooze", "on": [1], "ms": 10},
            {"op": "step", "name": "s1", "value": "v" * (STEP_VALUE_CAP - 1)},
        ],
    },
]

# --- the property ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    f = Fleet(tmp_path_factory.mktemp("durable"), ttl=TTL, skew=SKEW)
    try:
        yield f.start()
    finally:
        f.stop()


COMPARED = ("state", "attempt", "max_attempts", "result", "errors", "journal", "runs", "events", "stale_acks")


def check_program(fleet: Fleet, program: dict) -> tuple:
    """Run one program on the fleet and compare every observable with the model's prediction."""
    expected = predict(program, ttl=timedelta(seconds=TTL))
    observed = fleet.run(program, expected_stale=expected.stale_acks)
    diffs = {
        k: (getattr(expected, k), getattr(observed, k))
        for k in COMPARED
        if getattr(expected, k) != getattr(observed, k)
    }
    assert not diffs, (
        "the runtime disagrees with the model of durable execution:\n"
        + "\n".join(f"  {k}: model {e!r:.300} != runtime {o!r:.300}" for k, (e, o) in diffs.items())
        + f"\nprogram (replay: model.durable.predict / Fleet.run): {json.dumps(program)[:4000]}"
    )
    return expected, observed


def test_programs_under_real_faults_do_what_the_model_of_durable_execution_predicts(fleet, capsys):
    stats: Counter = Counter()
    started = time.perf_counter()

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=not LONG,
        database=None,
        print_blob=True,
        phases=(Phase.explicit,) * EXPLICIT_PHASE + (Phase.generate, Phase.shrink),
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
    )
    @given(programs())
    @example(EXPLICIT[0])
    @example(EXPLICIT[1])
    @example(EXPLICIT[2])
    @example(EXPLICIT[3])
    @example(EXPLICIT[4])
    def run(program: dict) -> None:
        note(f"program: {json.dumps(program)[:4000]}")
        _expected, observed = check_program(fleet, program)
        stats["programs"] += 1
        stats["steps run"] += sum(observed.runs.values())
        stats["duplicate step runs"] += sum(n - 1 for n in observed.runs.values() if n > 1)
        stats["stale acks"] += observed.stale_acks
        for k in ("crashes", "freezes", "cancels", "db_restarts"):
            stats[k] += getattr(observed, k)
        stats["faults"] += observed.crashes + observed.freezes + observed.cancels + observed.db_restarts

    run()
    elapsed = time.perf_counter() - started
    with capsys.disabled():
        print(
            f"\ndurable execution [{'long' if LONG else 'ci'}]: {stats['programs']} programs in {elapsed:.1f}s "
            f"({stats['programs'] / elapsed:.2f} programs/s); faults injected {stats['faults']} "
            f"({stats['faults'] / max(stats['programs'], 1):.2f}/program: crashes {stats['crashes']}, "
            f"freezes {stats['freezes']}, cancels {stats['cancels']}, db restarts {stats['db_restarts']}); "
            f"{stats['steps run']} step runs, {stats['duplicate step runs']} duplicates, "
            f"{stats['stale acks']} stale acks — all as predicted"
        )
