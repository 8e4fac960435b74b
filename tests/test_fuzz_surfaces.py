"""A fuzz pass over every operator surface (issue 53): the dashboard's forms, JSON and pages, the HTTP
API, the CLI's arguments and the MCP server's tool arguments, with Hypothesis. Arbitrary text (NUL,
newlines, U+2028, huge numbers) everywhere a user can type. What must hold on every request:

  no 5xx, no traceback in what is answered, and every refusal one clear line (a JSON message or error
  without a newline; a CLI failure `belay: error: …` on one line, a usage error click's `Error:` line;
  an MCP refusal a ToolError, never another exception).

Each test prints its counts (requests by status / exit code); BELAY_FUZZ_EXAMPLES scales them
(default 150 per test). The HTTP API's schema-driven run is tests/test_http_schemathesis.py; this one
sends what the schema does not allow.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import anyio
import httpx
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from impl.http.server import running
from impl.http.testing import serve_api
from impl.ops.cli import main
from impl.ops.dashboard import create_app
from impl.store import PgStore
from model import ops

EXAMPLES = int(os.environ.get("BELAY_FUZZ_EXAMPLES", "150"))
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large],
)
TEXT = st.one_of(
    st.text(max_size=24),
    st.sampled_from(["", " ", "\x00", "a\nb", "\u2028", "-1", "0", "99999999999999999999", "1e3", "%00", "../x"]),
)
NUMBERISH = st.one_of(st.integers(-(2**70), 2**70), TEXT)
JSONS = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False), TEXT),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(TEXT, inner, max_size=3)),
    max_leaves=6,
)
TOKEN = "fuzz-token"


def one_line(text: Any) -> bool:
    return isinstance(text, str) and "\n" not in text and "Traceback" not in text


def report(name: str, counts: Counter) -> None:
    print(
        f"\nfuzz {name}: {sum(counts.values())} requests, " + ", ".join(f"{k}: {v}" for k, v in sorted(counts.items()))
    )


# --- the dashboard ------------------------------------------------------------------------------------

DASH_FIELDS = ("queue", "state", "kind", "workflow", "parent", "error", "before")


def test_fuzz_the_dashboard(db_url):
    counts: Counter = Counter()
    with PgStore(db_url) as store:
        store.apply(ops.Enqueue(datetime.now(UTC), (ops.JobSpec("q", "k"),)))
    app = create_app(db_url, token=TOKEN, reports_dir="/nonexistent", poll_ms=1000)
    with running(app, token=TOKEN) as base, httpx.Client(base_url=base, timeout=30) as http:

        @SETTINGS
        @given(data=st.data())
        def one(data):
            kind = data.draw(st.sampled_from(["signal", "job-action", "jobs", "charts", "workflow", "job", "index"]))
            as_json = data.draw(st.booleans())
            headers = {"Authorization": f"Bearer {TOKEN}", **({"Accept": "application/json"} if as_json else {})}
            if kind == "signal":
                form = {
                    k: data.draw(TEXT)
                    for k in data.draw(st.sets(st.sampled_from(["scope", "name", "payload", "back"])))
                }
                r = http.post("/signals", data=form, headers=headers)
            elif kind == "job-action":
                verb = data.draw(st.sampled_from(["cancel", "retry", "steer"]))
                job = data.draw(st.one_of(st.integers(0, 2**70), st.just(1)))
                r = http.post(
                    f"/jobs/{job}/{verb}", data={"payload": data.draw(TEXT), "confirm": "yes"}, headers=headers
                )
            elif kind == "jobs":
                params = {k: data.draw(TEXT) for k in data.draw(st.sets(st.sampled_from(DASH_FIELDS)))}
                path = data.draw(st.sampled_from(["/jobs", "/fragments/jobs"]))
                r = http.get(path, params=params, headers=headers)
            elif kind == "charts":
                r = http.get("/api/charts", params={"minutes": str(data.draw(NUMBERISH))})
            elif kind == "workflow":
                r = http.get("/workflows/" + quote(data.draw(TEXT), safe=""))
            elif kind == "job":
                r = http.get(f"/jobs/{data.draw(st.integers(0, 2**70))}")
            else:
                params = {k: data.draw(TEXT) for k in data.draw(st.sets(st.sampled_from(["sort", "view", "q"])))}
                r = http.get(data.draw(st.sampled_from(["/", "/fragments/tiles"])), params=params)
            counts[r.status_code] += 1
            assert r.status_code < 500, (kind, r.status_code, r.text[:500])
            assert "Traceback" not in r.text
            if r.headers.get("content-type", "").startswith("application/json"):
                body = r.json()
                for key in ("message", "error"):
                    if key in body:
                        assert one_line(body[key]), body

        one()
    report("dashboard", counts)


# --- the HTTP API -------------------------------------------------------------------------------------


def test_fuzz_the_http_api(db_url):
    counts: Counter = Counter()
    with serve_api(db_url) as api:
        assert api.post("/queues", json={"name": "q"}).status_code == 201
        task = api.post("/queues/q/tasks", json={"task_name": "t"}).json()

        @SETTINGS
        @given(data=st.data())
        def one(data):
            seg = lambda: quote(data.draw(st.one_of(TEXT, st.just(task["task_id"]), st.just(task["run_id"]))), safe="")  # noqa: E731
            body = data.draw(
                st.one_of(
                    JSONS,
                    st.dictionaries(
                        st.sampled_from(
                            [
                                "name",
                                "task_name",
                                "params",
                                "max_attempts",
                                "limit",
                                "claim_timeout",
                                "error",
                                "result",
                                "run_at",
                                "state",
                                "owner_run",
                                "event_name",
                                "payload",
                                "timeout_seconds",
                                "task_id",
                                "step_name",
                                "status",
                                "workflow_name",
                                "workflow_run_id",
                                "retry_strategy",
                                "cleanup",
                                "headers",
                                "extend_claim_by",
                            ]
                        ),
                        JSONS,
                    ),
                )
            )
            route = data.draw(
                st.sampled_from(
                    [
                        ("POST", "/queues"),
                        ("POST", "/queues/{q}/tasks"),
                        ("POST", "/queues/{q}/tasks/claim"),
                        ("DELETE", "/queues/{s}"),
                        ("GET", "/queues/{s}/stats"),
                        ("POST", "/runs/{s}/complete"),
                        ("POST", "/runs/{s}/fail"),
                        ("POST", "/runs/{s}/schedule"),
                        ("POST", "/runs/{s}/wait-for-event"),
                        ("PUT", "/tasks/{s}/checkpoints/{s}"),
                        ("GET", "/tasks/{s}/checkpoints/{s}"),
                        ("POST", "/events"),
                        ("POST", "/workflow-runs"),
                        ("PATCH", "/workflow-runs/{s}"),
                        ("GET", "/runs"),
                        ("GET", "/tasks"),
                    ]
                )
            )
            method, path = route
            path = path.replace("{q}", data.draw(st.sampled_from(["q", quote(data.draw(TEXT), safe="") or "x"])))
            while "{s}" in path:
                path = path.replace("{s}", seg() or "x", 1)
            params = (
                {
                    k: data.draw(TEXT)
                    for k in data.draw(
                        st.sets(
                            st.sampled_from(
                                ["queue_name", "status", "state", "cursor", "limit", "task_id", "task_name"]
                            )
                        )
                    )
                }
                if method == "GET"
                else None
            )
            raw = data.draw(st.booleans())
            content = data.draw(TEXT).encode() if raw else json.dumps(body).encode()
            r = api.request(
                method,
                path,
                content=None if method in ("GET", "DELETE") else content,
                params=params,
                headers={"Content-Type": "application/json"},
            )
            counts[r.status_code] += 1
            assert r.status_code < 500, (method, path, content[:200], r.status_code, r.text[:500])
            assert "Traceback" not in r.text
            if r.status_code >= 400 and r.headers.get("content-type", "").startswith("application/json"):
                err = r.json()
                assert set(err) == {"error", "code"} and one_line(err["error"]), err
            elif r.status_code >= 400:  # a path no route matches: Starlette's own one-line answer
                assert r.status_code in (404, 405) and one_line(r.text), (r.status_code, r.text[:300])

        one()
    report("http api", counts)


# --- the CLI ------------------------------------------------------------------------------------------

REFUSED = "postgresql://fuzz@127.0.0.1:1/fuzz"
CLI = [
    ("jobs", "show", "{i}"),
    ("jobs", "list", "--queue", "{t}", "--state", "{t}", "--limit", "{n}"),
    ("retry", "{i}"),
    ("cancel", "{i}"),
    ("signal", "{t}", "{t}", "--payload", "{t}"),
    ("steer", "{i}", "--payload", "{t}"),
    ("stats",),
    ("steps", "{i}"),
    ("events", "{i}"),
    ("queue", "show", "{t}"),
    ("queue", "put", "{t}", "--opts", "{t}"),
    ("queue", "pause", "{t}"),
    ("queue", "resume", "{t}"),
    ("cron", "put", "{t}", "{t}", "{t}"),
    ("cron", "list"),
    ("cron", "pause", "{t}"),
    ("cron", "delete", "{t}"),
    ("prune", "--dry-run", "--failed", "{t}"),
    ("replay", "{i}"),
    ("status",),
    # a server that could start would serve forever: these get a database that refuses (they must stop)
    ("dashboard", "--port", "{n}", "--host", "{t}", "--database-url", REFUSED),
    ("serve", "--port", "{n}", "--token", "{t}", "--database-url", REFUSED),
]


def test_fuzz_the_cli(db_url):
    counts: Counter = Counter()
    runner = CliRunner()

    @SETTINGS
    @given(data=st.data())
    def one(data):
        template = data.draw(st.sampled_from(CLI))
        args = []
        for a in template:
            if a == "{i}":
                a = str(data.draw(NUMBERISH))
            elif a == "{n}":
                a = str(data.draw(st.one_of(st.integers(-(2**40), 2**40), TEXT)))
            elif a == "{t}":
                a = data.draw(TEXT).replace("\x00", "")  # argv cannot hold NUL
            args.append(a)
        if data.draw(st.booleans()) and template[0] not in ("dashboard", "serve", "status"):
            args.append("--json")
        r = runner.invoke(main, args, env={"BELAY_DATABASE_URL": db_url})
        counts[r.exit_code] += 1
        out = r.stdout + r.stderr
        assert r.exit_code in (0, 1, 2, 3), (args, r.exit_code, out[-1000:], r.exception)
        assert "Traceback" not in out, (args, out[-2000:])
        assert not (r.exception and not isinstance(r.exception, SystemExit)), (args, repr(r.exception))
        if r.exit_code == 1 and "--json" not in args:
            assert r.stderr.startswith("belay: error: "), (args, r.stderr)
            assert len([ln for ln in r.stderr.splitlines() if ln.startswith("belay")]) == 1, (args, r.stderr)
        if r.exit_code == 2:
            assert any(ln.startswith("Error: ") for ln in r.stderr.splitlines()), (args, r.stderr)

    one()
    report("cli", counts)


# --- the MCP server -----------------------------------------------------------------------------------


def test_fuzz_the_mcp_tools(db_url, tmp_path):
    from mcp.server.fastmcp.exceptions import ToolError

    from impl.ops.mcp_server import build_server

    counts: Counter = Counter()
    server = build_server(db_url, allow_mutations=True, reports=tmp_path)
    tools = anyio.run(server.list_tools)
    names = {t.name: list(t.inputSchema.get("properties", {})) for t in tools}

    @SETTINGS
    @given(data=st.data())
    def one(data):
        name = data.draw(st.sampled_from(sorted(names)))
        keys = data.draw(st.sets(st.sampled_from([*names[name], "jobid", "extra"])))
        args = {k: data.draw(st.one_of(JSONS, st.integers(-(2**70), 2**70))) for k in keys}
        try:
            anyio.run(server.call_tool, name, args)
            counts["ok"] += 1
        except ToolError as exc:
            counts["refused"] += 1
            assert one_line(str(exc)) or str(exc).count("\n") == 0, (name, args, str(exc))
        except Exception as exc:  # noqa: BLE001 - the finding
            pytest.fail(f"{name}({args!r}) raised {type(exc).__name__}: {exc}")

    one()
    report("mcp", counts)
