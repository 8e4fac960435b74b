"""`belay` day-2 commands (spec/belay-operations.txt "Day-2 tooling"), registered on the click app
of impl/ops/cli.py by `register(main)`:

    belay stats | jobs list | jobs show ID | steps ID | events ID [--follow] | retry ID | cancel ID
    belay signal SCOPE NAME [--payload JSON] | steer ID JSON | replay ID [--app MODULE] | mcp

and, from impl/ops/cli_queues.py (which uses the helpers below), queue put|show|pause|resume|delete,
cron list|put|pause|resume|delete and prune --dry-run.

Every command but mcp takes --database-url ($BELAY_DATABASE_URL), --schema and --json (machine
output; the default is rich tables). Exit codes (all `belay` commands): 0 ok; 1 a failure, not
found or refused (nothing was changed — a retried workflow member doomed again at once says so);
2 usage (bad arguments, bad JSON); 3 `replay` found a divergence (nothing else exits 3). Mutations
are the Client SDK's operations (impl/ops/operator.py) with `now` from this entry point's clock; the
deletes of a queue or cron row, which the vocabulary lacks, are named queries of impl/store/sql/ops.sql.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from functools import wraps
from typing import Any

import click
import psycopg

from model.ops import IncompatibleSchema, InvalidInput, validate_schema_name
from model.rows import STATES

EXIT_REFUSED, EXIT_DIVERGED = 1, 3


def _schema(ctx: click.Context, param: click.Parameter, value: str) -> str:
    try:
        return validate_schema_name(value)
    except InvalidInput as exc:
        raise click.BadParameter(str(exc)) from None


def _console():
    from rich.console import Console

    console = Console(soft_wrap=True)
    if not console.is_terminal:  # piped or captured: do not fold tables to 80 columns
        console = Console(soft_wrap=True, width=160)
    return console


class Out:
    """What a command prints: JSON for scripts, rich tables for people; refusals exit 1."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json

    def json(self, data: Any) -> None:
        click.echo(json.dumps(data, indent=2, sort_keys=False, default=str))

    def refuse(self, kind: str, message: str) -> None:
        if self.as_json:
            self.json({"error": message, "refused": kind})
        else:
            click.echo(f"belay: error: {message}", err=True)
        sys.exit(EXIT_REFUSED)


def operator_command(fn: Callable) -> Callable:
    """--database-url/--schema/--json, an Operator for the body, refusals and database errors → exit 1."""

    @click.option(
        "--database-url", envvar="BELAY_DATABASE_URL", required=True, help="PostgreSQL URL ($BELAY_DATABASE_URL)"
    )
    @click.option("--schema", default="public", show_default=True, callback=_schema)
    @click.option("--json", "as_json", is_flag=True, help="machine-readable JSON output")
    @wraps(fn)
    def wrapper(database_url: str, schema: str, as_json: bool, **kwargs: Any) -> None:
        from impl.client import utc_now
        from impl.ops.failures import ToolError, check_database, describe_database_error
        from impl.ops.operator import Operator
        from impl.ops.shapes import Refused

        out = Out(as_json)
        try:
            check_database(database_url, schema=None)  # a few seconds, not the pool's 30 s timeout
            with Operator(database_url, schema=schema, clock=utc_now) as op:
                fn(op, out, **kwargs)
        except Refused as exc:
            out.refuse(exc.kind, str(exc))
        except IncompatibleSchema as exc:
            out.refuse("incompatible", f"schema {schema}: {exc}")
        except ToolError as exc:
            out.refuse("database", str(exc))
        except (psycopg.OperationalError, psycopg.ProgrammingError) as exc:
            out.refuse("database", describe_database_error(exc, database_url))

    return wrapper


def _json_arg(text: str | None, what: str) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(
            f"not valid JSON ({exc.msg} at column {exc.colno}): {text!r}", param_hint=what
        ) from None


JOB_ID = click.argument("job_id", type=click.IntRange(min=1), metavar="ID")


def _table(title: str | None, columns: list[str], rows: list[list[Any]]) -> None:
    from rich.markup import escape
    from rich.table import Table

    from impl.ops.shapes import shown_name  # "a\nb" is one row, told apart from "a b"

    table = Table(title=title, show_lines=False)
    for c in columns:
        table.add_column(c, overflow="fold")
    for r in rows:
        table.add_row(*["" if v is None else escape(shown_name(str(v))) for v in r])
    _console().print(table)


