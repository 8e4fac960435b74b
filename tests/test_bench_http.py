"""bench/http.py's clients do the API's real protocol: claim up to `batch` runs, complete each run with
its own request, check every status code — so the throughput bench counts only work the database
holds as done, whichever client (`lean` or `threads`) drives it.
"""

from __future__ import annotations

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from bench.http import CLIENTS, completed, fill
from impl.http.server import running
from impl.http.testing import serve_api


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_each_client_claims_in_batches_and_completes_every_task_with_its_own_request(db_url, client):
    with serve_api(db_url) as api:
        assert api.post("/queues", json={"name": "b"}).status_code == 201
        fill(db_url, "b", 25)
        served = api.app.hot.served
        done, requests, seconds = CLIENTS[client](api.base + "/api/v1", "b", 3, 4)
        assert api.app.hot.served - served == requests and seconds > 0  # every request was a claim or complete
        assert done == completed(db_url, "b") == 25
        # 25 completes, at least ceil(25 / 4) claims that returned runs, one empty claim per worker
        assert 25 + 7 + 3 <= requests <= 25 + 25 + 3


def _refusing_server():
    handed_out: list[str] = []

    async def claim(request: Request) -> JSONResponse:  # one run, then an empty queue
        tasks = [] if handed_out else [{"run_id": "run_1_1"}]
        handed_out.extend(t["run_id"] for t in tasks)
        return JSONResponse({"tasks": tasks})

    async def complete(request: Request) -> JSONResponse:
        return JSONResponse({"error": "no", "code": "STALE_RUN"}, status_code=409)

    return Starlette(
        routes=[
            Route("/api/v1/queues/{q}/tasks/claim", claim, methods=["POST"]),
            Route("/api/v1/runs/{r}/complete", complete, methods=["POST"]),
        ]
    )


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_each_client_stops_at_a_refused_completion_instead_of_counting_it(client):
    with running(_refusing_server()) as base, pytest.raises(AssertionError, match=r"409|STALE_RUN"):
        CLIENTS[client](base + "/api/v1", "b", 1, 1)
