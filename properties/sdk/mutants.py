"""The adapter path's mutant tier: bugs planted in the Node adapter's SQL (BELAY_ADAPTER_BUG=<name>,
adapters/node/README.md), each of which the op-level exam must kill with a short program.

    python -m properties.sdk.mutants --adapter "node adapters/node/adapter.js" [--bug NAME ...] [--conformance]

For each bug: a fresh adapter process with the bug planted, the state machine (derandomized, so the run
is reproducible) and, with --conformance, the conformance suite; a line per bug with whether it was
killed, the shrunk program's length in operations, and the seconds it took. Exit 1 if any bug survives.
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass

from properties.sdk.harness import AdapterProcess
from properties.sdk.machine import run_machine

# (name, what it breaks, the contract sentence it breaks)
NODE_BUGS: tuple[tuple[str, str], ...] = (
    ("claim-priority-desc", "§6 claim order: ORDER BY priority DESC"),
    ("claim-nulls-last", "§6 claim order: ready_at NULLS LAST"),
    ("claim-ignores-schedule", "§4/§6 claims ready jobs whose ready_at is in the future"),
    ("fence-ignores-attempt", "§7 the ack fence omits attempt = $claimed_attempt"),
    ("window-key-no-bucket", "§5.2 a window-mode key without its @bucket"),
    ("holder-any-state", "§5.2 the incomplete-mode holder lookup ignores the state predicate"),
    ("always-as-incomplete", "§5.2 unique_mode always written as incomplete"),
    ("cancel-no-settle", "§8.6 cancelling a held member skips settlement"),
    ("retry-member-ready", "§8.6 a retried dep-bearing member goes to ready, not held"),
    ("settle-ignores-flags", "§8.3 settlement ignores wf_ignore"),
    ("wake-ignores-name", "§8.1 delivery wakes every awaiter of the scope, whatever the name"),
    ("signal-keeps-old-payload", "§8.1 the signal upsert keeps the old payload"),
    ("envelope-null-as-sql-null", "§2/§7 Succeed(null) stores SQL NULL instead of the JSON envelope"),
    ("retry-keeps-cancel-request", "§8.6 retry keeps cancel_requested"),
    ("retry-keeps-max-attempts", "§8.6 retry does not raise max_attempts to attempt + 1"),
    ("cancel-running-terminal", "§8.6 cancelling a running job makes it cancelled"),
    ("fail-retries-past-max", "§7 a Fail with retry_at retries on the last attempt"),
    ("steer-wrong-name", "§8.1 steering delivers 'steer', not '$steer'"),
    ("children-not-notified", "§7 no $children signal to the parent after a terminal write"),
    ("prune-live-workflow", "§8.7 prune deletes terminal members of a live workflow"),
    ("error-entry-next-attempt", "§7 the error entry names attempt + 1"),
    ("timestamps-as-date", "§2 timestamps read through a JavaScript Date (milliseconds)"),
    ("tx-rollback-commits", "§5.1 the caller's rollback commits"),
    ("tx-enqueue-autocommit", "§5.1 the transactional enqueue runs on the SDK's own connection"),
)


@dataclass(frozen=True)
class MutantResult:
    bug: str
    case: str  # the first conformance case that failed ("" if none, or not run)
    case_ops: int  # operations that case sent
    program: int  # operations in the state machine's shrunk program (0: the machine did not kill it)
    machine_seconds: float
    finding: str
    conformance_run: bool = True

    @property
    def killed(self) -> bool:
        return bool(self.case) or self.program > 0

    def line(self) -> str:
        verdict = "KILLED " if self.killed else "SURVIVED"
        machine = (
            f"machine {self.program:>2} ops {self.machine_seconds:5.1f} s"
            if self.program
            else f"machine -  survived {self.machine_seconds:5.1f} s"
        )
        case = f"conformance: {self.case[:60]} ({self.case_ops} ops)" if self.case else "conformance: passed"
        if not self.conformance_run:
            case = "conformance: not run"
        return f"{verdict} {self.bug:<27} {machine}  {case}"


def run_bug(
    command: str,
    url: str,
    bug: str,
    *,
    examples: int,
    steps: int,
    conformance: bool = True,
    shrink_seconds: int = 60,
    reports: str | None = None,
) -> MutantResult:
    """Both parts of the op-level exam on one planted bug: the conformance suite (its first failing
    case and how many operations it sent) and the state machine (the shrunk program's length and the
    seconds from start to shrunk failure)."""
    case, case_ops = "", 0
    with AdapterProcess(command, url, env={"BELAY_ADAPTER_BUG": bug}) as adapter:
        if conformance:
            from properties.sdk.conformance import run_conformance

            report = run_conformance(adapter, url)
            failed = report.of("failed")
            if failed:
                case = failed[0].case.id
                case_ops = sum(failed[0].judged.values()) + sum(failed[0].assisted.values())
            adapter.ensure()
        started = time.perf_counter()
        run = run_machine(adapter, url, examples=examples, steps=steps, shrink_seconds=shrink_seconds)
        seconds = time.perf_counter() - started
        if reports:
            os.makedirs(reports, exist_ok=True)
            with open(os.path.join(reports, f"{bug}.txt"), "w", encoding="utf-8") as f:
                if case:
                    f.write(f"conformance: FAILED {case}\n{failed[0].message}\n\n")
                f.write(run.report() + "\n")
    finding = str(run.error).strip().splitlines()[0] if run.error is not None else ""
    program = run.length if run.error is not None else 0
    return MutantResult(bug, case, case_ops, program, seconds, finding[:90], conformance)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m properties.sdk.mutants", description=__doc__.split("\n\n")[0])
    parser.add_argument("--adapter", default="node adapters/node/adapter.js")
    parser.add_argument("--bug", action="append", help="run only these bugs (default: all)")
    parser.add_argument("--examples", type=int, default=150)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--no-conformance", action="store_true", help="the state machine only")
    parser.add_argument("--database-url")
    parser.add_argument("--shrink-seconds", type=int, default=60, help="bound on Hypothesis's shrinking per bug")
    parser.add_argument("--reports", metavar="DIR", help="write each bug's full report (shrunk program) here")
    args = parser.parse_args(argv)
    from properties.sdk.__main__ import _database

    bugs = args.bug or [b for b, _ in NODE_BUGS]
    results = []
    with _database(args.database_url) as url:
        for bug in bugs:
            result = run_bug(
                args.adapter,
                url,
                bug,
                examples=args.examples,
                steps=args.steps,
                conformance=not args.no_conformance,
                shrink_seconds=args.shrink_seconds,
                reports=args.reports,
            )
            print(result.line(), flush=True)
            results.append(result)
    killed = sum(r.killed for r in results)
    by_machine = [r.program for r in results if r.program]
    print(
        f"{killed} of {len(results)} planted bugs killed; {len(by_machine)} by the state machine "
        f"(longest shrunk program {max(by_machine, default=0)} operations), "
        f"{sum(1 for r in results if r.case)} by a conformance case"
    )
    return 0 if killed == len(results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
