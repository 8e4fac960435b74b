"""`belay` queue options, crons and retention (spec/belay-operations.txt "Day-2 tooling"), registered on the
click app of impl/ops/cli.py by `register(main)` beside impl/ops/cli_ops.py's commands:

    belay queue put|show|pause|resume|delete | cron list|put|pause|resume|delete | prune --dry-run

The options, output and exit codes are those of every day-2 command (impl/ops/cli_ops.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable

import click

from impl.ops.cli_ops import Out, _json_arg, _table, operator_command


def register(main: click.Group) -> None:
    """Add the queue, cron and prune commands to the `belay` group."""

    def name_command(group: click.Group, command: str, help: str, act: Callable, say: Callable, *, app: bool = False):
        """`belay GROUP COMMAND NAME [--app MODULE]`: `act(op, name, app)`, then its result as JSON or the line
        `say(name, done)` (the shape of queue resume/delete and cron pause/resume/delete)."""

        def run(op, out: Out, name: str, app: str | None = None) -> None:
            done = act(op, name, app)
            out.json(done) if out.as_json else click.echo(say(name, done))

        cmd = operator_command(run)
        group.command(command, help=help)(click.argument("name")(app_option(cmd) if app else cmd))

    app_option = click.option(
        "--app", default=None, help="MODULE[:ATTR] Registry whose static crons (Registry.cron) are included"
    )

    @main.group("queue")
    def queue_group() -> None:
        """Runtime queue options (belay_queues), reconciled by every reference node."""

    @queue_group.command("put")
    @click.argument("name")
    @click.option("--opts", "raw", default=None, help="the whole options object as JSON")
    @click.option("--limit", type=click.IntRange(min=1), default=None, help="per-node concurrency")
    @click.option("--limit-min", type=click.IntRange(min=1), default=None, help="adaptive concurrency floor")
    @click.option("--global-limit", type=click.IntRange(min=1), default=None, help="fleet-wide running cap")
    @click.option("--rate", default=None, metavar="ALLOWED/PERIOD", help="rate limit, e.g. 100/60")
    @click.option("--rate-estimate", type=click.IntRange(min=1), default=None)
    @click.option("--rate-resource", default=None, help="share the rate bucket resource:<name>")
    @click.option("--partition", default=None, metavar="FIELD.KEY", help="partitioned claims, e.g. input.tenant")
    @operator_command
    def queue_put_cmd(
        op,
        out: Out,
        name: str,
        raw: str | None,
        limit: int | None,
        limit_min: int | None,
        global_limit: int | None,
        rate: str | None,
        rate_estimate: int | None,
        rate_resource: str | None,
        partition: str | None,
    ) -> None:
        """Replace a queue's options (its pause state is kept unless --opts names `paused`). Over MCP,
        queue_put merges instead (replace=true replaces)."""
        opts = _json_arg(raw, "--opts") if raw is not None else {}
        if not isinstance(opts, dict):
            raise click.BadParameter("must be a JSON object", param_hint="--opts")
        if limit is not None:
            opts["limit"] = {"min": limit_min, "max": limit} if limit_min is not None else limit
        elif limit_min is not None:
            raise click.BadParameter("needs --limit (the maximum)", param_hint="--limit-min")
        if global_limit is not None:
            opts["global_limit"] = global_limit
        if rate is not None:
            allowed, sep, period = rate.partition("/")
            if not sep or not allowed.isdigit() or not period.isdigit():
                raise click.BadParameter(f"expected ALLOWED/PERIOD (e.g. 100/60), got {rate!r}", param_hint="--rate")
            opts["rate"] = {"allowed": int(allowed), "period": int(period)}
            if rate_estimate is not None:
                opts["rate"]["estimate"] = rate_estimate
            if rate_resource is not None:
                opts["rate"]["resource"] = rate_resource
        elif rate_estimate is not None or rate_resource is not None:
            raise click.BadParameter("needs --rate", param_hint="--rate-estimate/--rate-resource")
        if partition is not None:
            field_name, sep, key = partition.partition(".")
            if not sep or not key:
                raise click.BadParameter(
                    f"expected FIELD.KEY (e.g. input.tenant), got {partition!r}", param_hint="--partition"
                )
            opts["partition"] = {"field": field_name, "key": key}
        done = op.put_queue(name, opts)
        out.json(done) if out.as_json else click.echo(f"queue {name}: {json.dumps(done['opts'])}")

    @queue_group.command("show")
    @click.argument("name", required=False)
    @operator_command
    def queue_show_cmd(op, out: Out, name: str | None) -> None:
        """Queues (belay_queues rows and queues with jobs): options, pause state, job counts."""
        queues = op.queues(name)
        if out.as_json:
            return out.json(queues if name is None else queues[0])
        _table(
            None,
            ["queue", "paused", "opts", "jobs"],
            [
                [
                    q["name"],
                    "paused" if q["paused"] else "",
                    json.dumps(q["opts"]),
                    ", ".join(f"{s}={n}" for s, n in sorted(q["counts"].items())),
                ]
                for q in queues
            ],
        )

    @queue_group.command("pause")
    @click.argument("name")
    @click.option("--create", is_flag=True, help="pause NAME even though it has no belay_queues row and no jobs yet")
    @operator_command
    def queue_pause_cmd(op, out: Out, name: str, create: bool) -> None:
        """Stop every reference node claiming from NAME (running jobs finish; other options kept).
        A NAME with neither a row nor jobs is refused as a likely typo unless --create."""
        done = op.pause(name, create=create)
        out.json(done) if out.as_json else click.echo(
            f"queue {name} paused (reference nodes stop claiming within their queue refresh interval)"
        )

    # --- crons (§8.5) ---------------------------------------------------------------------------------

    @main.group("cron")
    def cron_group() -> None:
        """Crons: belay_crons rows (runtime CRUD) merged by name over the static crons an app's registry
        declares beside its kinds (Registry.cron); pass --app to see and pause those too."""

    def _static(app: str | None) -> tuple:
        if app is None:
            return ()
        from impl.ops.replay import ReplayError, load_registry

        try:
            return load_registry(app).static_crons()
        except (ImportError, AttributeError, ReplayError) as exc:
            raise click.BadParameter(str(exc), param_hint="--app") from None

    def _cron_rows(crons: list[dict]) -> None:
        _table(
            None,
            ["cron", "expression", "kind", "queue", "state", "next slots (UTC)", "last fired", "source"],
            [
                [
                    c["name"],
                    c["expression"],
                    c["kind"],
                    c["queue"],
                    "paused" if c["paused"] else "active",
                    ", ".join(s[:16].replace("T", " ") for s in c["next_slots"]) or "none (paused)",
                    f"job {c['last_fired']['job_id']} ({c['last_fired']['state']}) at {c['last_fired']['slot'][:16]}"
                    if c["last_fired"]
                    else "never",
                    c["source"],
                ]
                for c in crons
            ],
        )

    @cron_group.command("list")
    @click.argument("name", required=False)
    @app_option
    @click.option("--slots", type=click.IntRange(0, 100), default=3, show_default=True, help="next due slots to show")
    @operator_command
    def cron_list_cmd(op, out: Out, name: str | None, app: str | None, slots: int) -> None:
        """Crons with their expression, next due UTC minute slots, last fired job and pause state."""
        crons = op.crons(name, static=_static(app), slots=slots)
        if out.as_json:
            return out.json(crons if name is None else crons[0])
        _cron_rows(crons)
        if not crons:
            click.echo("no crons" + ("" if app else " in belay_crons (static crons of an app: --app MODULE)"))

    @cron_group.command("put")
    @click.argument("name")
    @click.argument("expression")
    @click.argument("kind")
    @click.option("--input", "raw_input", default=None, metavar="JSON", help="the job input (default: {})")
    @click.option("--queue", default=None, help="queue of the jobs (default: 'default')")
    @click.option("--priority", type=int, default=None)
    @click.option("--max-attempts", type=click.IntRange(min=1), default=None)
    @click.option("--paused/--active", "paused", default=None, help="the pause state (default: kept)")
    @operator_command
    def cron_put_cmd(
        op,
        out: Out,
        name: str,
        expression: str,
        kind: str,
        raw_input: str | None,
        queue: str | None,
        priority: int | None,
        max_attempts: int | None,
        paused: bool | None,
    ) -> None:
        """Create or replace cron NAME: every UTC minute slot matching EXPRESSION (five fields, e.g.
        '*/5 * * * *') inserts one job of KIND, exactly once across the fleet."""
        opts = {
            k: v for k, v in (("queue", queue), ("priority", priority), ("max_attempts", max_attempts)) if v is not None
        }
        done = op.put_cron(name, expression, kind, _json_arg(raw_input, "--input"), opts, paused=paused)
        if out.as_json:
            return out.json(done)
        _cron_rows([done])

    # The commands of one shape, NAME [--app]: one Operator call, then JSON or one line.
    for group, command, help, act, say, app in (
        (
            queue_group,
            "resume",
            "Let reference nodes claim from NAME again.",
            lambda op, name, app: op.resume(name),
            lambda name, done: f"queue {name} resumed",
            False,
        ),
        (
            queue_group,
            "delete",
            "Remove NAME's belay_queues row (nodes run it on their static options again; its jobs stay).",
            lambda op, name, app: op.delete_queue(name),
            lambda name, done: f"queue {name}: row deleted (it had {json.dumps(done['opts'])})",
            False,
        ),
        (
            cron_group,
            "pause",
            "Stop NAME firing on every node (a static cron gets a paused belay_crons row).",
            lambda op, name, app: op.set_cron_paused(name, True, static=_static(app)),
            lambda name, done: f"cron {name} paused",
            True,
        ),
        (
            cron_group,
            "resume",
            "Let NAME fire again (from its next slot: paused slots are not fired afterwards).",
            lambda op, name, app: op.set_cron_paused(name, False, static=_static(app)),
            lambda name, done: f"cron {name} resumed; next slots: {', '.join(done['next_slots']) or 'none'}",
            True,
        ),
        (
            cron_group,
            "delete",
            "Remove NAME's belay_crons row (a static cron of the same name fires again).",
            lambda op, name, app: op.delete_cron(name),
            lambda name, done: f"cron {name}: row deleted",
            False,
        ),
    ):
        name_command(group, command, help, act, say, app=app)

    @main.command("prune")
    @click.option("--dry-run", is_flag=True, help="only report what would be deleted")
    @click.option("--succeeded", default="86400", show_default=True, help="retention seconds, or 'infinity'")
    @click.option("--failed", default=str(7 * 86400), show_default=True, help="retention seconds, or 'infinity'")
    @click.option("--cancelled", default=str(7 * 86400), show_default=True, help="retention seconds, or 'infinity'")
    @click.option("--signal-ttl", default=str(7 * 86400), show_default=True, help="seconds, or 'infinity'")
    @operator_command
    def prune_cmd(op, out: Out, dry_run: bool, succeeded: str, failed: str, cancelled: str, signal_ttl: str) -> None:
        """§8.7 retention now: terminal jobs past retention (with steps and events), old signals."""

        def seconds(value: str, what: str) -> int | None:
            if value.lower() in ("infinity", "inf", "forever"):
                return None
            if not value.isdigit():
                raise click.BadParameter(f"expected seconds or 'infinity', got {value!r}", param_hint=what)
            return int(value)

        retention = {
            "succeeded": seconds(succeeded, "--succeeded"),
            "failed": seconds(failed, "--failed"),
            "cancelled": seconds(cancelled, "--cancelled"),
        }
        done = op.prune(retention, seconds(signal_ttl, "--signal-ttl"), dry_run=dry_run)
        if out.as_json:
            return out.json(done)
        if dry_run:
            jobs = ", ".join(f"{s} {n}" for s, n in sorted(done["jobs"].items())) or "none"
            click.echo(
                f"dry run at {done['now']}: would delete jobs: {jobs} (with {done['steps']} steps, "
                f"{done['events']} events); {done['signals']} signals; {done['rate_windows']} rate windows"
            )
        else:
            click.echo(
                f"pruned {done['pruned_jobs']} jobs, {done['signals']} signals, {done['rate_windows']} rate windows"
            )
