"""`python -m properties.mutants`: run the catalogue against the project's tests and print the kill matrix.

Every selected suite first runs on an unmutated copy under the same profile (the baseline); a kill counts
only when that baseline passed — a mutant whose suite fails unmutated is `unjudged`. Exit status 0 only
when every selected mutant is killed; 1 when one survives, times out, does not apply or is unjudged; 2 for
a usage error.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

from impl.ops.lifecycle import interrupt_on_signals
from properties.mutants.catalogue import BY_NAME, CATALOGUE, TIERS
from properties.mutants.runner import DEFAULT_TIMEOUT, ROOT, Verdict, matrix, run_catalogue


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m properties.mutants", description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", default=[], metavar="NAME", help="run only this mutant (repeatable)")
    parser.add_argument(
        "--tier",
        choices=sorted(TIERS),
        default=None,
        help="run only this tier's mutants (durable: the SDK and runtime, issue 20; sdk-judge: the SDK adapter's judge, properties/sdk/)",
    )
    parser.add_argument(
        "--suite",
        action="append",
        default=[],
        metavar="TEST_FILE",
        help="run these test files instead of each mutant's own suite (repeatable): "
        "e.g. how an older suite fares against the same mutants",
    )
    parser.add_argument("--list", action="store_true", help="print the catalogue and exit")
    parser.add_argument(
        "--timeout", type=float, default=DEFAULT_TIMEOUT, help=f"seconds per mutant (default {DEFAULT_TIMEOUT:.0f})"
    )
    parser.add_argument(
        "--baseline",
        action="store_true",
        help="accepted for compatibility: the baseline of every selected suite always runs first (issue 51)",
    )
    parser.add_argument("--details", action="store_true", help="print each killing test's failure line")
    parser.add_argument("--source", type=Path, default=ROOT, help="the repository to copy (default: this one)")
    args = parser.parse_args(argv)
    interrupt_on_signals()  # SIGTERM/SIGHUP: stop the pytest run of the current copy, remove the copy

    unknown = [n for n in args.only if n not in BY_NAME]
    if unknown:
        parser.error(f"unknown mutant(s) {', '.join(unknown)}; see --list")
    selected = [BY_NAME[n] for n in args.only] if args.only else list(CATALOGUE)
    if args.tier:
        selected = [m for m in selected if m.name in TIERS[args.tier]]
    if args.suite:
        selected = [replace(m, suite=tuple(args.suite)) for m in selected]

    if args.list:
        width = max(len(m.name) for m in selected)
        for m in selected:
            print(f"{m.name:<{width}}  {m.section:<8}  {m.description}")
        return 0

    started = time.time()
    verdicts: list[Verdict] = run_catalogue(
        selected, args.source, args.timeout, progress=lambda line: print(line, flush=True)
    )

    print()
    print(matrix(verdicts, details=args.details))
    print(f"total {time.time() - started:.1f}s")
    slow = [v.mutant for v in verdicts if v.killed and v.seconds > args.timeout]
    if slow:
        print(f"killed, but slower than {args.timeout:.0f}s: {', '.join(slow)}")
    return 0 if all(v.killed for v in verdicts) and not slow else 1


if __name__ == "__main__":
    sys.exit(main())
