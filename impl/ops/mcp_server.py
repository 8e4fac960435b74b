"""The Belay MCP server (spec/belay-operations.txt "Day-2 tooling": "The same inspection surface is
exposed to AI assistants and scripts ... Mutations are disabled unless you pass --authorizer MyGuard
or explicitly opt in with --allow-mutations").

Built on the official `mcp` Python SDK (FastMCP), served over stdio by `belay mcp` (streamable HTTP
with `--transport streamable-http`). Tools:

- read-only (always): stats, list_jobs, get_job (with its journal), steps, events, workflow,
  replay_dry_run, soak_verdict (the latest reports/latest/results.json), list_crons, get_cron;
- mutating: retry_job, cancel_job, signal, steer, queue_put, queue_pause, queue_resume. They are
  listed always, but run only when the server was started with `allow_mutations=True` or an
  `authorizer`; an authorizer is called as `authorizer(tool_name, arguments)` before each mutation
  (also with allow_mutations) and a falsy return or an exception refuses it. A refusal is a tool
  error (isError) that says why and changes nothing.

`queue_put` merges its `opts` over the queue's current options key by key (a key given as null is
removed; the pause state is kept); `replace: true` replaces them (the pause state still kept unless
named). `queue_pause` / `queue_resume` change only the pause state. Queue delete is not exposed.

Arguments are checked before a tool runs: an argument the tool does not take is refused (with the
names it does take, and the nearest one), and a value of the wrong type or range is refused with the
argument's name, what it must be and what was given — never a raw validation dump. The server
reports belay-toolkit's version as its own (serverInfo), not the mcp SDK's.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from impl.ops.operator import Operator
from impl.ops.shapes import Refused, event_json, job_json, step_json
from model.rows import STATES

Authorizer = Callable[[str, dict[str, Any]], Any]
MUTATING = ("retry_job", "cancel_job", "signal", "steer", "queue_put", "queue_pause", "queue_resume")
JobId = Annotated[int, Field(ge=1, description="a belay_jobs id")]


def belay_version() -> str:
    """This toolkit's version (the server's own, in its serverInfo)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("belay-toolkit")
    except PackageNotFoundError:  # a checkout that was never installed
        return "0+unknown"


def check_arguments(tool: Any, arguments: dict[str, Any]) -> None:
    """Refuse, with a message a model can act on, arguments the tool does not take and values its
    input schema rejects (raises mcp's ToolError; the call then runs nothing)."""
    from mcp.server.fastmcp.exceptions import ToolError
    from pydantic import ValidationError

    takes = list(tool.parameters.get("properties", {}))
    unknown = [a for a in arguments if a not in takes]
    if unknown:
        hints = []
        for name in unknown:
            near = difflib.get_close_matches(name, takes, n=1)
            hints.append(f"{name!r}" + (f" (did you mean {near[0]!r}?)" if near else ""))
        raise ToolError(
            f"{tool.name}: unknown argument{'s' if len(unknown) > 1 else ''} {', '.join(hints)}; "
            f"{tool.name} takes: {', '.join(takes) or 'no arguments'}; nothing was run"
        )
    meta = tool.fn_metadata
    try:
        meta.arg_model.model_validate(meta.pre_parse_json(arguments))
    except ValidationError as exc:
        raise ToolError(_describe(tool.name, exc.errors(include_url=False), arguments)) from None


def _describe(tool: str, errors: Sequence[Any], arguments: dict[str, Any]) -> str:
    """pydantic's errors as one line per argument: its name, what it must be, what was given."""
    seen, parts = set(), []
    for e in errors:
        loc = [p for p in e.get("loc", ()) if isinstance(p, str)]
        name = loc[0] if loc else "?"
        if name in seen:
            continue
        seen.add(name)
        if e.get("type") == "missing":
            parts.append(f"{tool}: argument {name!r} is required")
            continue
        given = json.dumps(arguments.get(name), default=str)
        parts.append(f"{tool}: argument {name!r} {_must(e)}, got {given}")
    return "; ".join(parts) + "; nothing was run"


def _must(error: Any) -> str:
    kind, ctx = error.get("type", ""), error.get("ctx") or {}
    if kind.startswith("int") or kind == "int_parsing":
        return "must be an integer"
    for key, words in (("ge", "at least"), ("gt", "greater than"), ("le", "at most"), ("lt", "less than")):
        if key in ctx:
            return f"must be {words} {ctx[key]}"
    if kind.startswith("string"):
        return "must be a string"
    if kind.startswith("list"):
        return "must be a list"
    if kind.startswith("dict"):
        return "must be a JSON object"
    if kind.startswith("bool"):
        return "must be true or false"
    return f"is invalid ({error.get('msg', kind)})"


