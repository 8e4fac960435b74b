"""The soak harness: `python -m soak.run [options]` (soak/run.sh bootstraps and calls this).

Phases (Jepsen style — generator, nemesis and checker kept apart):
  1. faults — N workers run, the driver enqueues (transactional enqueue + ledger), the nemesis kills
     (-9), freezes (SIGSTOP past the lease, then SIGCONT) and crash-restarts PostgreSQL;
  2. heal   — no more faults, every worker running, load continues;
  3. drain  — no new work, crons paused, follow-ups (signals, cancels) continue until every job is
     terminal (or the drain times out);
  4. check  — one snapshot + the ledger + the fault log go to soak.judges.checker.check; the report is
     written to <report>/<run-id>/ and <report>/latest points at it.
Exit 0 valid, 1 invalid, 2 unknown (3: the harness itself failed).
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import sys
import time
import urllib.parse
import uuid
from pathlib import Path

import psycopg

from impl.ops.failures import debug_requested, describe_database_error
from impl.ops.lifecycle import interrupt_on_signals
from impl.provision import ClusterConfig, EmbeddedCluster, ProvisionError, redact
from impl.store.migrate import migrate
from impl.store.snapshot import snapshot_streamed
from model.ops import IncompatibleSchema
from soak.faults import netfaults  # issue 13: network faults and failover
from soak.faults.nemesis import Nemesis, Workers, fault_rates
from soak.hook import HistoryCheck, final_verdict  # issue 12: committed-history checking
from soak.judges.checker import check
from soak.judges.duties import SAMPLE_TYPES
from soak.record.history import History
from soak.record.spill import disk_table
from soak.report import artifacts as report
from soak.report import interrupted
from soak.report.memory import MemorySampler, add_check_peak, check_phase, dir_size
from soak.report.memory import describe as describe_memory
from soak.workload import ledger as soak_ledger
from soak.workload.driver import Driver, DriverConfig
from soak.workload.scenarios import ADMISSION_QUEUES

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_WORKER = "soak/reference-worker"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="soak/run.sh", description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--worker",
        default=DEFAULT_WORKER,
        help="worker command, run via /bin/sh -c from the repo root "
        "(default: %(default)s, the reference worker; see soak/PROTOCOL.md)",
    )
    p.add_argument("--workers", type=int, default=3, help="worker processes (default %(default)s)")
    p.add_argument("--duration", type=float, default=60, help="seconds of the faults phase (default %(default)s)")
    p.add_argument("--heal", type=float, default=10, help="seconds of load without faults (default %(default)s)")
    p.add_argument("--drain-timeout", type=float, default=180, help="max seconds to drain (default %(default)s)")
    p.add_argument("--kill-every", type=float, default=10, help="kill -9 a worker every S seconds; 0 = off")
    p.add_argument("--stop-every", type=float, default=20, help="SIGSTOP a worker past its lease every S s; 0 = off")
    p.add_argument("--db-restart-every", type=float, default=30, help="crash-restart PostgreSQL every S s; 0 = off")
    p.add_argument(
        "--term-every",
        type=float,
        default=20,
        help="SIGTERM a worker running short jobs every S s and "
        "check that it drains (duty P4); 0 = off (default %(default)s)",
    )
    p.add_argument(
        "--clock-skew",
        type=float,
        default=0.5,
        help="seconds the clock of worker slot 2 runs ahead "
        "(BELAY_CLOCK_OFFSET, PROTOCOL.md §1; the contract tolerates small skew); 0 = off "
        "(default %(default)s)",
    )
    p.add_argument("--stop-for", type=float, default=None, help="seconds a SIGSTOP lasts (default: lease ttl + 5)")
    p.add_argument("--lease-ttl", type=float, default=10, help="BELAY_LEASE_TTL for workers (default %(default)s)")
    p.add_argument("--rate", type=float, default=50, help="echo jobs per second (default %(default)s)")
    p.add_argument(
        "--max-attempts",
        type=int,
        default=10,
        help="max_attempts of the driver's jobs but `slow` ones (default %(default)s)",
    )
    p.add_argument("--seed", type=int, default=None, help="seed of the driver's and nemesis's choices")
    p.add_argument(
        "--report",
        default=str(ROOT / "reports"),
        help="reports folder (default: reports/); the run writes <report>/<run-id>/ and points <report>/latest at it",
    )
    p.add_argument(
        "--database-url",
        default=None,
        help="use this PostgreSQL server (a fresh database is created "
        "on it; needs CREATEDB) instead of an embedded cluster: database faults are then skipped",
    )
    p.add_argument("--no-progress", action="store_true", help="plain progress lines instead of the live display")
    p.add_argument(
        "--no-history",
        action="store_true",
        help="do not capture and check the committed history "
        "(logical replication; soak/record/capture.py) — e.g. to measure its cost",
    )
    p.add_argument(
        "--disk-tables-over",
        type=int,
        default=10_000,
        metavar="ROWS",
        help="end-of-run check: the jobs, steps, events and ledger tables with this many rows or more are read "
        "into a disk-backed table, not memory (default %(default)s; issue 27)",
    )
    netfaults.add_arguments(p)  # issue 13
    args = p.parse_args(argv)
    if args.workers < 1 or args.duration <= 0 or args.lease_ttl <= 0:
        p.error("--workers, --duration and --lease-ttl must be positive")
    return args


# --- the database --------------------------------------------------------------------------------------


class Database:
    """An embedded cluster the soak owns (crash-restartable, fsync on), or a fresh database on a server."""

    def __init__(
        self, external: str | None, run_id: str, settings: dict[str, str] | None = None, logical: bool = False
    ) -> None:
        self.cluster: EmbeddedCluster | None = None
        self.external_admin = external
        self.dbname: str | None = None
        if external is None:
            # fsync stays on: crash results are meaningless without it; wal_level=logical for history capture
            config = ClusterConfig(extra_settings={**(settings or {}), **({"wal_level": "logical"} if logical else {})})
            assert config.fsync, "never turn fsync off for soak runs"
            self.cluster = EmbeddedCluster(config).start()
            self.url = self.cluster.url
            self.description = f"embedded PostgreSQL {self.cluster.version} (fsync on)"
            self.db_faults = "enabled (crash-restart of the embedded cluster)"
        else:
            self.dbname = f"belay_soak_{run_id.replace('-', '_').lower()}"
            with psycopg.connect(external, autocommit=True) as c:
                c.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(self.dbname)))
            parts = urllib.parse.urlsplit(external)
            self.url = urllib.parse.urlunsplit(parts._replace(path="/" + self.dbname))
            self.description = f"external server {redact(self.url)}"
            self.db_faults = "skipped: --database-url given (the harness does not own that server)"
        with psycopg.connect(self.url, autocommit=True) as c:
            migrate(c)
            soak_ledger.install(c)

    def close(self) -> None:
        if self.cluster is not None:
            self.cluster.destroy()


# --- progress ------------------------------------------------------------------------------------------


class Progress:
    """Counts from the database once a second; a rich live panel on a terminal, plain lines elsewhere."""

    def __init__(self, url: str, plain: bool) -> None:
        self.url = url
        self.conn: psycopg.Connection | None = None
        self.samples: collections.deque[tuple[float, int, int]] = collections.deque(maxlen=64)  # (t, terminal, total)
        self.plain = plain or not sys.stdout.isatty()
        self.live = None
        self.last_line = 0.0

    def poll(self) -> tuple[int, int] | None:
        try:
            if self.conn is None or self.conn.closed or self.conn.broken:
                self.conn = psycopg.connect(self.url, autocommit=True, connect_timeout=2)
            row = self.conn.execute(
                "SELECT count(*) FILTER (WHERE state IN ('succeeded','failed','cancelled')), count(*) FROM belay_jobs"
            ).fetchone()
            self.samples.append((time.monotonic(), row[0], row[1]))
            return row[0], row[1]
        except psycopg.Error:
            self.conn = None
            return None

    def rate(self, window: float = 5.0) -> float:
        if len(self.samples) < 2:
            return 0.0
        t1, d1, _ = self.samples[-1]
        older = [s for s in self.samples if s[0] <= t1 - window] or [self.samples[0]]
        t0, d0, _ = older[-1]
        return (d1 - d0) / (t1 - t0) if t1 > t0 else 0.0

    def _table(self, info: dict):
        from rich.table import Table

        t = Table(title=f"Belay soak {info['run_id']}", show_header=False, expand=False)
        t.add_column(style="bold cyan")
        t.add_column()
        for k, v in info.items():
            if k != "run_id":
                t.add_row(k, str(v))
        return t

    def show(self, info: dict) -> None:
        if self.plain:
            if time.monotonic() - self.last_line >= 10:
                self.last_line = time.monotonic()
                print(" | ".join(f"{k} {v}" for k, v in info.items() if k != "run_id"), flush=True)
            return
        if self.live is None:
            from rich.live import Live

            self.live = Live(self._table(info), refresh_per_second=4, transient=False)
            self.live.start()
        else:
            self.live.update(self._table(info))

    def close(self) -> None:
        if self.live is not None:
            self.live.stop()
        if self.conn is not None:
            self.conn.close()


# --- the run -------------------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    import logging

    logging.basicConfig(level=logging.ERROR)
    for name in ("psycopg", "psycopg.pool"):  # "discarding closed connection" during crashes is expected
        logging.getLogger(name).setLevel(logging.ERROR)
    seed = args.seed if args.seed is not None else random.randrange(1 << 31)
    rng = random.Random(seed)
    run_id = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + f"-{uuid.uuid4().hex[:4]}"
    run_dir = Path(args.report).resolve() / run_id
    (run_dir / "workers").mkdir(parents=True)
    history = History(run_dir / "history.jsonl")
    print(
        f"soak {run_id}: worker `{args.worker}` × {args.workers}, faults {args.duration:.0f}s "
        f"(kill -9 every {args.kill_every or '-'}s, SIGSTOP every {args.stop_every or '-'}s, "
        f"PostgreSQL crash-restart every {(args.db_restart_every if not args.database_url else 0) or '-'}s), "
        f"seed {seed}; report {run_dir}",
        flush=True,
    )
    # The history's replication slot lives on the primary only: a failover would lose it mid-run.
    history_on = not args.no_history and not args.failover_every
    db = Database(args.database_url, run_id, netfaults.cluster_settings(args), logical=history_on)
    print(f"database: {db.description}; database faults {db.db_faults}", flush=True)
    # --- issue 12: capture the committed history from here on (before any worker or driver writes) ---
    hist = None
    try:
        hist = HistoryCheck.begin(
            db.url,
            run_dir,
            run_id,
            enabled=history_on,
            why_off="turned off (--no-history)"
            if args.no_history
            else "not with --failover-every (a logical slot lives on the old primary only)",
        )
    finally:
        if hist is None:
            db.close()
    print(
        f"history capture: {'slot ' + hist.capture.slot if hist.capture else 'skipped — ' + str(hist.skipped)}",
        flush=True,
    )
    # --- issue 13: with network faults or failover, everyone reaches PostgreSQL through the harness's proxy
    net = (
        netfaults.NetFaults(args, db.url, db.cluster, history, random.Random(rng.random()))
        if netfaults.wanted(args)
        else None
    )
    harness_url = net.harness_url if net else db.url
    # ---
    password = urllib.parse.urlsplit(db.url).password
    env = {
        **os.environ,
        "BELAY_DATABASE_URL": db.url,
        "BELAY_QUEUES": ",".join(["soak", *ADMISSION_QUEUES]),  # §6 admission queues (duty P18)
        "BELAY_LEASE_TTL": str(args.lease_ttl),
        "BELAY_SOAK_PYTHON": sys.executable,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    stop_for = args.stop_for if args.stop_for is not None else args.lease_ttl + 5
    history.record(
        "run_start",
        run_id=run_id,
        lease_ttl=args.lease_ttl,
        workers=args.workers,
        seed=seed,
        worker=args.worker,
        duration=args.duration,
        kill_every=args.kill_every,
        stop_every=args.stop_every,
        db_restart_every=args.db_restart_every if db.cluster else None,
        stop_for=stop_for,
        database=redact(db.url),
        db_faults=db.db_faults,
        net={
            k: v
            for k, v in vars(args).items()
            if k.split("_")[0] in ("partition", "stall", "latency", "failover", "replication")
        },
    )
    skew_slot = 2 if args.workers >= 2 else 1
    skew = {skew_slot: args.clock_skew} if args.clock_skew else {}
    history.record("clock_skew", slot=skew_slot if skew else None, seconds=args.clock_skew or 0.0)
    workers = Workers(args.worker, args.workers, env, ROOT, run_dir / "workers", history, skew=skew)
    if net:
        workers.slot_env = net.slot_env(args.workers)
    driver = Driver(
        harness_url,
        history,
        random.Random(rng.random()),
        DriverConfig(echo_per_s=args.rate, slow_seconds=args.lease_ttl + 2, max_attempts=args.max_attempts),
    )
    nemesis = Nemesis(
        workers,
        history,
        random.Random(rng.random()),
        url=harness_url,
        cluster=db.cluster,
        kill_every=args.kill_every or None,
        stop_every=args.stop_every or None,
        db_restart_every=args.db_restart_every or None,
        stop_for=stop_for,
        term_every=args.term_every or None,
        phase_seconds=args.duration,
    )
    nemesis.exits_paused = driver.exits_paused  # zombie holds pause the self-exiting kinds (soak/faults/zombies.py)
    progress = Progress(harness_url, args.no_progress)
    meta = {
        "run_id": run_id,
        "worker": args.worker,
        "workers": args.workers,
        "lease_ttl": args.lease_ttl,
        "seed": seed,
        "duration": args.duration,
        "heal": args.heal,
        "database": db.description,
        "db_faults": db.db_faults,
        "kill_every": args.kill_every,
        "stop_every": args.stop_every,
        "db_restart_every": args.db_restart_every if db.cluster else None,
        "rate": args.rate,
        "term_every": args.term_every,
        "clock_skew": args.clock_skew,
        "fsync": "on" if db.cluster else "server's own setting",
        "network_faults": net.summary() if net else "off",
    }
    started = time.monotonic()
    memory = MemorySampler()  # issue 13: harness and worker RSS over the run

    def tick(phase: str, until: float, extra: dict | None = None) -> None:
        counts = progress.poll()
        st = workers.status()
        memory.maybe_sample(workers.slots)
        info = {
            "run_id": run_id,
            "phase": phase,
            "elapsed": f"{time.monotonic() - started:.0f}s",
            "phase left": f"{max(until - time.monotonic(), 0):.0f}s",
            "jobs terminal / total": f"{counts[0]} / {counts[1]}" if counts else "(database unreachable)",
            "throughput": f"{progress.rate():.1f} jobs/s",
            **driver.counters(),
            "workers alive / stopped": f"{st['alive']} / {st['stopped']}",
            "faults (injected / requested)": ", ".join(
                f"{k} {v['injected']}/{v['requested']:.0f}" for k, v in fault_rates(nemesis).items()
            )
            or "-",
            "self-exits": st["exits"],
            "last fault": nemesis.last or "-",
            **(extra or {}),
        }
        if net:  # issue 13
            info["network faults"] = net.summary()
            info["last network fault"] = net.last or "-"
        progress.show(info)

    code = 3
    try:
        history.record("phase", phase="faults")
        driver.scenarios.put_admission_queues()  # before any worker reads its queue options
        workers.start()
        driver.start()
        driver.put_cron(paused=False)
        nemesis.start()
        if net:
            net.start(workers, nemesis)
        end = time.monotonic() + args.duration
        before = progress.poll() or (0, 0)
        while time.monotonic() < end and not workers.fatal:
            tick("faults", end)
            time.sleep(0.5)
        after = progress.poll() or before
        meta["mean_throughput_faults"] = round((after[0] - before[0]) / args.duration, 1)

        history.record("phase", phase="heal")
        nemesis.stop_all()
        if net:
            net.stop_all()
            meta["network_faults"] = net.summary()
        end = time.monotonic() + (0 if workers.fatal else args.heal)
        while time.monotonic() < end and not workers.fatal:
            tick("heal", end)
            time.sleep(0.5)

        history.record("phase", phase="drain")
        driver.stop_producing()
        driver.put_cron(paused=True)
        drain_start = time.monotonic()
        end = drain_start + (0 if workers.fatal else args.drain_timeout)
        drained, quiet_since = False, None
        while time.monotonic() < end and not workers.fatal:
            counts = progress.poll()
            tick("drain", end)
            if counts and counts[0] == counts[1] and driver.follow_up_once() == 0:
                quiet_since = quiet_since or time.monotonic()
                if time.monotonic() - quiet_since >= 3:  # a quiet period spanning sweeper/reconciler passes
                    drained = True
                    break
            else:
                quiet_since = None
            time.sleep(0.5)
        counts = progress.poll() or (None, None)
        meta["drain_seconds"] = round(time.monotonic() - drain_start, 1)
        left = (counts[1] - counts[0]) if counts[0] is not None else None
        history.record("drain_end", drained=drained, nonterminal=left)
        if workers.fatal:
            print(f"run cut short: {workers.fatal}", flush=True)

        history.record("phase", phase="check")
        memory.maybe_sample(workers.slots, force=True)
        meta["memory"] = memory.summary()
        driver.sample_steps()
        with psycopg.connect(harness_url, autocommit=True) as c:
            history.record("snapshot")
            state = snapshot_streamed(c, big=disk_table, big_over=args.disk_tables_over)  # big ones on disk
            check_phase(meta["memory"], "snapshot")
            led = soak_ledger.read(c, big=disk_table, big_over=args.disk_tables_over)  # a long run's on disk
            check_phase(meta["memory"], "ledger")
        progress.close()
        driver.close()
        workers.terminate()
        meta["driver"] = driver.counters()
        meta["elapsed_seconds"] = round(time.monotonic() - started, 1)
        hist_result = hist.finish(args.disk_tables_over)  # issue 12: workers and driver have stopped writing
        check_phase(meta["memory"], "history")
        # read back from history.jsonl; the lease and priority samples (most of a long run's history) are
        # streamed into the checker's disk-backed series, never held in a list (issue 27)
        events = history.snapshot(skip=SAMPLE_TYPES)
        result = check(state, led, events, hist_result.refinement, samples=history.of_types(SAMPLE_TYPES))
        check_phase(meta["memory"], "checkers")
        for log in (run_dir / "workers").glob("*.log"):
            text = redact(log.read_text(errors="replace"))
            if password:
                text = text.replace(password, "***")
            log.write_text(text)
        add_check_peak(meta["memory"])  # the samples stopped before the check: its peak, said apart
        results, code = write_artifacts(run_dir, result, state, events, meta, hist, hist_result)
        check_phase(meta["memory"], "report")
        add_check_peak(meta["memory"])  # the summary line's peak includes writing the report
        size_line = "- memory and size: " + describe_memory(meta["memory"], dir_size(run_dir))
        with open(run_dir / "summary.md", "a") as f:
            f.write("\n" + size_line + "\n")
        print_verdict(result, results, run_dir, (results["verdict"], code))
        print(size_line[2:], flush=True)
        print(hist_result.line(), flush=True)  # issue 12: the history checker's own verdict line
        for detail in hist_result.refinement_findings[:1]:  # issue 30: the first transaction the model cannot explain
            print("\n".join(detail.splitlines()[:40]), flush=True)
        if hist_result.verdict == "invalid" and result.exit_code != 1:
            print(f"verdict INVALID by the committed history → exit {code} (the report says so too)", flush=True)
    except KeyboardInterrupt as exc:  # SIGINT, or SIGTERM / SIGHUP through impl.ops.lifecycle (issue 19)
        reason = str(exc) or "SIGINT"
        print(f"\nsoak interrupted ({reason}): stopping the driver, the workers and PostgreSQL", flush=True)
        progress.close()
        interrupted.write(run_dir, history.snapshot(), meta, reason)
        code = interrupted.EXIT_UNKNOWN
        print(f"verdict unknown (interrupted) → exit {code}; report {run_dir}/report.html", flush=True)
    finally:
        progress.close()
        nemesis.halt.set()
        driver.halt.set()
        workers.terminate(grace=5)
        history.close()
        if not hist.close():  # issue 12: a forgotten slot pins WAL forever
            print(
                f"WARNING: could not drop replication slot {hist.capture.slot}: {hist.capture.last_error}", flush=True
            )
        if net:
            net.close()
        db.close()
    return code


def write_artifacts(
    run_dir: Path, result, state, events: list[dict], meta: dict, hist: HistoryCheck, hist_result
) -> tuple[dict, int]:
    """The report of a finished run and its exit code. Whatever decides the verdict — the invariants, the
    duties, the coverage (`result`) and the committed history (`hist_result`, trace validation) — is
    combined BEFORE the report is written, so results.json (`verdict`, `exit_code`), summary.md and
    report.html's heading state the exit code's verdict (issue 51: they said VALID of a run the history
    made INVALID, because the report was written first)."""
    verdict, code = final_verdict(result.verdict, hist_result)
    results = report.write(run_dir, result, state, events, meta, final=(verdict, code))
    hist.add_to_report(run_dir, events)  # issue 12: the history's own section
    return results, code


def print_verdict(result, results: dict, run_dir: Path, final: tuple[str, int] | None = None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    verdict, code = final if final is not None else (result.verdict, result.exit_code)
    t = Table(title=f"Belay soak: {verdict.upper()}")
    for col in ("invariant", "verdict", "checks", "violations", "first counterexample / why"):
        t.add_column(col, overflow="fold")
    colour = {"valid": "green", "invalid": "bold red", "unknown": "yellow"}
    for name, r in {**result.invariants, **result.duties}.items():
        why = r.counterexamples[0] if r.counterexamples else (r.why_unknown or "")
        t.add_row(name, f"[{colour[r.verdict]}]{r.verdict}[/]", str(r.checks), str(r.violations), why)
    console.print(t)
    c = Table(title="Scenario coverage")
    for col in ("row", "scenarios (count)", "verdict"):
        c.add_column(col, overflow="fold")
    for row in result.coverage:
        c.add_row(
            row["row"],
            "; ".join(f"{s['scenario']} ({s['count']})" for s in row["scenarios"]),
            f"[{colour[row['verdict']]}]{row['verdict']}[/]",
        )
    console.print(c)
    s = result.stats
    console.print(f"jobs checked {s['jobs_checked']} (ledger {s['ledger_jobs']}), drained {s['drained']}")
    from soak.report.artifacts import describe_faults

    console.print(describe_faults(results["fault_rates"], results["exits"]), highlight=False)
    console.print(f"verdict [{colour[verdict]}]{verdict}[/] → exit {code}; report {run_dir}/report.html")


def main(argv: list[str] | None = None) -> None:
    """Exit 0 valid, 1 invalid, 2 unknown (also: interrupted), 3 the harness could not run."""
    args = parse_args(argv)
    interrupt_on_signals()  # SIGTERM / SIGHUP end the run like Ctrl-C: nothing it started outlives it
    try:
        code = run(args)
    except KeyboardInterrupt as exc:  # before the run had a report folder of its own
        print(f"soak interrupted ({str(exc) or 'SIGINT'}) before it started: nothing was checked", file=sys.stderr)
        code = interrupted.EXIT_UNKNOWN
    except (psycopg.Error, ProvisionError, IncompatibleSchema) as exc:
        if debug_requested():
            raise
        print(f"soak: error: {describe_database_error(exc, args.database_url)}", file=sys.stderr)
        print("soak: nothing was checked (exit 3); BELAY_DEBUG=1 shows the traceback", file=sys.stderr)
        code = 3
    sys.exit(code)


if __name__ == "__main__":
    main()
