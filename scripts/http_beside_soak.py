"""HTTP clients beside a soak (issue 53): against `belay serve` on the soak's database, create tasks in
queue http-q (max_attempts 1), claim them with a 1 s claim_timeout and let about half expire, for
SECONDS; then claim and complete what is left (every claim must be at attempt 1). Prints the counts; the
database then says how many were lost (state failed). docs/surfaces.md has the commands.

    python scripts/http_beside_soak.py SECONDS [BASE_URL]
"""

import json
import random
import sys
import threading
import time

import httpx

base = sys.argv[2] if len(sys.argv) > 2 else "http://127.0.0.1:18093/api/v1"
stop_at = time.monotonic() + float(sys.argv[1])
created, expired_on_purpose, completed = [], 0, 0
lock = threading.Lock()


def client(n):
    global expired_on_purpose, completed
    rnd = random.Random(n)  # noqa: S311 - a test load, not a secret
    with httpx.Client(base_url=base, timeout=30) as h:
        while time.monotonic() < stop_at:
            r = h.post("/queues/http-q/tasks", json={"task_name": "t", "max_attempts": 1, "params": {"c": n}})
            if r.status_code == 201:
                with lock:
                    created.append(r.json()["task_id"])
            got = h.post("/queues/http-q/tasks/claim", json={"limit": 2, "claim_timeout": 1}).json().get("tasks", [])
            for t in got:
                if rnd.random() < 0.5:
                    with lock:
                        expired_on_purpose += 1  # drop it: the claim expires
                else:
                    r = h.post(f"/runs/{t['run_id']}/complete", json={"result": 1})
                    if r.status_code == 200:
                        with lock:
                            completed += 1
            time.sleep(0.05)


for _ in range(60):
    try:
        httpx.get(base + "/queues", timeout=2)
        break
    except httpx.HTTPError:
        time.sleep(0.5)
httpx.post(base + "/queues", json={"name": "http-q"})
ts = [threading.Thread(target=client, args=(i,)) for i in range(4)]
[t.start() for t in ts]
[t.join() for t in ts]
# drain: claim everything left with a long timeout and complete it
deadline = time.monotonic() + 120
with httpx.Client(base_url=base, timeout=30) as h:
    while time.monotonic() < deadline:
        got = h.post("/queues/http-q/tasks/claim", json={"limit": 100, "claim_timeout": 60}).json().get("tasks", [])
        for t in got:
            assert t["attempt"] == 1, t
            h.post(f"/runs/{t['run_id']}/complete", json={"result": 1})
        listed = h.get("/tasks", params={"queue_name": "http-q", "limit": 1000}).json()["tasks"]
        states = {}
        for t in listed:
            states[t["state"]] = states.get(t["state"], 0) + 1
        if set(states) <= {"completed", "failed", "canceled"}:
            break
        time.sleep(1)
print(json.dumps({"created": len(created), "expired_on_purpose": expired_on_purpose, "states": states}))