def error_text(entry: dict) -> str:
    """One recorded error as `Class: detail`, the class once (a detail often starts with it already)."""
    error, detail = entry.get("error"), entry.get("detail")
    if detail is None:
        return str(error)
    detail = detail if isinstance(detail, str) else json.dumps(detail, default=str)
    return detail if error is None or detail.startswith(f"{error}:") else f"{error}: {detail}"


def _short(value: Any, limit: int = 60) -> str:
    text = json.dumps(value, default=str) if not isinstance(value, str) else value
    return text if len(text) <= limit else text[: limit - 1] + "…"


def register(main: click.Group) -> None:
    """Add the day-2 commands to the `belay` group."""

    @main.command("stats")
    @operator_command
    def stats_cmd(op, out: Out) -> None:
        """Job counts per queue and state (Belay.stats)."""
        stats = op.stats()
        if out.as_json:
            return out.json(stats)
        present = [s for s in STATES if any(s in counts for counts in stats.values())]
        _table(
            "jobs per queue",
            ["queue", *present],
            [[q, *[counts.get(s, "") for s in present]] for q, counts in sorted(stats.items())],
        )
        if not stats:
            click.echo("no jobs")

    @main.group("jobs")
    def jobs_group() -> None:
        """List and inspect jobs."""

    @jobs_group.command("list")
    @click.option("--state", "states", multiple=True, type=click.Choice(STATES), help="filter by state (repeatable)")
    @click.option("--queue", default=None)
    @click.option("--kind", default=None, help="filter by kind (belay_jobs.worker)")
    @click.option("--workflow", default=None, help="filter by workflow id")
    @click.option("--parent", type=click.IntRange(min=1), default=None, metavar="ID", help="children of job ID")
    @click.option("--error", default=None, metavar="TEXT", help="text in any recorded error (class or detail)")
    @click.option("--limit", type=click.IntRange(1, 1000), default=50, show_default=True)
    @click.option(
        "--after",
        type=click.IntRange(min=1),
        default=None,
        help="continue after this job id (newest first: the previous page's next)",
    )
    @operator_command
    def jobs_list_cmd(
        op,
        out: Out,
        states: tuple[str, ...],
        queue: str | None,
        kind: str | None,
        workflow: str | None,
        parent: int | None,
        error: str | None,
        limit: int,
        after: int | None,
    ) -> None:
        """Jobs newest first, keyset-paginated (Belay.list_jobs)."""
        from impl.ops.shapes import job_json

        page = op.list_jobs(
            states=states,
            queue=queue,
            kind=kind,
            workflow_id=workflow,
            parent_id=parent,
            error=error,
            limit=limit,
            after=after,
        )
        if out.as_json:
            return out.json({"jobs": [job_json(j) for j in page.jobs], "next_after": page.next_after})
        _table(
            None,
            ["id", "queue", "kind", "state", "attempt", "inserted", "finished", "workflow"],
            [
                [
                    j.id,
                    j.queue,
                    j.worker,
                    j.state,
                    f"{j.attempt}/{j.max_attempts}",
                    j.inserted_at.isoformat(timespec="seconds"),
                    j.finished_at.isoformat(timespec="seconds") if j.finished_at else None,
                    j.workflow_id,
                ]
                for j in page.jobs
            ],
        )
        if page.next_after is not None:
            click.echo(f"next page: --after {page.next_after}")

    @jobs_group.command("show")
    @JOB_ID
    @operator_command
    def jobs_show_cmd(op, out: Out, job_id: int) -> None:
        """One job with its journal: attempts and errors, steps with costs, events, children, signals."""
        journal = op.journal(job_id)
        if out.as_json:
            return out.json(journal)
        job = journal["job"]
        _table(f"job {job_id}", ["field", "value"], [[k, _short(v, 100)] for k, v in job.items() if v is not None])
        _table(
            "attempts",
            ["attempt", "ended", "errors"],
            [
                [
                    a["attempt"],
                    a["ended"],
                    "; ".join(_short(error_text(e), 100) for e in a["errors"]),
                ]
                for a in journal["attempts"]
            ],
        )
        _steps_table(journal["steps"])
        click.echo(f"total cost: {journal['cost']['usd_micros']} µ$, {journal['cost']['tokens']} tokens")
        if journal["events"]:
            _table(
                "events",
                ["seq", "at", "payload"],
                [[e["seq"], e["inserted_at"], _short(e["payload"])] for e in journal["events"]],
            )
        if journal["children"]:
            _table(
                "children",
                ["id", "queue", "kind", "state"],
                [[c["id"], c["queue"], c["kind"], c["state"]] for c in journal["children"]],
            )
        if journal["signals"]:
            _table(
                "signals",
                ["scope", "name", "at", "payload"],
                [[s["scope"], s["name"], s["inserted_at"], _short(s["payload"])] for s in journal["signals"]],
            )

    def _steps_table(steps: list[dict]) -> None:
        _table(
            "steps",
            ["seq", "name", "value", "usd_micros", "tokens", "at"],
            [[s["seq"], s["name"], _short(s["value"]), s["usd_micros"], s["tokens"], s["inserted_at"]] for s in steps],
        )

    @main.command("steps")
    @JOB_ID
    @operator_command
    def steps_cmd(op, out: Out, job_id: int) -> None:
        """A job's journal in order, costs included (Belay.steps)."""
        from impl.ops.shapes import step_json

        steps = [step_json(s) for s in op.steps(job_id)]
        if out.as_json:
            return out.json(steps)
        _steps_table(steps)

    @main.command("events")
    @JOB_ID
    @click.option("--follow", is_flag=True, help="keep printing new events until the job is terminal")
    @click.option("--interval", type=float, default=0.5, show_default=True, help="--follow polling interval (s)")
    @operator_command
    def events_cmd(op, out: Out, job_id: int, follow: bool, interval: float) -> None:
        """A job's emitted events (Belay.events); --follow streams them (JSON lines with --json)."""
        from impl.ops.shapes import event_json

        events = [event_json(e) for e in op.events(job_id)]
        if not follow:
            if out.as_json:
                return out.json(events)
            return _table(
                None,
                ["seq", "at", "payload"],
                [[e["seq"], e["inserted_at"], _short(e["payload"], 100)] for e in events],
            )
        last = 0
        try:
            while True:
                for e in events:
                    last = e["seq"]
                    if out.as_json:
                        click.echo(json.dumps(e, default=str))
                    else:
                        click.echo(f"{e['seq']:>5}  {e['inserted_at']}  {json.dumps(e['payload'], default=str)}")
                if op.job(job_id).terminal:
                    events = [event_json(e) for e in op.events(job_id, after=last)]
                    if not events:
                        return
                    continue
                time.sleep(interval)
                events = [event_json(e) for e in op.events(job_id, after=last)]
        except KeyboardInterrupt:
            return

    @main.command("retry")
    @JOB_ID
    @operator_command
    def retry_cmd(op, out: Out, job_id: int) -> None:
        """Retry a failed or cancelled job (§8.6). A workflow member whose dependency failed or was
        cancelled is doomed again at once: that exits 1 and names the dependency to retry first."""
        done = op.retry(job_id)
        out.json(done) if out.as_json else click.echo(f"job {job_id} retried: now {done['state']}")

    @main.command("cancel")
    @JOB_ID
    @operator_command
    def cancel_cmd(op, out: Out, job_id: int) -> None:
        """Cancel a job: immediate when parked, cooperative when running (§8.6)."""
        done = op.cancel(job_id)
        if out.as_json:
            return out.json(done)
        click.echo(
            f"job {job_id} cancelled" if done["cancelled"] else f"job {job_id}: cancel requested ({done['note']})"
        )

    @main.command("signal")
    @click.argument("scope")
    @click.argument("name")
    @click.option("--payload", default=None, help="JSON payload (default: null)")
    @operator_command
    def signal_cmd(op, out: Out, scope: str, name: str, payload: str | None) -> None:
        """Deliver signal NAME in SCOPE (job:<id>, wf:<workflow>, or any scope) and wake its awaiters."""
        for label, text in (("SCOPE", scope), ("NAME", name)):
            if not text.strip():
                raise click.BadParameter(f"the signal's {label.lower()} is empty", param_hint=label)
        done = op.signal(scope, name, _json_arg(payload, "--payload"))
        out.json(done) if out.as_json else click.echo(
            f"signal {name!r} delivered in {scope!r}; woke {len(done['woken'])} job(s) {done['woken'] or ''}"
        )

    @main.command("steer")
    @JOB_ID
    @click.argument("payload", metavar="JSON")
    @operator_command
    def steer_cmd(op, out: Out, job_id: int, payload: str) -> None:
        """Send a `$steer` message to a job (read by its code at the next step)."""
        done = op.steer(job_id, _json_arg(payload, "JSON"))
        out.json(done) if out.as_json else click.echo(f"job {job_id} steered")

    @main.command("replay")
    @JOB_ID
    @click.option(
        "--app",
        default=None,
        help="MODULE[:ATTR] with the Registry: re-execute the code against the journal and report the first divergence",
    )
    @click.option(
        "--database-url", envvar="BELAY_DATABASE_URL", required=True, help="PostgreSQL URL ($BELAY_DATABASE_URL)"
    )
    @click.option("--schema", default="public", show_default=True, callback=_schema)
    @click.option("--json", "as_json", is_flag=True, help="machine-readable JSON output")
    def replay_cmd(job_id: int, app: str | None, database_url: str, schema: str, as_json: bool) -> None:
        """What did the job actually do? Read-only (exit 3 when the code diverges from the journal)."""
        from impl.ops.replay import ReplayError, dry_run

        out = Out(as_json)
        try:
            report = dry_run(database_url, job_id, app, schema=schema)
        except ReplayError as exc:
            return out.refuse("not_found", str(exc))
        except ImportError as exc:
            raise click.BadParameter(str(exc), param_hint="--app") from None
        if as_json:
            out.json(report.to_json())
        else:
            h = report.history
            _table(f"job {job_id}: timeline", ["at", "what"], [[t["at"], t["what"]] for t in h["timeline"]])
            _table(
                "attempts",
                ["attempt", "ended", "errors"],
                [
                    [a["attempt"], a["ended"], "; ".join(str(e.get("error")) for e in a["errors"])]
                    for a in h["attempts"]
                ],
            )
            click.echo(f"outcome: {json.dumps(h['outcome'], default=str)}")
            click.echo(report.describe())
        if report.divergence is not None:
            sys.exit(EXIT_DIVERGED)

    @main.command("mcp")
    @click.option(
        "--database-url", envvar="BELAY_DATABASE_URL", required=True, help="PostgreSQL URL ($BELAY_DATABASE_URL)"
    )
    @click.option("--schema", default="public", show_default=True, callback=_schema)
    @click.option("--allow-mutations", is_flag=True, help="expose retry, cancel, signal, steer, queue put/pause/resume")
    @click.option(
        "--authorizer",
        default=None,
        metavar="MODULE:CALLABLE",
        help="called with (tool name, arguments) before every mutation; falsy or raising refuses",
    )
    @click.option("--transport", type=click.Choice(["stdio", "streamable-http"]), default="stdio", show_default=True)
    @click.option("--reports", default="reports", show_default=True, help="where the soak verdict is read from")
    @click.option("--app", default=None, help="MODULE[:ATTR] Registry for replay dry-runs with re-execution")
    def mcp_cmd(
        database_url: str,
        schema: str,
        allow_mutations: bool,
        authorizer: str | None,
        transport: str,
        reports: str,
        app: str | None,
    ) -> None:
        """The MCP server: the day-2 inspection surface for AI assistants (read-only by default)."""
        from impl.ops.failures import check_database
        from impl.ops.mcp_server import build_server, load_authorizer

        check_database(database_url, schema=schema)  # fail in seconds with one clear line, before serving

        auth = None
        if authorizer is not None:
            try:
                auth = load_authorizer(authorizer)
            except (ImportError, AttributeError, ValueError) as exc:
                raise click.BadParameter(str(exc), param_hint="--authorizer") from None
        server = build_server(
            database_url, schema=schema, allow_mutations=allow_mutations, authorizer=auth, reports=reports, app=app
        )
        server.run(transport)
