"""Race-explorer benchmark: states explored and states per second for every scenario variant.

    .venv/bin/python -m bench.explorer                 # the catalogue (the sizes the tests check)
    .venv/bin/python -m bench.explorer --stress        # larger configurations, for a steady throughput figure
    .venv/bin/python -m bench.explorer --repeat 5      # best of 5 runs per row

Targets: every correct variant exhausted (verdict valid) well under a minute, every broken one
invalid with its shortest counterexample; 50,000+ states/s on the larger configurations. States per
second count the whole check — the breadth-first search with the invariants and the liveness pass.
"""

from __future__ import annotations

import argparse
import time

from model.explorer import catalogue, explore, scenario
from model.explorer.scenarios import MODULES

# Larger configurations of the correct variants: tens of thousands of states each.
STRESS = (("r1", 5), ("r1", 6), ("r2", 3), ("park_wake", 4), ("lock_order", 5))


def _row(s, repeat: int) -> tuple:
    best = None
    for _ in range(repeat):
        result = explore(s, clock=time.perf_counter)
        if best is None or result.elapsed < best.elapsed:
            best = result
    cx = best.counterexample
    shortest = f"{cx.kind} in {cx.length}" if cx else ""
    flag = "" if best.as_expected else "  UNEXPECTED"
    return (
        s.key,
        s.size,
        len(s.actors),
        best.verdict + flag,
        best.states,
        best.transitions,
        best.elapsed * 1000,
        best.states_per_second,
        shortest,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stress", action="store_true", help="larger configurations of the correct variants")
    parser.add_argument("--repeat", type=int, default=3, help="runs per row; the fastest is reported")
    parser.add_argument("--only", choices=sorted(MODULES), action="append", help="just these scenarios")
    args = parser.parse_args(argv)
    if args.stress:
        scenarios = [scenario(n, "correct", size) for n, size in STRESS if not args.only or n in args.only]
    else:
        scenarios = catalogue(tuple(args.only) if args.only else None)
    header = ("scenario", "size", "actors", "verdict", "states", "transitions", "ms", "states/s", "counterexample")
    print(
        f"{header[0]:24} {header[1]:>4} {header[2]:>6} {header[3]:9} {header[4]:>8} {header[5]:>11} "
        f"{header[6]:>8} {header[7]:>9}  {header[8]}"
    )
    total_states = total_time = 0.0
    unexpected = 0
    for s in scenarios:
        key, size, actors, verdict, states, transitions, ms, rate, shortest = _row(s, args.repeat)
        unexpected += "UNEXPECTED" in verdict
        total_states += states
        total_time += ms / 1000
        print(
            f"{key:24} {size:>4} {actors:>6} {verdict:9} {states:>8,} {transitions:>11,} {ms:>8.1f} "
            f"{rate:>9,.0f}  {shortest}"
        )
    print(
        f"\n{len(scenarios)} runs, {int(total_states):,} states in {total_time:.2f}s: "
        f"{total_states / total_time:,.0f} states/s overall" + (f"; {unexpected} UNEXPECTED" if unexpected else "")
    )
    return 1 if unexpected else 0


if __name__ == "__main__":
    raise SystemExit(main())
