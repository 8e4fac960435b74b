"""`python -m properties.durable.replay PROGRAM.json [...]`: replay programs (for example a shrunk
counterexample printed by properties/test_durable_execution.py) — the model's prediction, then a run on a
fresh real fleet under the program's faults, and every field where they differ. Exit 1 on a difference."""

from __future__ import annotations

import json
import sys
import tempfile
from datetime import timedelta
from pathlib import Path

from model.durable import predict
from properties.durable.harness import Fleet

TTL, SKEW = 1.5, 0.4
COMPARED = ("state", "attempt", "max_attempts", "result", "errors", "journal", "runs", "events", "stale_acks")


def main(paths: list[str]) -> int:
    programs = [json.loads(Path(p).read_text()) for p in paths]
    fleet = Fleet(Path(tempfile.mkdtemp(prefix="belay-replay-")), ttl=TTL, skew=SKEW).start()
    failed = 0
    try:
        for path, program in zip(paths, programs, strict=True):
            expected = predict(program, ttl=timedelta(seconds=TTL))
            observed = fleet.run(program, expected_stale=expected.stale_acks)
            diffs = [k for k in COMPARED if getattr(expected, k) != getattr(observed, k)]
            print(f"{path}: {'agrees with the model' if not diffs else 'DIFFERS'}")
            for k in diffs:
                print(f"  {k}: model {getattr(expected, k)!r:.300} != runtime {getattr(observed, k)!r:.300}")
            failed += bool(diffs)
    finally:
        fleet.stop()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
