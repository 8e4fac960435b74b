"""The hot routes (impl/http/hot.py): claimTasks and completeRun answered in front of Starlette behave
exactly as the Starlette routes do — the same status codes and Error schema bodies for every failure,
the same §7 fence (a stale or pending run's complete is 409 and changes nothing), the same bearer
check — and every other request still reaches Starlette.

Each non-mutating request is sent twice to one server, once with the hot routes on and once with
them off (`app.hot.enabled`), and the two answers must be identical; `app.hot.served` shows which
requests the hot routes answered themselves.
"""

from __future__ import annotations

import httpx

from impl.http.testing import serve_api
from model.envelope import decode
from tests.http_support import claim_tasks as claim
from tests.http_support import http_api, http_clock, job, make_tasks  # noqa: F401  (fixtures: api, clock)


def answer(r: httpx.Response) -> tuple[int, bytes, str | None, str | None, str | None]:
    return (
        r.status_code,
        r.content,
        r.headers.get("content-type"),
        r.headers.get("www-authenticate"),
        r.headers.get("location"),
    )


def both(api, method: str, path: str, *, hot: bool = True, client: httpx.Client | None = None, **kw):
    """The request answered with the hot routes on, then off; asserts the answers are identical and
    whether the hot routes answered it themselves (`hot`). Returns the response."""
    client = client or api.client
    served = api.app.hot.served
    on = client.request(method, path, **kw)
    assert api.app.hot.served == served + (1 if hot else 0), (method, path, on.status_code, on.text)
    api.app.hot.enabled = False
    try:
        off = client.request(method, path, **kw)
    finally:
        api.app.hot.enabled = True
    assert api.app.hot.served == served + (1 if hot else 0)
    assert answer(on) == answer(off), (method, path)
    return on


CLAIM_400 = [
    b"",
    b"   ",
    b"not json",
    b"[1]",
    b"null",
    b'{"limit": NaN, "claim_timeout": 30}',
    b"\xff\xfe",
    b'{"claim_timeout": 30}',
    b'{"limit": 0, "claim_timeout": 30}',
    b'{"limit": true, "claim_timeout": 30}',
    b'{"limit": "1", "claim_timeout": 30}',
    b'{"limit": 1}',
    b'{"limit": 1, "claim_timeout": 0}',
    b'{"limit": 1, "claim_timeout": 2147483648}',
]


def test_a_bad_claim_body_gets_the_same_400_and_error_body_from_the_hot_route(api):
    (task,) = make_tasks(api, 1)
    for content in CLAIM_400:
        r = both(api, "POST", "/queues/q/tasks/claim", content=content, headers={"content-type": "application/json"})
        assert r.status_code == 400 and r.json()["code"] == "VALIDATION_ERROR", r.text
    assert job(api.belay.conninfo, task)["state"] == "ready"  # nothing was claimed


def test_claims_of_a_missing_queue_or_an_empty_one_answer_alike_and_a_slash_in_a_name_stays_one_segment(api):
    make_tasks(api, 0, queue="a/b")
    r = both(api, "POST", "/queues/nope/tasks/claim", json={"limit": 1, "claim_timeout": 30})
    assert r.status_code == 404 and r.json()["code"] == "QUEUE_NOT_FOUND"
    r = both(api, "POST", "/queues/a%2Fb/tasks/claim", json={"limit": 5, "claim_timeout": 30})
    assert (r.status_code, r.json()) == (200, {"tasks": []})
    r = both(api, "POST", "/queues/a%2fb/tasks/claim?x=1", json={"limit": 5, "claim_timeout": 30})
    assert (r.status_code, r.json()) == (200, {"tasks": []})
    r = both(api, "POST", "/queues/a/b/tasks/claim", json={"limit": 5, "claim_timeout": 30}, hot=False)
    assert r.status_code == 404 and r.json()["code"] == "NOT_FOUND"


def test_requests_the_hot_routes_do_not_own_reach_starlette(api):
    (task,) = make_tasks(api, 1)
    r = both(api, "POST", "/queues/q/tasks/claim/", json={"limit": 1, "claim_timeout": 30}, hot=False)
    assert r.status_code == 307  # Starlette's slash redirect, not a claim
    r = both(api, "GET", "/queues/q/tasks/claim", hot=False)
    assert r.status_code == 405 and r.json()["code"] == "METHOD_NOT_ALLOWED"
    r = both(api, "GET", f"/runs/run_{task.removeprefix('task_')}_1/complete", hot=False)
    assert r.status_code == 405
    r = both(api, "POST", "/runs//complete", json={}, hot=False)
    assert r.status_code == 404 and r.json()["code"] == "NOT_FOUND"
    # a long poll is Starlette's (it watches for the client going away); its validation is the same
    r = both(
        api, "POST", "/queues/q/tasks/claim", json={"limit": 1, "claim_timeout": 30, "long_poll_seconds": 4}, hot=False
    )
    assert r.status_code == 400
    assert job(api.belay.conninfo, task)["state"] == "ready"


def test_a_long_poll_claim_handed_to_starlette_still_reads_its_body_and_claims(api):
    (task,) = make_tasks(api, 1)
    served = api.app.hot.served
    r = api.post("/queues/q/tasks/claim", json={"limit": 1, "claim_timeout": 30, "long_poll_seconds": 5})
    assert r.status_code == 200 and [t["task_id"] for t in r.json()["tasks"]] == [task], r.text
    assert api.app.hot.served == served


