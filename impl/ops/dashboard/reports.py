"""The dashboard's soak reports pages (/reports, /reports/RUN/FILE): the runs of this toolkit's reports
directory with their verdicts, and a run's report files under their own Content-Security-Policy.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import FileResponse, PlainTextResponse, Response

REPORT_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'none'"
RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,200}$")
REPORT_FILES = {"report.html", "results.json", "summary.md"}


def report_routes(reports: Path, render: Callable[..., Response]) -> tuple[Callable[[Request], Response], ...]:
    """The two pages' endpoints over the directory `reports`, rendered with the app's `render`."""

    def reports_page(request: Request) -> Response:
        runs: list[dict[str, Any]] = []
        if reports.is_dir():
            for d in sorted(
                (p for p in reports.iterdir() if p.is_dir() and not p.is_symlink()), key=lambda p: p.name, reverse=True
            ):
                results = d / "results.json"
                if not results.is_file() or not RUN_ID.match(d.name):
                    continue
                try:
                    data = json.loads(results.read_text())
                except (OSError, ValueError) as exc:
                    runs.append({"run_id": d.name, "error": f"unreadable results.json: {exc}"})
                    continue
                meta, stats = data.get("meta") or {}, data.get("stats") or {}
                runs.append(
                    {
                        "run_id": d.name,
                        "verdict": data.get("verdict", "?"),
                        "error": None,
                        "duration": meta.get("elapsed_seconds", meta.get("duration")),
                        "worker": meta.get("worker"),
                        "workers": meta.get("workers"),
                        "jobs": stats.get("jobs_in_database", stats.get("jobs_checked")),
                        "faults": {k: v for k, v in (data.get("faults") or {}).items() if v},
                        "has_html": (d / "report.html").is_file(),
                    }
                )
        return render(request, "reports.html", {"runs": runs, "reports_dir": str(reports)})

    def report_file(request: Request) -> Response:
        run, name = request.path_params["run"], request.path_params["name"]
        path = reports / run / name
        if not RUN_ID.match(run) or name not in REPORT_FILES or not path.is_file():
            return PlainTextResponse("no such report file", status_code=404)
        media = {"report.html": "text/html", "results.json": "application/json", "summary.md": "text/plain"}[name]
        response = FileResponse(path, media_type=media)
        response.headers["Content-Security-Policy"] = REPORT_CSP
        return response

    return reports_page, report_file