def load_authorizer(spec: str) -> Authorizer:
    """`module:callable` → the callable."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not attr:
        raise ValueError(f"--authorizer must be MODULE:CALLABLE, got {spec!r}")
    from impl.worker import import_app

    fn = getattr(import_app(module_name), attr)
    if not callable(fn):
        raise ValueError(f"{spec} is not callable")
    return fn


def build_server(
    database_url: str,
    *,
    schema: str = "public",
    allow_mutations: bool = False,
    authorizer: Authorizer | None = None,
    reports: str | Path = "reports",
    app: str | None = None,
    operator: Operator | None = None,
) -> Any:
    """A FastMCP server over one database (`server.run("stdio")` serves it)."""
    from mcp.server.fastmcp import FastMCP
    from mcp.server.fastmcp.exceptions import ToolError
    from mcp.types import ToolAnnotations

    class BelayMCP(FastMCP):
        async def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
            tool = self._tool_manager.get_tool(name)
            if tool is not None:
                check_arguments(tool, arguments or {})
            return await super().call_tool(name, arguments)

    op = operator or Operator(database_url, schema=schema)
    mutations = "enabled (authorizer)" if authorizer else "enabled" if allow_mutations else "disabled"
    server = BelayMCP(
        "belay",
        instructions=(
            "Inspect a Belay job queue (PostgreSQL): queue stats, jobs and their journals (steps with "
            "costs, events, children, signals), workflows, crons with their next slots, replay dry-runs "
            "and the latest soak verdict. Mutating tools (retry, cancel, signal, steer, queue put, "
            f"pause, resume) are {mutations} on this server."
        ),
    )
    server._mcp_server.version = belay_version()  # serverInfo: ours, not the mcp SDK's
    read_only = ToolAnnotations(readOnlyHint=True, openWorldHint=False)
    mutating = ToolAnnotations(readOnlyHint=False, destructiveHint=True, openWorldHint=False)

    def run(fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except Refused as exc:
            raise ToolError(f"refused ({exc.kind}): {exc}") from None

    def guard(tool: str, arguments: dict[str, Any]) -> None:
        """Mutations: refused unless allowed; an authorizer decides each call."""
        if authorizer is None and not allow_mutations:
            raise ToolError(
                f"refused: {tool} is a mutation and mutations are disabled on this server — restart "
                "`belay mcp` with --allow-mutations or --authorizer MODULE:CALLABLE; nothing was changed"
            )
        if authorizer is not None:
            try:
                allowed = authorizer(tool, dict(arguments))
            except Exception as exc:  # noqa: BLE001 - the authorizer's refusal, with its reason
                raise ToolError(
                    f"refused by the authorizer: {tool} {json.dumps(arguments, default=str)}: {exc}; "
                    "nothing was changed"
                ) from None
            if not allowed:
                raise ToolError(
                    f"refused by the authorizer: {tool} {json.dumps(arguments, default=str)}; nothing was changed"
                )

    @server.tool(annotations=read_only)
    def stats() -> dict[str, dict[str, int]]:
        """Job counts per queue and state."""
        return run(op.stats)

    @server.tool(annotations=read_only)
    def list_jobs(
        state: Annotated[
            str | list[str] | None,
            Field(description=f"a state or a list of states to include: {', '.join(STATES)}"),
        ] = None,
        queue: str | None = None,
        kind: str | None = None,
        workflow_id: str | None = None,
        parent_id: Annotated[int | None, Field(ge=1, description="only the children of this job")] = None,
        error: Annotated[str | None, Field(description="text in any recorded error (class or detail)")] = None,
        limit: Annotated[int, Field(ge=1, le=1000)] = 50,
        after: Annotated[int | None, Field(description="next_after of the previous page")] = None,
    ) -> dict:
        """Jobs newest first, keyset-paginated: pass the returned next_after as `after` for the next page."""
        states = (state,) if isinstance(state, str) else tuple(state or ())
        page = run(
            lambda: op.list_jobs(
                states=states,
                queue=queue,
                kind=kind,
                workflow_id=workflow_id,
                parent_id=parent_id,
                error=error,
                limit=limit,
                after=after,
            )
        )
        return {"jobs": [job_json(j) for j in page.jobs], "next_after": page.next_after}

    @server.tool(annotations=read_only)
    def get_job(job_id: JobId) -> dict:
        """One job with its journal: attempts and errors, steps with costs, events, children, signals."""
        return run(lambda: op.journal(job_id))

    @server.tool(annotations=read_only)
    def steps(job_id: JobId) -> dict:
        """A job's journal (step values and costs) in order."""
        return {"steps": [step_json(s) for s in run(lambda: op.steps(job_id))]}

    @server.tool(annotations=read_only)
    def events(job_id: JobId, after: Annotated[int, Field(ge=0)] = 0) -> dict:
        """A job's emitted events after sequence number `after`."""
        return {"events": [event_json(e) for e in run(lambda: op.events(job_id, after))]}

    @server.tool(annotations=read_only)
    def workflow(workflow_id: str) -> dict:
        """Every job of a workflow, with member names and dependencies."""
        jobs = run(lambda: op.workflow(workflow_id))
        return {"workflow_id": workflow_id, "jobs": [{**job_json(j), "deps": list(j.wf_deps or ())} for j in jobs]}

    @server.tool(annotations=read_only)
    def replay_dry_run(job_id: JobId) -> dict:
        """What did the job actually do? Its history from the database (and, when the server was given
        the app's registry, a side-effect-free re-execution with the first divergence). Writes nothing."""
        from impl.ops.replay import ReplayError, dry_run

        try:
            return dry_run(op.conninfo, job_id, app, schema=op.schema).to_json()
        except ReplayError as exc:
            raise ToolError(f"refused (not_found): {exc}") from None

    def static_crons() -> tuple:
        """The crons declared in the app's registry (when the server was given --app)."""
        if app is None:
            return ()
        from impl.ops.replay import load_registry

        return load_registry(app).static_crons()

    @server.tool(annotations=read_only)
    def list_crons(
        slots: Annotated[int, Field(ge=0, le=100, description="how many next due slots to list per cron")] = 3,
    ) -> dict:
        """Every cron (belay_crons rows merged over the app's static crons, when the server has --app):
        expression, kind, queue, paused, its next due UTC minute slots and the last job it fired."""
        return {"crons": run(lambda: op.crons(static=static_crons(), slots=slots))}

    @server.tool(annotations=read_only)
    def get_cron(
        name: str,
        slots: Annotated[int, Field(ge=0, le=100, description="how many next due slots to list")] = 10,
    ) -> dict:
        """One cron: expression, kind, queue, paused, next due slots, the last job it fired."""
        return run(lambda: op.crons(name, static=static_crons(), slots=slots))[0]

    @server.tool(annotations=read_only)
    def soak_verdict() -> dict:
        """The latest soak certification verdict (reports/latest/results.json): valid / invalid / unknown
        with each invariant's verdict."""
        path = Path(reports) / "latest" / "results.json"
        if not path.exists():
            raise ToolError(f"no soak report at {path}: run soak/run.sh first")
        data = json.loads(path.read_text())
        return {
            "run_id": data.get("run_id"),
            "verdict": data.get("verdict"),
            "exit_code": data.get("exit_code"),
            "invariants": {
                name: {
                    "verdict": inv.get("verdict"),
                    "checks": inv.get("checks"),
                    "violations": inv.get("violations"),
                    "first_counterexample": inv.get("first_counterexample"),
                }
                for name, inv in (data.get("invariants") or {}).items()
            },
            "stats": data.get("stats"),
            "faults": data.get("faults"),
        }

    @server.tool(annotations=mutating)
    def retry_job(job_id: JobId) -> dict:
        """Retry a failed or cancelled job (mutation)."""
        guard("retry_job", {"job_id": job_id})
        return run(lambda: op.retry(job_id))

    @server.tool(annotations=mutating)
    def cancel_job(job_id: JobId) -> dict:
        """Cancel a job: immediate when parked, cooperative when running (mutation)."""
        guard("cancel_job", {"job_id": job_id})
        return run(lambda: op.cancel(job_id))

    @server.tool(annotations=mutating)
    def signal(scope: str, name: str, payload: Any = None) -> dict:
        """Deliver a signal (scope job:<id>, wf:<workflow>, or any scope) and wake its awaiters (mutation)."""
        guard("signal", {"scope": scope, "name": name, "payload": payload})
        return run(lambda: op.signal(scope, name, payload))

    @server.tool(annotations=mutating)
    def steer(job_id: JobId, payload: Any) -> dict:
        """Send a $steer message to a job, read by its code at the next step (mutation)."""
        guard("steer", {"job_id": job_id, "payload": payload})
        return run(lambda: op.steer(job_id, payload))

    @server.tool(annotations=mutating)
    def queue_put(
        name: str,
        opts: Annotated[
            dict[str, Any],
            Field(description="options to set: limit, global_limit, rate, partition, paused; null removes a key"),
        ],
        replace: Annotated[
            bool, Field(description="replace every option instead of merging (the pause state is kept unless named)")
        ] = False,
    ) -> dict:
        """Set a queue's runtime options, merged key by key over its current ones (mutation)."""
        guard("queue_put", {"name": name, "opts": opts, "replace": replace})
        if replace:
            return run(lambda: op.put_queue(name, {k: v for k, v in opts.items() if v is not None}))
        return run(lambda: op.merge_queue(name, opts))

    @server.tool(annotations=mutating)
    def queue_pause(
        name: str,
        create: Annotated[bool, Field(description="pause a queue with neither a row nor jobs yet")] = False,
    ) -> dict:
        """Stop every reference node claiming from a queue; its other options are kept (mutation)."""
        guard("queue_pause", {"name": name, "create": create})
        return run(lambda: op.pause(name, create=create))

    @server.tool(annotations=mutating)
    def queue_resume(name: str) -> dict:
        """Let reference nodes claim from a paused queue again (mutation)."""
        guard("queue_resume", {"name": name})
        return run(lambda: op.resume(name))

    return server
