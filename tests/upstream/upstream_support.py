"""Support for running the Durable Execution API's own clients against `belay serve` (issue 28).

The upstream project (github.com/cornelmarck/durable-execution: clients/python, clients/go, examples/)
is not ours to commit: these tests find a checkout of it through $BELAY_UPSTREAM and are skipped, with
a one-line reason, when that is unset or lacks the client. Nothing of it is copied here.

- `belay_serve(db_url)` starts `belay serve` (the real CLI, a subprocess, the real clock, the sweeper
  every 0.2 s) on a free loopback port and yields its base URL.
- `SpecChecker` holds every answer a client receives to docs/spec/durable-execution-api.openapi.yaml:
  the path and method must be an operation of the spec (GET /tasks, the extension the reference clients
  call, is checked against the item shape those clients decode), the status one the operation
  documents, or an error status answered with the spec's Error schema, and the body must validate
  against the documented schema. `nullable: true` (OpenAPI 3.0 wording in a 3.1 document) is read as
  the spec means it: the value may be null.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import yaml

from impl.http.server import free_port

REPO = Path(__file__).resolve().parents[2]
SPEC = REPO / "docs" / "spec" / "durable-execution-api.openapi.yaml"
ENV = "BELAY_UPSTREAM"


def upstream_dir(*needs: str) -> tuple[Path | None, str]:
    """The checkout named by $BELAY_UPSTREAM and '' — or None and why the tests are skipped."""
    root = os.environ.get(ENV)
    if not root:
        return None, f"${ENV} is unset (point it at a checkout of cornelmarck/durable-execution)"
    path = Path(root)
    for need in needs:
        if not (path / need).exists():
            return None, f"${ENV}={root} has no {need}"
    return path, ""


@contextmanager
def belay_serve(db_url: str, *, sweep_interval: float = 0.2) -> Iterator[str]:
    """`belay serve` on a free loopback port against db_url; yields http://127.0.0.1:PORT."""
    port = free_port()
    argv = [sys.executable, "-m", "impl.ops.cli", "serve", "--database-url", db_url, "--port", str(port)]
    with tempfile.TemporaryFile(mode="w+") as log:
        proc = subprocess.Popen(
            [*argv, "--sweep-interval", str(sweep_interval)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "BELAY_HTTP_TOKEN": ""},
            cwd=REPO,
        )
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    if httpx.get(f"{base}/openapi.json", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    raise RuntimeError(f"belay serve did not start: {log.read()[-2000:]}")
                time.sleep(0.1)
            yield base
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


# The item GET /tasks answers, as both reference clients decode it (Python TaskSummary, Go
# apiv1.TaskSummary): GET /tasks is not in the spec.
_TASK_SUMMARY = {
    "type": "object",
    "required": ["id", "task_name", "status", "queue_name", "max_attempts", "created_at"],
    "properties": {
        "id": {"type": "string"},
        "task_name": {"type": "string"},
        "status": {"type": "string"},
        "queue_name": {"type": "string"},
        "max_attempts": {"type": "integer"},
        "created_at": {"type": "string", "format": "date-time"},
        "completed_at": {"type": ["string", "null"], "format": "date-time"},
    },
}
_LIST_TASKS = {
    "operationId": "listTasks (extension)",
    "responses": {
        "200": {
            "content": {
                "application/json": {
                    "schema": {
                        "type": "object",
                        "required": ["tasks"],
                        "properties": {
                            "tasks": {"type": "array", "items": _TASK_SUMMARY},
                            "next_cursor": {"type": "string"},
                        },
                    }
                }
            }
        }
    },
}


_FORMATS = jsonschema.FormatChecker()


@_FORMATS.checks("date-time", raises=ValueError)
def _date_time(value: object) -> bool:
    """RFC 3339 with a time zone (what `format: date-time` means)."""
    if not isinstance(value, str):
        return True
    if re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)", value) is None:
        raise ValueError(f"{value!r} is not an RFC 3339 date-time")
    datetime.fromisoformat(value)
    return True


def _inline(node: Any, spec: dict[str, Any]) -> Any:
    """The schema with every $ref replaced by its target and `nullable: true` as a null type."""
    if isinstance(node, list):
        return [_inline(n, spec) for n in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target: Any = spec
        for part in node["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        return _inline(target, spec)
    out = {k: _inline(v, spec) for k, v in node.items() if k != "nullable"}
    if node.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"] if isinstance(out["type"], str) else [*out["type"], "null"]
    return out


class SpecChecker:
    """Every answer a client receives, checked against the OpenAPI document; `seen` records
    (operationId, status) of every answer, `problems` what did not conform."""

    def __init__(self) -> None:
        spec = yaml.safe_load(SPEC.read_text())
        self.error_schema = _inline(spec["components"]["schemas"]["Error"], spec)
        self.routes: list[tuple[re.Pattern[str], str, dict[str, Any]]] = []
        for path, item in spec["paths"].items():
            pattern = re.compile("^/api/v1" + re.sub(r"\{[^}]+\}", "[^/]+", path) + "$")
            for method, op in item.items():
                self.routes.append((pattern, method.upper(), _inline(op, spec)))
        self.routes.append((re.compile("^/api/v1/tasks$"), "GET", _LIST_TASKS))
        self.seen: list[tuple[str, int]] = []
        self.problems: list[str] = []

    def operation(self, method: str, path: str) -> dict[str, Any] | None:
        for pattern, m, op in self.routes:
            if m == method and pattern.match(path):
                return op
        return None

    def check(self, method: str, path: str, status: int, body: bytes) -> None:
        where = f"{method} {path} -> {status}"
        op = self.operation(method, path)
        if op is None:
            self.problems.append(f"{where}: not an operation of the OpenAPI")
            return
        self.seen.append((op["operationId"], status))
        documented = op.get("responses", {}).get(str(status))
        if documented is None and status < 400:
            self.problems.append(f"{where}: status not documented for {op['operationId']}")
            return
        if status == 204:
            if body:
                self.problems.append(f"{where}: a 204 with a body")
            return
        schema = self.error_schema
        if documented is not None:
            schema = documented.get("content", {}).get("application/json", {}).get("schema", {})
        try:
            value = json.loads(body)
        except ValueError:
            self.problems.append(f"{where}: not JSON: {body[:200]!r}")
            return
        errors = sorted(jsonschema.Draft202012Validator(schema, format_checker=_FORMATS).iter_errors(value), key=str)
        for error in errors:
            at = "/".join(str(p) for p in error.absolute_path) or "(body)"
            self.problems.append(f"{where}: {at}: {error.message}")

    def hook(self, response: httpx.Response) -> None:
        """An httpx response event hook."""
        response.read()
        self.check(response.request.method, response.request.url.path, response.status_code, response.content)

    def assert_clean(self) -> None:
        assert not self.problems, "answers that depart from the OpenAPI:\n" + "\n".join(self.problems)