def test_a_claim_through_the_hot_route_hands_out_what_the_starlette_route_does(api, clock):
    make_tasks(api, 2, max_attempts=3, params={"x": [1, "two"]}, headers={"h": "v"})
    hot = claim(api, 1)
    api.app.hot.enabled = False
    try:
        cold = claim(api, 1)
    finally:
        api.app.hot.enabled = True
    assert len(hot) == len(cold) == 1
    assert hot[0]["task_id"] != cold[0]["task_id"]
    for t in (*hot, *cold):
        t.pop("task_id")
        t.pop("run_id")
    assert (
        hot
        == cold
        == [{"attempt": 1, "task_name": "work", "params": {"x": [1, "two"]}, "headers": {"h": "v"}, "max_attempts": 3}]
    )


COMPLETE_BAD = [
    (b"null", 400),
    (b"[]", 400),
    (b'"x"', 400),
    (b"{", 400),
    (b'{"result": NaN}', 400),
    (b'{"result": Infinity}', 400),
]


def test_a_bad_complete_body_gets_the_same_error_from_the_hot_route_and_changes_nothing(api, db_url):
    make_tasks(api, 1)
    (t,) = claim(api, 1)
    before = job(db_url, t["run_id"])
    for content, status in COMPLETE_BAD:
        r = both(api, "POST", f"/runs/{t['run_id']}/complete", content=content)
        assert r.status_code == status and r.json()["code"] == "VALIDATION_ERROR", r.text
    assert job(db_url, t["run_id"]) == before


def test_completing_a_run_that_cannot_exist_is_the_same_404(api):
    (task,) = make_tasks(api, 1)
    n = int(task.removeprefix("task_"))
    for run in ["run_999999_1", "nope", "run_0_1", f"run_{n}_0", f"run_{n}_9", f"run_{n}_1x", task, "run_%2F_1"]:
        r = both(api, "POST", f"/runs/{run}/complete", json={"result": 1})
        assert r.status_code == 404 and r.json()["code"] == "RUN_NOT_FOUND", r.text


def test_a_stale_or_pending_runs_complete_is_409_through_the_hot_route_and_changes_nothing(api, db_url, clock):
    (task,) = make_tasks(api, 1, max_attempts=2)
    (first,) = claim(api, 1, timeout=1)  # attempt 1 of `task`
    clock.advance(5)
    api.belay.sweep_once()  # its claim expired: ready again
    (second,) = claim(api, 1)  # attempt 2 of `task` is the live run
    assert second["run_id"] == f"run_{task.removeprefix('task_')}_2"
    (pending_task,) = make_tasks(api, 1)
    before = job(db_url, task)

    r = both(api, "POST", f"/runs/{first['run_id']}/complete", json={"result": "late"})
    assert r.status_code == 409 and r.json()["code"] == "STALE_RUN", r.text
    assert job(db_url, task) == before

    pending = f"run_{pending_task.removeprefix('task_')}_1"
    pending_before = job(db_url, pending_task)
    r = both(api, "POST", f"/runs/{pending}/complete", json={"result": "early"})
    assert r.status_code == 409 and r.json()["code"] == "RUN_NOT_CLAIMED", r.text
    assert job(db_url, pending_task) == pending_before

    served = api.app.hot.served
    r = api.post(f"/runs/{second['run_id']}/complete", json={"result": {"n": 2}})
    assert (r.status_code, r.json()) == (200, {"run_id": second["run_id"], "status": "completed"})
    assert api.app.hot.served == served + 1
    row = job(db_url, task)
    assert (row["state"], decode(bytes(row["result"])), row["finished_at"]) == ("succeeded", {"n": 2}, clock())

    r = both(api, "POST", f"/runs/{second['run_id']}/complete", json={"result": "again"})
    assert r.status_code == 409 and r.json()["code"] == "STALE_RUN"
    assert job(db_url, task) == row


def test_completions_through_the_hot_route_keep_each_runs_result_and_clock(api, db_url, clock):
    make_tasks(api, 4)
    tasks = claim(api, 4)
    results = [None, "é\u2028\x00", {"deep": [1.5, -2, True]}, "x" * 5000]
    for t, result in zip(tasks, results, strict=True):
        clock.advance(0.000123)
        r = api.post(f"/runs/{t['run_id']}/complete", json={"result": result})
        assert r.status_code == 200, r.text
        row = job(db_url, t["run_id"])
        assert (row["state"], decode(bytes(row["result"])), row["finished_at"]) == ("succeeded", result, clock())
    r = api.post(f"/runs/{tasks[0]['run_id']}/complete")  # an omitted body is an empty object
    assert r.status_code == 409


def test_the_hot_routes_ask_for_the_bearer_token_like_every_mutating_route(db_url):
    with serve_api(db_url, token="s3cret") as api:
        assert api.post("/queues", json={"name": "q"}).status_code == 201
        r = api.post("/queues/q/tasks", json={"task_name": "w"})
        assert r.status_code == 201
        task, run = r.json()["task_id"], r.json()["run_id"]
        anonymous = httpx.Client(base_url=api.client.base_url)
        for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic s3cret"}, {"Authorization": ""}):
            r = both(
                api,
                "POST",
                "/queues/q/tasks/claim",
                json={"limit": 1, "claim_timeout": 30},
                client=anonymous,
                headers=headers,
            )
            assert r.status_code == 401 and r.json()["code"] == "UNAUTHORIZED"
            assert r.headers["www-authenticate"] == 'Bearer realm="belay"'
            r = both(api, "POST", f"/runs/{run}/complete", json={"result": 1}, client=anonymous, headers=headers)
            assert r.status_code == 401
        assert job(db_url, task)["state"] == "ready"
        (t,) = claim(api, 1)
        assert api.post(f"/runs/{t['run_id']}/complete", json={}).status_code == 200
        anonymous.close()
