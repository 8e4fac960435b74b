"""The Belay MCP server (spec/belay-operations.txt "Day-2 tooling": "The same inspection surface is
exposed to AI assistants and scripts ... Mutations are disabled unless you pass --authorizer MyGuard
or explicitly opt in with --allow-mutations").

Built on the official `mcp` Python SDK (FastMCP), served over stdio by `belay mcp` (streamable HTTP
with `--transport streamable-http`). Tools:

- read-only (always): stats, list_jobs, get_job (with its journal), steps, events, workflow,
  replay_dry_run, soak_verdict (the latest reports/latest/results.json);
- mutating: retry_job, cancel_job, signal, steer, queue_put. They are listed always, but run only
  when the server was started with `allow_mutations=True` or an `authorizer`; an authorizer is
  called as `authorizer(tool_name, arguments)` before each mutation (also with allow_mutations) and
  a falsy return or an exception refuses it. A refusal is a tool error (isError) that says why and
  changes nothing.

Like the operations guide says, queue-definition CRUD beyond `queue_put` (pause, delete) is not
exposed here.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from impl.operator import Operator, Refused, event_json, job_json, step_json

Authorizer = Callable[[str, dict[str, Any]], Any]
MUTATING = ("retry_job", "cancel_job", "signal", "steer", "queue_put")
JobId = Annotated[int, Field(ge=1, description="a belay_jobs id")]


def load_authorizer(spec: str) -> Authorizer:
    """`module:callable` → the callable."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not attr:
        raise ValueError(f"--authorizer must be MODULE:CALLABLE, got {spec!r}")
    fn = getattr(importlib.import_module(module_name), attr)
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

    op = operator or Operator(database_url, schema=schema)
    mutations = "enabled (authorizer)" if authorizer else "enabled" if allow_mutations else "disabled"
    server = FastMCP(
        "belay",
        instructions=(
            "Inspect a Belay job queue (PostgreSQL): queue stats, jobs and their journals (steps with "
            "costs, events, children, signals), workflows, replay dry-runs and the latest soak verdict. "
            f"Mutating tools (retry, cancel, signal, steer, queue put) are {mutations} on this server."
        ),
    )
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
        state: Annotated[list[str] | None, Field(description="states to include")] = None,
        queue: str | None = None,
        kind: str | None = None,
        workflow_id: str | None = None,
        limit: Annotated[int, Field(ge=1, le=1000)] = 50,
        after: Annotated[int | None, Field(description="next_after of the previous page")] = None,
    ) -> dict:
        """Jobs newest first, keyset-paginated: pass the returned next_after as `after` for the next page."""
        page = run(
            lambda: op.list_jobs(
                states=state or (), queue=queue, kind=kind, workflow_id=workflow_id, limit=limit, after=after
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
        from impl.replay import ReplayError, dry_run

        try:
            return dry_run(op.conninfo, job_id, app, schema=op.schema).to_json()
        except ReplayError as exc:
            raise ToolError(f"refused (not_found): {exc}") from None

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
    def queue_put(name: str, opts: dict[str, Any]) -> dict:
        """Replace a queue's runtime options (limit, global_limit, rate, partition, paused) (mutation)."""
        guard("queue_put", {"name": name, "opts": opts})
        return run(lambda: op.put_queue(name, opts))

    return server
